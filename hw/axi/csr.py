"""The control and status registers of the AXI4 shell, written once.

:data:`REGISTERS` is the register map: every register's offset and every field's bits, access,
reset value and meaning. Three things are made from it and from nothing else:

* the gateware: :class:`bertaccel.hw.axi.csr_bank.CsrBank` builds its AXI4-Lite decode, its registers
  and its ports from this table;
* the host side: :mod:`bertaccel.sw.devices.axi` finds offsets and fields by name here, and
  :func:`identity` gives the values the ID and CONFIG registers of a build must read (the sizes
  of the memory layout, :func:`data_beat_bytes` and :func:`out_beat_bytes`, are here too);
* the documentation: :func:`markdown` writes the tables of ``docs/axi.md`` (``python
  docs/registers.py`` puts them between its ``<!-- BEGIN ... -->`` / ``<!-- END ... -->``
  markers; a test checks that they are current).

This module is plain Python (no gateware) so that a driver can import it on any host.
"""

from dataclasses import dataclass

from .. import isa
from ..legal import FAULT_WIDTH, Fault
from ..watchdog import DEFAULT_LIMIT, WAIT_TEXT, Wait

__all__ = [
    "ADDR_WIDTH", "DATA_WIDTH", "MAGIC", "MAP_VERSION", "FAULT_CODES", "FAULT", "WINDOW_FAULTS",
    "INSTR_BYTES", "data_beat_bytes", "out_beat_bytes",
    "Access", "Field", "Register", "REGISTERS", "register", "port_name", "identity",
    "markdown", "summary_markdown",
]

#: Address width of the AXI4-Lite slave: a 4 KiB window. Unmapped offsets read 0, ignore writes.
ADDR_WIDTH = 12
#: Data width of the AXI4-Lite slave; every register is one 32-bit word.
DATA_WIDTH = 32
#: ``ID.MAGIC``: tells a driver it found a bertaccel shell.
MAGIC = 0xBE27
#: ``ID.VERSION``: bumped whenever an offset or a field of this map changes meaning.
MAP_VERSION = 4

#: ``FAULT.CODE``: the first fault of a run, by value. An illegal instruction stops the core
#: (it drops every later instruction); every other fault stops the shell: no new read burst is
#: issued and no result is taken from the core, and the run ends once the bus is quiet.
FAULT_CODES = {
    0: "NONE",
    1: "ILLEGAL_INSTRUCTION",  # the core decoded an instruction the ISA does not allow
    2: "OUT_OVERRUN",          # the core produced a result past OUT_LEN (it was not written)
    3: "PROG_READ",            # an instruction read was answered SLVERR or DECERR
    4: "DATA_READ",            # an input data read was answered SLVERR or DECERR
    5: "WRITE",                # a result write was answered SLVERR or DECERR
    6: "PROG_WINDOW",          # the program does not lie inside the window (WIN_*)
    7: "DATA_WINDOW",          # the input data does not lie inside the window
    8: "OUT_WINDOW",           # the output area does not lie inside the window
    9: "WATCHDOG",             # WATCHDOG cycles passed without progress (STALL says why)
}
#: The faults of a region outside the window, by region register prefix.
WINDOW_FAULTS = {"PROG": "PROG_WINDOW", "DATA": "DATA_WINDOW", "OUT": "OUT_WINDOW"}
#: ``FAULT.CODE`` by name.
FAULT = {name: code for code, name in FAULT_CODES.items()}


class Access:
    """How software may access a field."""
    #: Read-only: a status value driven by the hardware.
    RO = "RO"
    #: Read-write: a register that holds what software wrote; the hardware reads it.
    RW = "RW"
    #: Write 1 to pulse for one cycle; writing 0 does nothing; reads as 0.
    W1P = "W1P"
    #: Read-only constant of the build (from its :class:`~bertaccel.hw.config.AccelConfig`).
    CONST = "CONST"

    ALL = (RO, RW, W1P, CONST)
    TEXT = {
        RO: "read-only status from the hardware",
        RW: "read-write; the hardware uses the value written",
        W1P: "write 1 to pulse for one cycle; writing 0 does nothing; reads as 0",
        CONST: "read-only constant of the build",
    }


