"""The instruction set, written once.

The gateware decodes :data:`Instr` views; the host builds :class:`Load`, :class:`Matmul` and
:class:`Store` objects and encodes them with :func:`encode`, whose bit positions are read off the
same Amaranth layouts (a test checks them against ``Instr.const(...).as_bits()``).

Every instruction is 128 bits: a 4-bit opcode, four dependency flags, and a 120-bit body.

Three units run concurrently: the load unit (LOAD), the execute unit (MATMUL) and the store unit
(SET and STORE). They synchronise through four token channels, as in TVM VTA: load->execute (operands are
loaded), execute->load (operand buffers may be overwritten), execute->store (results are in the
accumulator) and store->execute (accumulator rows may be overwritten). Each instruction may pop a
token from the unit before it (``pop_prev``) or after it (``pop_next``) before it starts, and push
one to either after it finishes. For the load unit "next" is the execute unit; for the execute unit
"prev" is load and "next" is store; for the store unit "prev" is execute.
"""

import dataclasses
import functools
import operator
from dataclasses import dataclass

import numpy as np
from amaranth import Cat, Value
from amaranth.lib import data, enum

from ..golden.intops import PROB_DIGIT_BITS

__all__ = [
    "INSTR_WIDTH", "FIELD_WIDTH", "FIELD_MAX", "TOKEN_MAX", "SET_VALUE_WIDTH", "MATMUL_SHIFT",
    "Opcode", "Target", "EpOp", "Dest", "Param", "DepFlags", "LoadHead", "load_head",
    "MatmulHead", "matmul_head", "StoreHead", "store_head",
    "LoadBody", "MatmulBody", "StoreBody", "SetBody", "Body", "Instr", "PmemWord",
    "ParamsLayout", "PARAM_WIDTHS", "TWO_PASS", "is_two_pass", "pack", "PMEM_WORD_BITS",
    "PMEM_SHIFT_BITS", "pmem_pack", "pmem_unpack",
    "Load", "Matmul", "Store", "Set", "IllegalInstruction", "encode", "decode", "raw_fields",
    "raw_columns", "unit_of",
]

INSTR_WIDTH = 128
#: Width of every address and count field.
FIELD_WIDTH = 16
FIELD_MAX = (1 << FIELD_WIDTH) - 1
#: Tokens a channel can hold; a unit does not start an instruction that would push past this.
TOKEN_WIDTH = 8
TOKEN_MAX = (1 << TOKEN_WIDTH) - 1


SET_VALUE_WIDTH = 64

#: The left shift of a MATMUL's products when its ``shift`` flag is set: the high digit plane of
#: 12-bit softmax probabilities (:func:`bertaccel.golden.intops.prob_digits`), whose products
#: are worth 2**6 of the low plane's.
MATMUL_SHIFT = PROB_DIGIT_BITS


class Opcode(enum.Enum, shape=4):
    """Opcodes. Zero and every unlisted value are illegal: an all-zero word stops as an error."""
    LOAD = 1
    MATMUL = 2
    STORE = 3
    SET = 4


class Target(enum.Enum, shape=2):
    """The memory a LOAD writes."""
    SPAD_A = 0  # rows-wide operand rows (the left-hand matrix)
    SPAD_B = 1  # cols-wide weight rows (the right-hand matrix), and LayerNorm residuals
    PMEM = 2    # epilogue parameters: one PmemWord per column; a row takes several beats


class EpOp(enum.Enum, shape=3):
    """The epilogue a STORE applies on its way out of the accumulator (see golden/intops.py)."""
    RAW = 0        # int32 accumulator rows, unchanged
    REQUANT = 1    # (x + bias) * scale, rounded, saturated to int8
    GELU = 2       # int8 GELU (erf form) of x + bias
    SOFTMAX = 3    # 12-bit 4095 * softmax(x + mask) over each row (two passes)
    LAYERNORM = 4  # int8 LayerNorm(x + bias + residual) over each row (two passes)


#: The epilogues that read each row twice (a statistics pass, then the output pass).
TWO_PASS = (EpOp.SOFTMAX, EpOp.LAYERNORM)


