"""The instruction set, written once.

The gateware decodes :data:`Instr` views; the host builds :class:`Load`, :class:`Matmul` and
:class:`Store` objects and encodes them with :func:`encode`, whose bit positions are read off the
same Amaranth layouts (a test checks them against ``Instr.const(...).as_bits()``).

Every instruction is 128 bits: a 4-bit opcode, four dependency flags, and a 120-bit body.

Three units run concurrently: the load unit (LOAD), the execute unit (MATMUL) and the store unit
(STORE). They synchronise through four token channels, as in TVM VTA: load->execute (operands are
loaded), execute->load (operand buffers may be overwritten), execute->store (results are in the
accumulator) and store->execute (accumulator rows may be overwritten). Each instruction may pop a
token from the unit before it (``pop_prev``) or after it (``pop_next``) before it starts, and push
one to either after it finishes. For the load unit "next" is the execute unit; for the execute unit
"prev" is load and "next" is store; for the store unit "prev" is execute.
"""

import dataclasses
from dataclasses import dataclass

from amaranth.lib import data, enum

__all__ = [
    "INSTR_WIDTH", "FIELD_WIDTH", "FIELD_MAX", "TOKEN_MAX",
    "Opcode", "Target", "DepFlags", "LoadBody", "MatmulBody", "StoreBody", "Body", "Instr",
    "Load", "Matmul", "Store", "IllegalInstruction", "encode", "decode", "unit_of",
]

INSTR_WIDTH = 128
#: Width of every address and count field.
FIELD_WIDTH = 16
FIELD_MAX = (1 << FIELD_WIDTH) - 1
#: Tokens a channel can hold; a unit does not start an instruction that would push past this.
TOKEN_WIDTH = 8
TOKEN_MAX = (1 << TOKEN_WIDTH) - 1


class Opcode(enum.Enum, shape=4):
    """Opcodes. Zero and every unlisted value are illegal: an all-zero word stops as an error."""
    LOAD = 1
    MATMUL = 2
    STORE = 3


class Target(enum.Enum, shape=1):
    """The scratchpad a LOAD writes."""
    SPAD_A = 0  # rows-wide operand rows (the left-hand matrix)
    SPAD_B = 1  # cols-wide weight rows (the right-hand matrix)


DepFlags = data.StructLayout({
    "pop_prev":  1,
    "pop_next":  1,
    "push_prev": 1,
    "push_next": 1,
})

#: LOAD: take ``count`` beats from the data stream into ``target`` rows ``addr``.. .
LoadBody = data.StructLayout({
    "target": Target,
    "addr":   FIELD_WIDTH,
    "count":  FIELD_WIDTH,
})

#: MATMUL: preload the weight block B = spad_b[b_addr : b_addr + rows] into the array, then
#: stream A = spad_a[a_addr : a_addr + m_len] through it and write A @ B into
#: acc[acc_addr : acc_addr + m_len], adding to what is there when ``accumulate`` is set.
MatmulBody = data.StructLayout({
    "a_addr":     FIELD_WIDTH,
    "b_addr":     FIELD_WIDTH,
    "acc_addr":   FIELD_WIDTH,
    "m_len":      FIELD_WIDTH,
    "accumulate": 1,
})

#: STORE: send acc[acc_addr : acc_addr + count] to the output stream, one row a beat.
StoreBody = data.StructLayout({
    "acc_addr": FIELD_WIDTH,
    "count":    FIELD_WIDTH,
})

Body = data.UnionLayout({
    "load":   LoadBody,
    "matmul": MatmulBody,
    "store":  StoreBody,
    "raw":    INSTR_WIDTH - 8,
})

Instr = data.StructLayout({
    "opcode": Opcode,
    "deps":   DepFlags,
    "body":   Body,
})
assert Instr.size == INSTR_WIDTH


class IllegalInstruction(ValueError):
    """A word that does not decode to an instruction."""


@dataclass(frozen=True, kw_only=True)
class _Base:
    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False

    def with_deps(self, **flags):
        return dataclasses.replace(self, **flags)


@dataclass(frozen=True, kw_only=True)
class Load(_Base):
    target: Target
    addr: int
    count: int
    opcode = Opcode.LOAD
    body = "load"


@dataclass(frozen=True, kw_only=True)
class Matmul(_Base):
    a_addr: int
    b_addr: int
    acc_addr: int
    m_len: int
    accumulate: bool
    opcode = Opcode.MATMUL
    body = "matmul"


@dataclass(frozen=True, kw_only=True)
class Store(_Base):
    acc_addr: int
    count: int
    opcode = Opcode.STORE
    body = "store"


_CLASSES = {Opcode.LOAD: Load, Opcode.MATMUL: Matmul, Opcode.STORE: Store}
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def unit_of(instr):
    """The unit that runs ``instr``: ``"load"``, ``"exec"`` or ``"store"``."""
    return {Opcode.LOAD: "load", Opcode.MATMUL: "exec", Opcode.STORE: "store"}[instr.opcode]


def _slices(layout, base=0):
    """(offset, width) of each leaf field of a struct layout, read off the layout."""
    out = {}
    for name, field in layout:
        shape = field.shape
        offset = base + field.offset
        if isinstance(shape, data.StructLayout):
            for sub, where in _slices(shape, offset).items():
                out[f"{name}.{sub}"] = where
        else:
            out[name] = (offset, field.width)
    return out


_OPCODE = _slices(data.StructLayout({"opcode": Opcode}))["opcode"]
_DEPS = {name: (Instr["deps"].offset + off, width)
         for name, (off, width) in _slices(DepFlags).items()}
_BODIES = {body: {name: (Instr["body"].offset + Body[body].offset + off, width)
                  for name, (off, width) in _slices(Body[body].shape).items()}
           for body in ("load", "matmul", "store")}


def encode(instr):
    """The 128-bit word of ``instr``, as an int. Fields that do not fit raise ``ValueError``."""
    word = instr.opcode.value << _OPCODE[0]
    for name in _FLAGS:
        word |= int(bool(getattr(instr, name))) << _DEPS[name][0]
    for name, (offset, width) in _BODIES[instr.body].items():
        value = getattr(instr, name)
        value = value.value if isinstance(value, enum.Enum) else int(value)
        if not 0 <= value < (1 << width):
            raise ValueError(f"{type(instr).__name__}.{name} must fit in {width} bits, "
                             f"not {value!r}")
        word |= value << offset
    return word


def decode(word):
    """The instruction object of a 128-bit word; :class:`IllegalInstruction` if there is none."""
    opcode_bits = (word >> _OPCODE[0]) & ((1 << _OPCODE[1]) - 1)
    try:
        opcode = Opcode(opcode_bits)
    except ValueError:
        raise IllegalInstruction(f"illegal opcode {opcode_bits} in word {word:#034x}") from None
    fields = {name: bool((word >> offset) & 1) for name, (offset, _) in _DEPS.items()}
    for name, (offset, width) in _BODIES[_CLASSES[opcode].body].items():
        fields[name] = (word >> offset) & ((1 << width) - 1)
    cls = _CLASSES[opcode]
    if cls is Load:
        fields["target"] = Target(fields["target"])
    if cls is Matmul:
        fields["accumulate"] = bool(fields["accumulate"])
    return cls(**fields)