@dataclass(frozen=True)
class Field:
    """A bit field of a register.

    Members
    -------
    name : str
        Upper-case name, unique in its register.
    lsb, width : int
        Bits ``[lsb, lsb + width)`` of the register.
    access : str
        One of :class:`Access`.
    doc : str
        What it means; a sentence or two of Markdown.
    reset : int
        Value after reset (``RW``; 0 for the others).
    value : callable, optional
        ``CONST`` only: ``value(cfg)`` gives the constant for an ``AccelConfig``.
    source : str, optional
        ``CONST`` only: where the constant comes from, for the documentation (``"cfg.rows"``).
    """
    name: str
    lsb: int
    width: int
    access: str
    doc: str
    reset: int = 0
    value: object = None
    source: str = ""

    @property
    def msb(self):
        return self.lsb + self.width - 1

    @property
    def mask(self):
        return ((1 << self.width) - 1) << self.lsb

    @property
    def bits(self):
        """``"[7:0]"`` or ``"[3]"``."""
        return f"[{self.msb}:{self.lsb}]" if self.width > 1 else f"[{self.lsb}]"


@dataclass(frozen=True)
class Register:
    """A 32-bit register of the AXI4-Lite slave.

    Members
    -------
    name : str
        Upper-case name, unique in the map.
    offset : int
        Byte offset in the window, a multiple of 4.
    doc : str
        What it is for.
    fields : tuple of Field
    snapshot : str, optional
        A read of this register also latches the ``RO`` inputs of the register named here, and
        reads of that register return the latched value (a 64-bit counter read as two words
        without tearing).
    """
    name: str
    offset: int
    doc: str
    fields: tuple
    snapshot: str | None = None

    @property
    def access(self):
        """The register's access: its fields' access when they all agree, else ``"mixed"``."""
        kinds = {field.access for field in self.fields}
        return kinds.pop() if len(kinds) == 1 else "mixed"

    @property
    def writable(self):
        """Whether a write can change anything: the register has an ``RW`` or ``W1P`` field
        (a write to one that has none is answered ``SLVERR``)."""
        return any(field.access in (Access.RW, Access.W1P) for field in self.fields)

    @property
    def reset(self):
        """Reset value of the non-constant fields."""
        value = 0
        for field in self.fields:
            if field.access == Access.RW:
                value |= field.reset << field.lsb
        return value

    def field(self, name):
        for field in self.fields:
            if field.name == name:
                return field
        raise KeyError(f"register {self.name} has no field {name!r}; it has "
                       f"{', '.join(f.name for f in self.fields)}")


def _log2(value):
    return value.bit_length() - 1


# -- memory layout --------------------------------------------------------------------------------
# How the shell's DMA engines see memory; the gateware (hw/axi/shell.py) and the host
# (sw/devices/axi.py) both take the sizes from here.

#: Bytes of one instruction in memory.
INSTR_BYTES = isa.INSTR_WIDTH // 8