def is_two_pass(op):
    """Whether ``op`` is one of :data:`TWO_PASS`: a bool for an :class:`EpOp` member, a 1-bit
    Amaranth value for an Amaranth value (an ``EpOp`` view or signal)."""
    if isinstance(op, EpOp):
        return op in TWO_PASS
    return functools.reduce(operator.or_, (op == member for member in TWO_PASS))


def pack(layout, **fields):
    """The bits of a :class:`~amaranth.lib.data.StructLayout` value from its fields by name,
    each an Amaranth value exactly as wide as its field (no field left out or added).

    Raises
    ------
    ValueError
        If the names differ from the layout's or a value's width from its field's.
    """
    names = [name for name, _ in layout]
    if set(fields) != set(names):
        raise ValueError(f"fields {sorted(fields)} are not the layout's {sorted(names)}")
    parts = []
    for name, field in layout:
        value = Value.cast(fields[name])
        if len(value) != field.width:
            raise ValueError(f"field {name!r} is {field.width} bits wide, not {len(value)}")
        parts.append(value)
    return Cat(*parts)


class Dest(enum.Enum, shape=2):
    """Where a STORE sends its rows."""
    HOST = 0       # the output stream; int8 results travel sign-extended in int32 lanes


class Param(enum.Enum, shape=3):
    """The store unit's scalar parameter registers, written by SET; what each op reads:

    ============  =========  ==========  =======  ==========  ========  =====  =================
    op            MUL0       SHIFT0      MUL1     SHIFT1      ROW_LEN   EPS    FLAGS
    ============  =========  ==========  =======  ==========  ========  =====  =================
    REQUANT       mul        shift                                             bit 0: per column
    GELU          gmul       gshift      omul     oshift
    SOFTMAX       mul        shift                            row_len
    LAYERNORM     xmul       vshift      rmul     gshift      row_len   eps_n2
    ============  =========  ==========  =======  ==========  ========  =====  =================
    """
    MUL0 = 0
    SHIFT0 = 1
    MUL1 = 2
    SHIFT1 = 3
    ROW_LEN = 4
    EPS = 5
    FLAGS = 6



#: The store unit's parameter registers, as the epilogue receives them: one field a
#: :class:`Param`, named by its lower-case name. A SET keeps the low bits of its value.
ParamsLayout = data.StructLayout({
    "mul0":    16,
    "shift0":  6,
    "mul1":    32,
    "shift1":  6,
    "row_len": 16,
    "eps":     64,
    "flags":   8,
})

#: Width in bits of each parameter register (read off :data:`ParamsLayout`).
PARAM_WIDTHS = {param: ParamsLayout[param.name.lower()].width for param in Param}

#: One column's epilogue parameters in the parameter memory (PMEM).
PmemWord = data.StructLayout({
    "bias": 32,   # int32 bias added to x (REQUANT, GELU, LAYERNORM); additive mask (SOFTMAX)
    "p1":   16,   # LAYERNORM gamma (int16); REQUANT per-column mul (unsigned)
    "p2":   16,   # LAYERNORM beta (int16); REQUANT per-column shift (low PMEM_SHIFT_BITS)
})

#: Bits of one column's :data:`PmemWord`.
PMEM_WORD_BITS = PmemWord.size
#: Bits of ``p2`` that a per-column REQUANT shift uses: those of the SHIFT0 register it
#: stands in for.
PMEM_SHIFT_BITS = PARAM_WIDTHS[Param.SHIFT0]


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

#: What the controller decodes of a LOAD as it queues it (:func:`load_head`), for the load unit
#: to take from registers: ``empty`` (``count`` zero), ``one`` (``count`` one).
LoadHead = data.StructLayout({"empty": 1, "one": 1})


def load_head(body):
    """The :data:`LoadHead` bits of the LOAD ``body`` (a :data:`LoadBody` view), in the
    layout's order."""
    return pack(LoadHead, empty=body.count == 0, one=body.count == 1)

