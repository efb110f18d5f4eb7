"""Host side of the AXI4 shell: a program's DRAM image, the run sequence, the results.

The shell (:mod:`bertaccel.hw.axi`) runs a compiled :class:`~bertaccel.sw.program.Program`
out of memory. This module is everything a driver needs besides a way to touch the bus, so the
cocotb test of the shell and a real driver (over ``/dev/mem``, PCIe, ...) share it:

* :func:`layout` places the program and its packed input data in memory and reserves the output
  area: a :class:`DramImage` (bytes to write, addresses, register values);
* :func:`run_ops` is the driver itself, written once as a generator of bus operations
  (:class:`RegWrite`, :class:`RegRead`, :class:`MemWrite`, :class:`MemRead`, :class:`Poll`); it
  checks the build's identity registers, writes the image, starts the run, polls ``STATUS``,
  reads the counters and the outputs, and recovers with ``CTRL.SOFT_RESET`` after an error or a
  time-out. :func:`run_sync` executes it over any object with ``read32``/``write32``/
  ``read_mem``/``write_mem`` methods; an asynchronous testbench steps it the same way.

Memory layout (``docs/axi.md`` has the same, with a figure):

* **program**: instruction *i* is the 16 bytes at ``PROG_ADDR + 16 i``, little-endian (bit 0 of
  the :func:`bertaccel.hw.isa.encode` word in bit 0 of the first byte);
* **input data**: beat *j* (``program.pack(...)[j]``, ``cfg.lanes`` int8 lanes) is the
  ``cfg.lanes`` bytes at ``DATA_ADDR + lanes j``, lane *i* in byte *i* (two's complement). A beat
  is its natural width rounded up to a power of two bytes, which for int8 lanes is the width
  itself;
* **output**: beat *n* (one accumulator row, ``cfg.cols`` int32 lanes) is the ``4 cols`` bytes at
  ``OUT_ADDR + 4 cols n``, lane *j* little-endian at byte ``4 j``.

Every base address is a multiple of the AXI data width in bytes; the shell writes nothing
outside ``[OUT_ADDR, OUT_ADDR + 4 cols OUT_COUNT)`` (a partial last bus word is written with byte
strobes), and ``OUT_COUNT`` never passes ``OUT_LEN``, which the driver sets to the program's
output beats.
"""

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ...hw import legal
from ...hw.axi import csr
from ..program import Program
from .base import DeviceError

__all__ = [
    "INSTR_BYTES", "ShellError", "ShellTimeout", "DramImage", "ShellRun",
    "beat_bytes", "out_beat_bytes", "bus_bytes", "instr_bytes", "data_bytes", "out_beats",
    "layout", "check_identity", "field_value",
    "RegWrite", "RegRead", "MemWrite", "MemRead", "Poll", "run_ops", "soft_reset_ops",
    "run_sync",
]

#: Bytes of one instruction in memory.
INSTR_BYTES = csr.INSTR_BYTES


class ShellError(DeviceError):
    """The shell reported an error (illegal instruction, bus error, a fault) or is not the build
    expected.

    Members
    -------
    status : dict or None
        ``STATUS`` fields by name, when the error came from a run.
    fault : dict or None
        ``FAULT`` fields by name (``CODE``, ``RESP``, ``CHECK``;
        :data:`bertaccel.hw.axi.csr.FAULT_CODES`) and ``PC``, ``ADDR`` and ``STALL`` (the
        ``FAULT_PC``, ``FAULT_ADDR`` and ``STALL`` registers), when a run ended with an error.
    """

    def __init__(self, message, status=None, fault=None):
        super().__init__(message)
        self.status = status
        self.fault = fault


class ShellTimeout(ShellError):
    """A run did not finish within its poll limit (the shell was soft-reset)."""


def beat_bytes(cfg):
    """Bytes of one input beat in memory (:func:`bertaccel.hw.axi.csr.data_beat_bytes`)."""
    return csr.data_beat_bytes(cfg)


def out_beat_bytes(cfg):
    """Bytes of one output beat in memory (:func:`bertaccel.hw.axi.csr.out_beat_bytes`)."""
    return csr.out_beat_bytes(cfg)