def _pow2_bytes(bits):
    return 1 << (max(1, -(-bits // 8)) - 1).bit_length()


def data_beat_bytes(cfg):
    """Bytes of one input beat in memory: ``lanes * in_width`` bits, rounded up to a power of
    two bytes (for int8 lanes, ``cfg.lanes``)."""
    return _pow2_bytes(cfg.lanes * cfg.in_width)


def out_beat_bytes(cfg):
    """Bytes of one output beat in memory: ``cols * acc_width`` bits, rounded up to a power of
    two bytes (for int32 lanes, ``4 * cfg.cols``)."""
    return _pow2_bytes(cfg.cols * cfg.acc_width)


def _word(name, access, doc, reset=0):
    """The one 32-bit field of a register that is a single value (named like the register)."""
    return (Field(name, 0, 32, access, doc, reset=reset),)


def _address(name, half, what, offset):
    bits = "[31:0]" if half == "LO" else "[63:32]"
    if half == "LO":
        doc = (f"Bits [31:0] of the byte address of {what}. It must be a multiple of the AXI "
               f"data width in bytes (`CONFIG2.AXI_DATA_WIDTH / 8`): the shell ignores the "
               f"bits below that.")
    else:
        doc = (f"Bits [63:32] of the byte address of {what}; bits at and above "
               f"`CONFIG2.AXI_ADDR_WIDTH` are ignored (all of them when it is 32).")
    return Register(f"{name}_ADDR_{half}", offset, f"Address of {what}, bits {bits}.",
                    _word(f"{name}_ADDR_{half}", Access.RW, doc))


def _fault_address(offset):
    """FAULT_ADDR_LO and _HI."""
    what = ("For a window fault (`FAULT.CODE` PROG_WINDOW, DATA_WINDOW, OUT_WINDOW), the byte "
            "address of the region's first word; for a read fault (PROG_READ, DATA_READ), of "
            "the word answered with the error; for a WRITE fault, of the first word of the "
            "burst answered with it; 0 otherwise.")
    return tuple(Register(f"FAULT_ADDR_{half}", offset + 4 * index,
                          f"The address of a window or bus fault, bits {bits}.",
                          _word(f"FAULT_ADDR_{half}", Access.RO, f"Bits {bits}. {what}"))
                 for index, (half, bits) in enumerate((("LO", "[31:0]"), ("HI", "[63:32]"))))


def _window(offset):
    """WIN_BASE_LO, _HI and WIN_LIMIT_LO, _HI: the window every DMA access must lie in."""
    regs = []
    for index, (name, what, reset) in enumerate((
            ("BASE", "the first byte", 0), ("LIMIT", "the last byte", 0xFFFF_FFFF))):
        for half, bits in (("LO", "[31:0]"), ("HI", "[63:32]")):
            doc = (f"Bits {bits} of {what} of the window (inclusive; bits at and above "
                   f"`CONFIG2.AXI_ADDR_WIDTH` are ignored). At `CTRL.START` the shell checks "
                   f"that the program, the input data and the output area (each in whole bus "
                   f"words, from its `*_ADDR` for its `*_LEN`) lie inside `[WIN_BASE, "
                   f"WIN_LIMIT]`; a region that does not is never read or written and ends "
                   f"the run with its window fault. The reset values are the whole address "
                   f"space.")
            regs.append(Register(f"WIN_{name}_{half}", offset + 8 * index + (4 if half == "HI"
                                                                             else 0),
                                 f"The DMA window's {what}, bits {bits}.",
                                 _word(f"WIN_{name}_{half}", Access.RW, doc, reset=reset)))
    return tuple(regs)


REGISTERS = (
    Register("ID", 0x000, "Identifies the shell and the version of this register map.", (
        Field("VERSION", 0, 16, Access.CONST, "Version of this register map.",
              value=lambda cfg: MAP_VERSION, source=f"{MAP_VERSION}"),
        Field("MAGIC", 16, 16, Access.CONST, "Always `0xBE27`: a bertaccel shell answers here.",
              value=lambda cfg: MAGIC, source=f"{MAGIC:#06x}"),
    )),
    Register("CONFIG0", 0x004, "The array of this build: check it before running a program "
             "compiled for a config.", (
        Field("ROWS", 0, 8, Access.CONST, "Array rows (the K tile).",
              value=lambda cfg: cfg.rows, source="cfg.rows"),
        Field("COLS", 8, 8, Access.CONST, "Array columns (the N tile).",
              value=lambda cfg: cfg.cols, source="cfg.cols"),
        Field("IN_WIDTH", 16, 8, Access.CONST, "Operand width in bits.",
              value=lambda cfg: cfg.in_width, source="cfg.in_width"),
        Field("ACC_WIDTH", 24, 8, Access.CONST, "Accumulator width in bits.",
              value=lambda cfg: cfg.acc_width, source="cfg.acc_width"),
    )),
    Register("CONFIG1", 0x008, "The memories of this build.", (
        Field("SPAD_DEPTH_LOG2", 0, 8, Access.CONST, "log2 of the rows of each scratchpad.",
              value=lambda cfg: _log2(cfg.spad_depth), source="log2(cfg.spad_depth)"),
        Field("ACC_DEPTH_LOG2", 8, 8, Access.CONST, "log2 of the rows of the accumulator.",
              value=lambda cfg: _log2(cfg.acc_depth), source="log2(cfg.acc_depth)"),
        Field("QUEUE_DEPTH_LOG2", 16, 8, Access.CONST, "log2 of each unit's instruction queue "
              "depth.", value=lambda cfg: _log2(cfg.queue_depth), source="log2(cfg.queue_depth)"),
    )),
    Register("CONFIG2", 0x00C, "The bus and instruction widths of this build.", (
        Field("AXI_DATA_WIDTH", 0, 16, Access.CONST, "Data width of the AXI4 master in bits.",
              value=lambda cfg: cfg.axi_data_width, source="cfg.axi_data_width"),
        Field("AXI_ADDR_WIDTH", 16, 8, Access.CONST, "Address width of the AXI4 master in bits.",
              value=lambda cfg: cfg.axi_addr_width, source="cfg.axi_addr_width"),
        Field("INSTR_WIDTH", 24, 8, Access.CONST, "Width of one instruction in bits.",
              value=lambda cfg: isa.INSTR_WIDTH, source=f"{isa.INSTR_WIDTH}"),
    )),
    Register("CTRL", 0x010, "Starts a run, or resets the core and the DMA engines.", (
        Field("START", 0, 1, Access.W1P,
              "Start a run with the `PROG_*`, `DATA_*` and `OUT_ADDR_*` registers as they are "
              "now (they are latched). Clears `STATUS.DONE` and the counters. Ignored while "
              "`STATUS.BUSY` is set, and when written together with `SOFT_RESET`."),
        Field("SOFT_RESET", 1, 1, Access.W1P,
              "Stop issuing bus requests, wait until every outstanding one has completed, then "
              "reset the core (its registers, token counters, queues and the error flag; memory "
              "contents are not cleared) and the DMA engines. "
              "`STATUS.BUSY` stays set until it is done. Registers of this map keep their "
              "values. Needed after `STATUS.ERROR`, or to abandon a run that does not finish."),
    )),
    Register("STATUS", 0x014, "State of the shell and the core.", (
        Field("BUSY", 0, 1, Access.RO, "A run or a soft reset is in progress."),
        Field("DONE", 1, 1, Access.RO,
              "The last run finished: every instruction was taken by the core, the core went "
              "idle (or flagged an error) and every result write got its response. Cleared by "
              "`CTRL.START` and `CTRL.SOFT_RESET`."),
        Field("ERROR", 2, 1, Access.RO,
              "The core received an illegal instruction (sticky until `CTRL.SOFT_RESET`). The "
              "core drops every later instruction; the run still ends, with `DONE` set."),
        Field("BUS_ERROR", 3, 1, Access.RO,
              "A read or write response was `SLVERR` or `DECERR` (sticky until "
              "`CTRL.SOFT_RESET`)."),
        Field("CORE_BUSY", 4, 1, Access.RO, "The core holds or runs an instruction."),
        Field("FAULT", 5, 1, Access.RO,
              "The shell stopped the run on a fault (`FAULT.CODE` says which; sticky until "
              "`CTRL.SOFT_RESET`, and a run started while it is set ends at once). The run "
              "still ends, with `DONE` set, once the bus is quiet."),
        Field("START_IGNORED", 6, 1, Access.RO,
              "`CTRL.START` was written while `BUSY` and ignored (since the run in progress "
              "or the last one began; cleared by a `CTRL.START` that starts a run, and by "
              "`CTRL.SOFT_RESET`)."),
    )),
    _address("PROG", "LO", "the program", 0x020),
    _address("PROG", "HI", "the program", 0x024),
    Register("PROG_LEN", 0x028, "Instructions in the program.", _word(
        "PROG_LEN", Access.RW, "Instructions to fetch from `PROG_ADDR` (16 bytes each).")),
    _address("DATA", "LO", "the input data", 0x030),
    _address("DATA", "HI", "the input data", 0x034),
    Register("DATA_LEN", 0x038, "Input data beats.", _word(
        "DATA_LEN", Access.RW, "Input beats to fetch from `DATA_ADDR` (`lanes` bytes each); "
        "the sum of the program's LOAD counts.")),
    _address("OUT", "LO", "the output area", 0x040),
    _address("OUT", "HI", "the output area", 0x044),
    Register("OUT_COUNT", 0x048, "Output beats of the current or last run.", _word(
        "OUT_COUNT", Access.RO, "Output beats taken from the core since `CTRL.START`; each is "
        "written to `OUT_ADDR + n * cols * 4`. When `STATUS.DONE` is set they are all in "
        "memory.")),
    Register("OUT_LEN", 0x04C, "Output beats the output area holds.", _word(
        "OUT_LEN", Access.RW, "The shell writes at most this many output beats from "
        "`OUT_ADDR` (latched by `CTRL.START`); a result past them is not written and ends the "
        "run with `FAULT.CODE` OUT_OVERRUN. No write leaves `[OUT_ADDR, OUT_ADDR + OUT_LEN "
        "* cols * 4)`.")),
    Register("CYCLES_LO", 0x050, "Cycles of the current or last run, low word.", _word(
        "CYCLES_LO", Access.RO, "Bits [31:0] of the clock cycles from `CTRL.START` to "
        "`STATUS.DONE`."),
        snapshot="CYCLES_HI"),
    Register("CYCLES_HI", 0x054, "Cycles, high word.", _word(
        "CYCLES_HI", Access.RO, "Bits [63:32] of the cycle count, as latched by the last read "
        "of `CYCLES_LO` (read `CYCLES_LO` first).")),
    Register("PROG_COUNT", 0x058, "Instructions taken by the core.", _word(
        "PROG_COUNT", Access.RO, "Instructions the core has taken since `CTRL.START`.")),
    Register("DATA_COUNT", 0x05C, "Input beats taken by the core.", _word(
        "DATA_COUNT", Access.RO, "Input beats the core has taken since `CTRL.START`.")),
    Register("FAULT", 0x060, "The first fault since `CTRL.SOFT_RESET` (0: none).", (
        Field("CODE", 0, 4, Access.RO, "Which fault: " + ", ".join(
            f"{code} {name}" for code, name in FAULT_CODES.items()) + " (docs/axi.md)."),
        Field("RESP", 4, 2, Access.RO, "For a bus fault, the response that caused it: 2 "
              "`SLVERR`, 3 `DECERR`; 0 otherwise."),
        Field("CHECK", 8, FAULT_WIDTH, Access.RO, "For ILLEGAL_INSTRUCTION, the rule the "
              "instruction broke: " + ", ".join(f"{fault.value} {fault.name}"
                                                for fault in Fault if fault) + " "
              "(`bertaccel.hw.legal.Fault`, docs/architecture.md); 0 otherwise."),
    )),
    Register("FAULT_PC", 0x064, "The index of the illegal instruction.", _word(
        "FAULT_PC", Access.RO, "For `FAULT.CODE` ILLEGAL_INSTRUCTION, the instruction's index "
        "in the program (0 is the word at `PROG_ADDR`).")),
    *_fault_address(0x068),
    *_window(0x070),
    Register("WATCHDOG", 0x080, "Cycles without progress that end a run.", _word(
        "WATCHDOG", Access.RW, "A run in which no instruction, input beat, result or bus beat "
        "moves and no unit takes an instruction for this many cycles ends with `FAULT.CODE` "
        "WATCHDOG, `STALL` saying what it waited for (latched by `CTRL.START`; 0 turns the "
        "watchdog off). The reset value, 2**20, is far above the longest instruction of any "
        "config (`bertaccel.hw.watchdog`).", reset=DEFAULT_LIMIT)),
    Register("STALL", 0x084, "What a run stopped by the watchdog was waiting for.", (
        *(Field(name.upper(), index, 1, Access.RO,
                f"When the watchdog fired, {WAIT_TEXT[name]}.")
          for index, (name, _) in enumerate(Wait)),
        Field("READ_BUS", 8, 1, Access.RO,
              "When the watchdog fired, a read burst waited for its data."),
        Field("WRITE_BUS", 9, 1, Access.RO,
              "When the watchdog fired, a write burst waited to send its data or for its "
              "response."),
    )),
    Register("IRQ_ENABLE", 0x088, "Which causes raise `irq`.", (
        Field("DONE", 0, 1, Access.RW, "`irq` when a run ends without a fault.", reset=1),
        Field("FAULT", 1, 1, Access.RW, "`irq` when a run ends with a fault.", reset=1),
    )),
    Register("IRQ_STATUS", 0x08C, "Why the last run ended; `irq` is high while a set bit "
             "here is enabled in `IRQ_ENABLE`. Cleared by `CTRL.START` and "
             "`CTRL.SOFT_RESET`.", (
        Field("DONE", 0, 1, Access.RO, "The last run ended without a fault."),
        Field("FAULT", 1, 1, Access.RO, "The last run ended with a fault (`FAULT.CODE` is "
              "not NONE)."),
    )),
)


def _check(registers):
    names, offsets = set(), set()
    for reg in registers:
        assert reg.name not in names, f"register {reg.name} is defined twice"
        assert reg.offset % 4 == 0 and reg.offset < (1 << ADDR_WIDTH), reg
        assert reg.offset not in offsets, f"offset {reg.offset:#x} is used twice"
        names.add(reg.name)
        offsets.add(reg.offset)
        used = 0
        for field in reg.fields:
            assert field.access in Access.ALL, field
            assert 0 <= field.lsb and field.msb < DATA_WIDTH, field
            assert not used & field.mask, f"{reg.name}.{field.name} overlaps another field"
            assert (field.value is not None) == (field.access == Access.CONST), field
            used |= field.mask
    for reg in registers:
        if reg.snapshot is not None:
            assert reg.snapshot in names and reg.snapshot != reg.name, reg


_check(REGISTERS)
_BY_NAME = {reg.name: reg for reg in REGISTERS}


def register(name):
    """The :class:`Register` called ``name``; ``KeyError`` naming the registers if none."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no register {name!r}; registers are {', '.join(_BY_NAME)}") from None


def port_name(reg, field):
    """Name of the gateware port of ``field``: ``"prog_len"`` for a register's only field named
    like it, else ``"<register>_<field>"`` in lower case (``"ctrl_start"``)."""
    if len(reg.fields) == 1 and field.name == reg.name:
        return reg.name.lower()
    return f"{reg.name}_{field.name}".lower()


def identity(cfg):
    """``{register name: value}`` that the ``CONST`` registers of a build of ``cfg`` read."""
    out = {}
    for reg in REGISTERS:
        if reg.fields and all(field.access == Access.CONST for field in reg.fields):
            value = 0
            for field in reg.fields:
                value |= (field.value(cfg) & ((1 << field.width) - 1)) << field.lsb
            out[reg.name] = value
    return out


# -- documentation --------------------------------------------------------------------------------

def _cell(text):
    return " ".join(text.split()).replace("|", "\\|")


def _reset_text(reg):
    if reg.access == Access.CONST:
        return "config"
    return f"`{reg.reset:#010x}`"


def summary_markdown():
    """The one-table summary of the map (offset, name, access, reset, description)."""
    lines = ["| Offset | Register | Access | Reset | Description |",
             "|---:|---|---|---|---|"]
    for reg in REGISTERS:
        lines.append(f"| `{reg.offset:#05x}` | {reg.name} | {reg.access} | {_reset_text(reg)} "
                     f"| {_cell(reg.doc)} |")
    return "\n".join(lines) + "\n"


def markdown():
    """The full register map: the summary, then every register's fields."""
    parts = [summary_markdown(), "\nAccess: " + "; ".join(
        f"**{kind}** {text}" for kind, text in Access.TEXT.items()) + ". Every register is a "
        "32-bit word; bits that no field covers read as 0. Offsets not listed read as 0 and "
        "ignore writes, and a write to a register with no RW or W1P field changes nothing: "
        "both answer `SLVERR`; every other access `OKAY`. Byte strobes apply to RW fields.\n"]
    for reg in REGISTERS:
        parts.append(f"\n### `{reg.offset:#05x}` {reg.name}\n\n")
        if len(reg.fields) == 1 and reg.fields[0].name == reg.name:
            field = reg.fields[0]
            parts.append(f"{field.bits}, {field.access}, reset `{field.reset:#x}`. "
                         f"{_cell(field.doc)}")
            if reg.snapshot:
                parts.append(f" A read also latches `{reg.snapshot}`, so that the two words "
                             f"read in this order belong together.")
            parts.append("\n")
            continue
        parts.append(_cell(reg.doc))
        if reg.snapshot:
            parts.append(f" A read latches `{reg.snapshot}`.")
        parts.append("\n\n| Bits | Field | Access | Reset | Description |\n|---|---|---|---|---|\n")
        for field in sorted(reg.fields, key=lambda f: -f.lsb):
            reset = (f"`{field.source}`" if field.access == Access.CONST
                     else f"`{field.reset:#x}`")
            parts.append(f"| {field.bits} | {field.name} | {field.access} | {reset} "
                         f"| {_cell(field.doc)} |\n")
    return "".join(parts)