#: MATMUL: preload the weight block B = spad_b[b_addr : b_addr + rows] into the array, then
#: stream A = spad_a[a_addr : a_addr + m_len] through it and write A @ B into
#: acc[acc_addr : acc_addr + m_len], adding to what is there when ``accumulate`` is set; with
#: ``shift`` set the products are shifted left by :data:`MATMUL_SHIFT` first (modulo 2**32).
MatmulBody = data.StructLayout({
    "a_addr":     FIELD_WIDTH,
    "b_addr":     FIELD_WIDTH,
    "acc_addr":   FIELD_WIDTH,
    "m_len":      FIELD_WIDTH,
    "accumulate": 1,
    "shift":      1,
})

#: What the controller decodes of a MATMUL as it queues it (:func:`matmul_head`), for the
#: execute unit to take from registers: ``zero`` (``m_len`` zero), ``final`` (``m_len`` at most
#: one: the stream's first row is its last).
MatmulHead = data.StructLayout({"zero": 1, "final": 1})


def matmul_head(body):
    """The :data:`MatmulHead` bits of the MATMUL ``body`` (a :data:`MatmulBody` view), in the
    layout's order."""
    return pack(MatmulHead, zero=body.m_len == 0, final=body.m_len <= 1)

#: STORE: drain ``rows`` x ``strips`` accumulator rows through the epilogue ``op``. Beat (m, s) --
#: row m of the output, columns s*cols .. s*cols+cols-1 -- is acc[acc_addr + s*stride + m], uses
#: PMEM row param_addr + s and (LAYERNORM) the residual spad_b[aux_addr + s*rows + m]. Beats
#: leave row by row (m outer, s inner); SOFTMAX and LAYERNORM read each row twice.
StoreBody = data.StructLayout({
    "acc_addr":   FIELD_WIDTH,
    "rows":       FIELD_WIDTH,
    "strips":     FIELD_WIDTH,
    "stride":     FIELD_WIDTH,
    "op":         EpOp,
    "dest":       Dest,
    "dest_addr":  FIELD_WIDTH,
    "param_addr": FIELD_WIDTH,
    "aux_addr":   FIELD_WIDTH,
})

#: What the controller decodes of a STORE as it queues it (:func:`store_head`), for the store
#: unit to take from registers: ``empty`` (``rows`` or ``strips`` zero), ``two_pass`` (SOFTMAX,
#: LAYERNORM), ``one_row``, ``two_rows``, ``one_strip``.
StoreHead = data.StructLayout({"empty": 1, "two_pass": 1, "one_row": 1, "two_rows": 1,
                               "one_strip": 1})


def store_head(body):
    """The :data:`StoreHead` bits of the STORE ``body`` (a :data:`StoreBody` view), in the
    layout's order."""
    return pack(StoreHead, empty=(body.rows == 0) | (body.strips == 0),
                two_pass=is_two_pass(body.op), one_row=body.rows == 1,
                two_rows=body.rows == 2, one_strip=body.strips == 1)


#: SET: store-unit parameter register ``index`` takes ``value``.
SetBody = data.StructLayout({
    "index": Param,
    "value": SET_VALUE_WIDTH,
})