def bus_bytes(cfg):
    """Bytes of one AXI data word; every base address must be a multiple of it."""
    return cfg.axi_data_width // 8


def instr_bytes(program):
    """The program's instructions as they lie in memory."""
    return b"".join(word.to_bytes(INSTR_BYTES, "little") for word in program.words())


def data_bytes(cfg, beats):
    """Packed input beats (``(n, cfg.lanes)`` int8, from ``Program.pack``) as they lie in memory."""
    beats = torch.as_tensor(beats)
    if beats.dtype != torch.int8 or beats.dim() != 2 or beats.shape[1] != cfg.lanes:
        raise ValueError(f"beats must be a (n, {cfg.lanes}) torch.int8 tensor, not "
                         f"{tuple(beats.shape)} {beats.dtype}")
    raw = beats.contiguous().numpy().view(np.uint8)
    pad = beat_bytes(cfg) - cfg.lanes
    if pad:
        raw = np.pad(raw, ((0, 0), (0, pad)))
    return raw.tobytes()


def out_beats(cfg, raw):
    """Output beats from the bytes of the output area: ``(n, cfg.cols)`` ``torch.int32``."""
    size = out_beat_bytes(cfg)
    if len(raw) % size:
        raise ValueError(f"the output area holds whole beats of {size} bytes, not {len(raw)} "
                         f"bytes")
    array = np.frombuffer(bytes(raw), dtype="<i4").reshape(-1, size // 4)[:, :cfg.cols]
    return torch.from_numpy(array.astype(np.int32))


@dataclass(eq=False)
class DramImage:
    """A program, its inputs and its output area, placed in memory.

    Members
    -------
    program : Program
    prog_addr, data_addr, out_addr : int
        Byte addresses of instruction 0, input beat 0 and output beat 0.
    prog_len, data_len, out_len : int
        Instructions, input beats, and the output beats the program will write.
    segments : list of (int, bytes)
        What to write into memory before the run.
    window : (int, int), optional
        The first and last byte the shell may touch (``WIN_BASE``, ``WIN_LIMIT``); by default
        the whole bus words of the three regions, from the lowest to the highest.
    """
    program: Program
    prog_addr: int
    prog_len: int
    data_addr: int
    data_len: int
    out_addr: int
    out_len: int
    segments: list = field(default_factory=list)
    window: tuple = None

    @property
    def cfg(self):
        return self.program.cfg

    @property
    def out_size(self):
        """Bytes of the output area."""
        return self.out_len * out_beat_bytes(self.cfg)

    @property
    def end(self):
        """One past the highest byte the run reads or writes."""
        ends = [addr + len(data) for addr, data in self.segments]
        return max(ends + [self.out_addr + self.out_size])

    def registers(self):
        """``{register: value}`` to write before ``CTRL.START``, in a good order."""
        values = {}
        for name, addr in (("PROG", self.prog_addr), ("DATA", self.data_addr),
                           ("OUT", self.out_addr)):
            values[f"{name}_ADDR_LO"] = addr & 0xFFFF_FFFF
            values[f"{name}_ADDR_HI"] = addr >> 32
        values["PROG_LEN"] = self.prog_len
        values["DATA_LEN"] = self.data_len
        values["OUT_LEN"] = self.out_len
        first, last = self.window if self.window is not None else self.span()
        for name, addr in (("BASE", first), ("LIMIT", last)):
            values[f"WIN_{name}_LO"] = addr & 0xFFFF_FFFF
            values[f"WIN_{name}_HI"] = addr >> 32
        return values

    def span(self):
        """``(first, last)``: the first and last byte of the bus words the run reads or
        writes."""
        word = bus_bytes(self.cfg)
        spans = [(addr, addr + len(data)) for addr, data in self.segments]
        spans.append((self.out_addr, self.out_addr + self.out_size))
        spans = [(lo, hi) for lo, hi in spans if hi > lo]
        first = min(lo for lo, _ in spans) // word * word
        return first, _align_up(max(hi for _, hi in spans), word) - 1

    def outputs(self, raw):
        """The program's outputs (``{name: torch.int32 tensor}``) from the output area's bytes."""
        return self.program.unpack(out_beats(self.cfg, raw))


def _align_up(value, align):
    return -(-value // align) * align


def layout(program, *, base=0, align=64, prog_addr=None, data_addr=None, out_addr=None,
           **inputs):
    """Place ``program``, its packed ``inputs`` and its output area in memory.

    Parameters
    ----------
    program : Program
        Validated here.
    base : int
        Where the first region goes (rounded up to ``align``), unless all three addresses are
        given.
    align : int
        Alignment of regions placed automatically: a power of two, at least the AXI word.
        They are placed program, data, output, one after the other.
    prog_addr, data_addr, out_addr : int, optional
        Explicit addresses, each a multiple of the AXI data width in bytes.
    **inputs
        One int8-valued tensor per input of the program (see ``Program.pack``).

    Returns
    -------
    DramImage

    Raises
    ------
    ValueError
        If an address is misaligned, the regions overlap, or an address does not fit the AXI
        address width; the message names the region.
    ProgramError, OperandError
        From ``Program.validate`` and ``Program.pack``.
    """
    if not isinstance(program, Program):
        raise TypeError(f"program must be a Program, not {type(program).__name__}")
    cfg = program.cfg
    word = bus_bytes(cfg)
    if not (isinstance(align, int) and align >= word and align & (align - 1) == 0):
        raise ValueError(f"align must be a power of two of at least {word} (the AXI word), "
                         f"not {align!r}")
    program.validate()
    prog = instr_bytes(program)
    beats = program.pack(**inputs)
    data = data_bytes(cfg, beats)
    out_size = program.n_out_beats * out_beat_bytes(cfg)

    sizes = {"program": len(prog), "data": len(data), "output": out_size}
    given = {"program": prog_addr, "data": data_addr, "output": out_addr}
    addrs = {}
    cursor = _align_up(base, align)
    for name in ("program", "data", "output"):
        if given[name] is None:
            addrs[name] = cursor
        else:
            addrs[name] = given[name]
            if not isinstance(given[name], int) or given[name] < 0 or given[name] % word:
                raise ValueError(f"the {name} address must be a multiple of {word} bytes (the "
                                 f"AXI data width), not {given[name]!r}")
        cursor = _align_up(max(cursor, addrs[name] + sizes[name]), align)
    spans = sorted((addrs[name], addrs[name] + sizes[name], name) for name in addrs)
    for (_, end_a, name_a), (start_b, _, name_b) in zip(spans, spans[1:]):
        if start_b < end_a:
            raise ValueError(f"the {name_a} and {name_b} regions overlap")
    top = max(end for _, end, _ in spans)
    if top > 1 << cfg.axi_addr_width:
        raise ValueError(f"the regions end at {top:#x}, past the {cfg.axi_addr_width}-bit AXI "
                         f"address space")
    segments = [(addrs["program"], prog)]
    if data:
        segments.append((addrs["data"], data))
    return DramImage(program=program, prog_addr=addrs["program"], prog_len=len(program.instrs),
                     data_addr=addrs["data"], data_len=beats.shape[0],
                     out_addr=addrs["output"], out_len=program.n_out_beats, segments=segments)


def field_value(register, word, name):
    """Field ``name`` of a ``register``'s 32-bit ``word`` (names from :mod:`bertaccel.hw.axi.csr`)."""
    spec = csr.register(register).field(name)
    return (word >> spec.lsb) & ((1 << spec.width) - 1)


def _fields(register, word):
    return {spec.name: field_value(register, word, spec.name)
            for spec in csr.register(register).fields}


def check_identity(cfg, values):
    """Check the ID and CONFIG registers read from a shell against ``cfg``.

    Parameters
    ----------
    cfg : AccelConfig
    values : dict of str to int
        The words read from the registers of :func:`bertaccel.hw.axi.csr.identity`.

    Raises
    ------
    ShellError
        Naming every field that differs (a shell of another build, or no shell at all).
    """
    expected = csr.identity(cfg)
    wrong = []
    for name, want in expected.items():
        got = values[name]
        for spec in csr.register(name).fields:
            a, b = field_value(name, got, spec.name), field_value(name, want, spec.name)
            if a != b:
                wrong.append(f"{name}.{spec.name} is {a}, expected {b}")
    if wrong:
        raise ShellError(f"the shell is not a build of {cfg.tag}: " + "; ".join(wrong))


# -- the run sequence, as bus operations ---------------------------------------------------------

@dataclass(frozen=True)
class RegWrite:
    """Write ``value`` to register ``name``."""
    name: str
    value: int

    @property
    def offset(self):
        return csr.register(self.name).offset


@dataclass(frozen=True)
class RegRead:
    """Read register ``name``; the executor sends back the 32-bit value."""
    name: str

    @property
    def offset(self):
        return csr.register(self.name).offset


@dataclass(frozen=True)
class MemWrite:
    """Write ``data`` to memory at ``addr``."""
    addr: int
    data: bytes


@dataclass(frozen=True)
class MemRead:
    """Read ``size`` bytes at ``addr``; the executor sends back the bytes."""
    addr: int
    size: int


@dataclass(frozen=True)
class Poll:
    """Let time pass before the next status read (an executor picks how long)."""


@dataclass
class ShellRun:
    """What one run through the shell returns.

    Members
    -------
    outputs : dict of str to torch.Tensor
    cycles : int
        ``CYCLES``: clock cycles from ``CTRL.START`` to ``STATUS.DONE``.
    counts : dict
        ``OUT_COUNT``, ``PROG_COUNT`` and ``DATA_COUNT``.
    polls : int
        ``STATUS`` reads until it was done.
    """
    outputs: dict
    cycles: int
    counts: dict
    polls: int


def _start_word():
    return 1 << csr.register("CTRL").field("START").lsb


def _reset_word():
    return 1 << csr.register("CTRL").field("SOFT_RESET").lsb


def soft_reset_ops(max_polls):
    """Operations of a soft reset: pulse ``CTRL.SOFT_RESET`` and wait for ``STATUS.BUSY`` to
    clear. Returns the last status fields."""
    yield RegWrite("CTRL", _reset_word())
    for _ in range(max_polls):
        status = _fields("STATUS", (yield RegRead("STATUS")))
        if not status["BUSY"]:
            return status
        yield Poll()
    raise ShellTimeout(f"the shell was still busy {max_polls} polls after CTRL.SOFT_RESET",
                       status)


def _fault_text(fault):
    """``FAULT``'s fields in words: ``"fault DATA_READ (SLVERR at 0x2040)"``, ``"fault
    ILLEGAL_INSTRUCTION (ROW_LEN) at instruction 7"``."""
    name = csr.FAULT_CODES.get(fault["CODE"], f"code {fault['CODE']}")
    if name in csr.WINDOW_FAULTS.values():
        return f"fault {name} (the region at {fault['ADDR']:#x} is not inside the window)"
    if name == "WATCHDOG":
        said = [field.doc.removeprefix("When the watchdog fired, ").rstrip(".")
                for field in csr.register("STALL").fields
                if field_value("STALL", fault["STALL"], field.name)]
        return f"fault WATCHDOG (no progress: {'; '.join(said) or 'nothing moved'})"
    if fault["CODE"] == csr.FAULT["ILLEGAL_INSTRUCTION"]:
        check = fault["CHECK"]
        rule = legal.Fault(check).name if check in set(legal.Fault) else f"rule {check}"
        return f"fault {name} ({rule}) at instruction {fault['PC']}"
    resp = {2: "SLVERR", 3: "DECERR"}.get(fault["RESP"])
    return f"fault {name} ({resp} at {fault['ADDR']:#x})" if resp else f"fault {name}"


def run_ops(image, *, max_polls=100_000, check=True, write_image=True):
    """The driver: run ``image`` on a shell, as a generator of bus operations.

    Parameters
    ----------
    image : DramImage
    max_polls : int
        ``STATUS`` reads to wait for ``DONE`` before giving up.
    check : bool
        First check the identity registers against ``image.cfg`` (:func:`check_identity`).
    write_image : bool
        Write ``image.segments`` into memory first.

    Yields
    ------
    RegWrite, RegRead, MemWrite, MemRead, Poll
        ``RegRead`` and ``MemRead`` expect the value read to be sent back.

    Returns
    -------
    ShellRun
        As the generator's return value (``StopIteration.value``).

    Raises
    ------
    ShellError
        The shell is another build, is busy, or ended the run with ``STATUS.ERROR``,
        ``STATUS.BUS_ERROR`` or ``STATUS.FAULT`` (its ``fault`` is the ``FAULT`` register's
        fields; the shell is soft-reset first, so the next run starts clean).
    ShellTimeout
        Not done after ``max_polls`` polls (it is soft-reset first).
    """
    cfg = image.cfg
    if check:
        values = {}
        for name in csr.identity(cfg):
            values[name] = yield RegRead(name)
        check_identity(cfg, values)
    status = _fields("STATUS", (yield RegRead("STATUS")))
    if status["BUSY"]:
        raise ShellError("the shell is busy (a run or a soft reset is in progress)", status)
    if status["ERROR"] or status["BUS_ERROR"] or status["FAULT"]:
        yield from soft_reset_ops(max_polls)
    if write_image:
        for addr, data in image.segments:
            yield MemWrite(addr, data)
    for name, value in image.registers().items():
        yield RegWrite(name, value)
    yield RegWrite("CTRL", _start_word())
    polls = 0
    while True:
        status = _fields("STATUS", (yield RegRead("STATUS")))
        polls += 1
        if status["DONE"]:
            break
        if polls >= max_polls:
            yield from soft_reset_ops(max_polls)
            raise ShellTimeout(f"the run of a {image.prog_len}-instruction program was not done "
                               f"after {max_polls} polls; the shell was soft-reset", status)
        yield Poll()
    counts = {}
    for name in ("OUT_COUNT", "PROG_COUNT", "DATA_COUNT"):
        counts[name] = yield RegRead(name)
    low = yield RegRead("CYCLES_LO")  # latches CYCLES_HI
    cycles = low | (yield RegRead("CYCLES_HI")) << 32
    if status["ERROR"] or status["BUS_ERROR"] or status["FAULT"]:
        fault = _fields("FAULT", (yield RegRead("FAULT")))
        fault["PC"] = yield RegRead("FAULT_PC")
        fault["ADDR"] = (yield RegRead("FAULT_ADDR_LO")) | (yield RegRead("FAULT_ADDR_HI")) << 32
        fault["STALL"] = yield RegRead("STALL")
        yield from soft_reset_ops(max_polls)
        raise ShellError(f"the run stopped with {_fault_text(fault)} after "
                         f"{counts['PROG_COUNT']} of {image.prog_len} instructions and "
                         f"{counts['OUT_COUNT']} output beats; the shell was soft-reset",
                         status, fault=fault)
    if counts["OUT_COUNT"] != image.out_len or counts["DATA_COUNT"] != image.data_len:
        raise ShellError(f"the core took {counts['DATA_COUNT']} input beats and produced "
                         f"{counts['OUT_COUNT']} output beats; the program has "
                         f"{image.data_len} and {image.out_len}", status)
    raw = yield MemRead(image.out_addr, image.out_size)
    return ShellRun(outputs=image.outputs(raw), cycles=cycles, counts=counts, polls=polls)


def run_sync(ops, bus, *, poll_s=1e-4):
    """Execute the operations of :func:`run_ops` (or any such generator) over ``bus``.

    Parameters
    ----------
    ops : generator
    bus : object
        With ``read32(offset)``, ``write32(offset, value)``, ``read_mem(addr, size)`` and
        ``write_mem(addr, data)``: register offsets from the shell's AXI4-Lite base, memory
        addresses as the shell's AXI4 master sees them.
    poll_s : float
        Seconds to sleep for each :class:`Poll`.

    Returns
    -------
    The generator's return value.
    """
    reply = None
    while True:
        try:
            op = ops.send(reply)
        except StopIteration as stop:
            return stop.value
        reply = None
        if isinstance(op, RegWrite):
            bus.write32(op.offset, op.value)
        elif isinstance(op, RegRead):
            reply = bus.read32(op.offset)
        elif isinstance(op, MemWrite):
            bus.write_mem(op.addr, op.data)
        elif isinstance(op, MemRead):
            reply = bytes(bus.read_mem(op.addr, op.size))
        elif isinstance(op, Poll):
            time.sleep(poll_s)
        else:
            raise TypeError(f"unknown bus operation {op!r}")