Body = data.UnionLayout({
    "load":   LoadBody,
    "matmul": MatmulBody,
    "store":  StoreBody,
    "set":    SetBody,
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
    shift: bool = False
    opcode = Opcode.MATMUL
    body = "matmul"


@dataclass(frozen=True, kw_only=True)
class Store(_Base):
    acc_addr: int
    rows: int
    strips: int = 1
    stride: int = 0
    op: EpOp = EpOp.RAW
    dest: Dest = Dest.HOST
    dest_addr: int = 0
    param_addr: int = 0
    aux_addr: int = 0
    opcode = Opcode.STORE
    body = "store"

    @property
    def count(self):
        """Beats this STORE sends: ``rows * strips``."""
        return self.rows * self.strips

    @property
    def two_pass(self):
        return is_two_pass(self.op)


@dataclass(frozen=True, kw_only=True)
class Set(_Base):
    index: Param
    value: int
    opcode = Opcode.SET
    body = "set"


_CLASSES = {Opcode.LOAD: Load, Opcode.MATMUL: Matmul, Opcode.STORE: Store, Opcode.SET: Set}
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def unit_of(instr):
    """The unit that runs ``instr``: ``"load"``, ``"exec"`` or ``"store"``."""
    return {Opcode.LOAD: "load", Opcode.MATMUL: "exec", Opcode.STORE: "store",
            Opcode.SET: "store"}[instr.opcode]


def pmem_pack(*, bias, p1, p2):
    """:data:`PmemWord` values as ``numpy.uint64`` words from arrays of their fields (each
    taken modulo its width: ``bias`` int32, ``p1`` and ``p2`` 16-bit)."""
    fields = {"bias": bias, "p1": p1, "p2": p2}
    words = np.zeros(np.shape(bias), dtype=np.uint64)
    for name, (offset, width) in _slices(PmemWord).items():
        value = np.asarray(fields[name]).astype(np.int64) & ((1 << width) - 1)
        words |= value.astype(np.uint64) << np.uint64(offset)
    return words


def pmem_unpack(words):
    """The fields of :data:`PmemWord` values (an int64 array or tensor of the words' bits):
    ``{"bias": signed, "p1": unsigned, "p2": unsigned}``, as the type given."""
    out = {}
    for name, (offset, width) in _slices(PmemWord).items():
        out[name] = (words >> offset) & ((1 << width) - 1)
    bias = out["bias"]
    out["bias"] = bias - ((bias >> 31) & 1) * (1 << 32)   # the int32 bias, sign-extended
    return out


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
           for body in ("load", "matmul", "store", "set")}


@functools.lru_cache(maxsize=1 << 16)
def encode(instr):
    """The 128-bit word of ``instr``, as an int. Fields that do not fit raise ``ValueError``.

    Instructions are frozen, and a program repeats most of its own (every layer's programs
    share their shapes): the words of the last 65,536 distinct ones are kept."""
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


def _bits(word, where):
    offset, width = where
    return (word >> offset) & ((1 << width) - 1)


def raw_fields(word):
    """Every field of a 128-bit word as an unsigned int, whatever its opcode: ``"opcode"``, the
    four dependency flags, and a dict of fields for each body (``"load"``, ``"matmul"``,
    ``"store"``, ``"set"``) read off :data:`Body`."""
    out = {"opcode": _bits(word, _OPCODE)}
    out.update({name: _bits(word, where) for name, where in _DEPS.items()})
    for body, fields in _BODIES.items():
        out[body] = {name: _bits(word, where) for name, where in fields.items()}
    return out


def raw_columns(words):
    """:func:`raw_fields` of a sequence of words at once, each field a ``numpy`` array (one
    element a word): ``uint64`` for fields wider than 62 bits, ``int64`` for the others."""
    mask = (1 << 64) - 1
    lo = np.array([word & mask for word in words], dtype=np.uint64)
    hi = np.array([word >> 64 for word in words], dtype=np.uint64)

    def column(where):
        offset, width = where
        if offset >= 64:
            bits = hi >> np.uint64(offset - 64)
        elif offset == 0:
            bits = lo.copy()
        else:
            bits = (lo >> np.uint64(offset)) | (hi << np.uint64(64 - offset))
        if width < 64:
            bits &= np.uint64((1 << width) - 1)
        return bits if width > 62 else bits.astype(np.int64)

    out = {"opcode": column(_OPCODE)}
    out.update({name: column(where) for name, where in _DEPS.items()})
    for body, fields in _BODIES.items():
        out[body] = {name: column(where) for name, where in fields.items()}
    return out


def decode(word):
    """The instruction object of a 128-bit word; :class:`IllegalInstruction` if there is none."""
    raw = raw_fields(word)
    try:
        opcode = Opcode(raw["opcode"])
    except ValueError:
        raise IllegalInstruction(f"illegal opcode {raw['opcode']} in word {word:#034x}") from None
    cls = _CLASSES[opcode]
    fields = {name: bool(raw[name]) for name in _DEPS}
    fields.update(raw[cls.body])
    enums = {"target": Target, "op": EpOp, "dest": Dest, "index": Param}
    try:
        for name, kind in enums.items():
            if name in fields:
                fields[name] = kind(fields[name])
    except ValueError as error:
        raise IllegalInstruction(f"{error} in word {word:#034x}") from None
    if cls is Matmul:
        fields["accumulate"] = bool(fields["accumulate"])
        fields["shift"] = bool(fields["shift"])
    return cls(**fields)
