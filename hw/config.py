"""The one frozen configuration of a bertaccel build.

Every generator, driver and testbench receives an :class:`AccelConfig`; nothing reads a global.
Derived sizes are properties, and every invariant is checked when the config is made, with a
message that names the bad field and value.
"""

import dataclasses
import json
import math
from dataclasses import dataclass

__all__ = ["AccelConfig", "ConfigError", "PRESETS", "preset", "load_config"]


class ConfigError(ValueError):
    """An :class:`AccelConfig` field, or a preset name, is not acceptable."""


#: Defaults of the AXI fields; a config with other values carries them in its tag.
_AXI_DATA_WIDTH = 64
_AXI_ADDR_WIDTH = 32


def _is_pow2(value):
    return isinstance(value, int) and value > 0 and value & (value - 1) == 0


@dataclass(frozen=True, kw_only=True)
class AccelConfig:
    """Parameters of one accelerator build.

    The systolic array has ``rows`` x ``cols`` processing elements and is weight-stationary: a
    ``rows`` x ``cols`` block of the right-hand operand is held in the array, a ``rows``-wide
    slice of a left-hand row enters every cycle, and a ``cols``-wide row of partial sums leaves.
    So ``rows`` is the reduction (K) tile and ``cols`` the output-column (N) tile.

    Parameters
    ----------
    rows, cols : int
        Array size. Each is a power of two from 2 to 64; the array need not be square.
    in_width : int
        Operand width in bits. Only 8 (int8) is built today.
    acc_width : int
        Accumulator width in bits. Only 32 (int32) is built today.
    spad_depth : int
        Rows in each of the two scratchpads: scratchpad A holds ``rows``-wide operand rows,
        scratchpad B holds ``cols``-wide weight rows. A power of two from 64 to 65536.
    acc_depth : int
        Rows in the accumulator, each ``cols`` x ``acc_width``. A power of two from 64 to 65536.
    pmem_depth : int
        Rows in the epilogue parameter memory, each ``cols`` x 64 bits (bias or mask, and two
        16-bit values, per column). A power of two from 16 to 65536.
    queue_depth : int
        Depth of each unit's instruction queue. A power of two from 2 to 64.
    epilogue_lanes : int or None
        Columns the epilogue works on per cycle (its pipeline's lanes). ``None`` is ``cols``; a
        power of two from 2 to ``cols`` splits every ``cols``-wide beat of the accumulator
        drain into ``cols / epilogue_lanes`` sub-beats that enter the epilogue one a cycle. Fewer
        lanes cost epilogue throughput and save its area and DSPs (nine MULT18X18D a lane on an
        ECP5). SOFTMAX's running maximum advances one sub-beat at a time, so its results
        depend on this width (:func:`bertaccel.golden.intops.softmax`'s ``cols``).
    clock_mhz : float
        Clock assumed when cycles are turned into latency. It does not change the hardware.
    axi_data_width : int
        Data width in bits of the AXI4 master of the FPGA shell (:mod:`bertaccel.hw.axi`),
        a power of two from 32 to 512. It does not change the core.
    axi_addr_width : int
        Address width in bits of that AXI4 master, from 32 to 64. It does not change the core.
    lut_pes : int
        PEs whose int8 x int8 multiply is built in the fabric (an adder tree of partial
        products, :mod:`bertaccel.hw.lutmul`) instead of a DSP block, from 0 to
        ``rows * cols``: the last ``lut_pes`` PEs in column-major order (:meth:`is_lut_pe`),
        so the last columns whole and the bottom rows of the column before. Their products are
        the same in the same cycles; on an ECP5 each saves one MULT18X18D for LUT4s.
    """

    rows: int = 8
    cols: int = 8
    in_width: int = 8
    acc_width: int = 32
    spad_depth: int = 4096
    acc_depth: int = 1024
    pmem_depth: int = 256
    queue_depth: int = 8
    epilogue_lanes: int | None = None
    clock_mhz: float = 200.0
    axi_data_width: int = _AXI_DATA_WIDTH
    axi_addr_width: int = _AXI_ADDR_WIDTH
    lut_pes: int = 0

    def __post_init__(self):
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if not (_is_pow2(value) and 2 <= value <= 64):
                raise ConfigError(f"{name} must be a power of two from 2 to 64, not {value!r}")
        if self.in_width != 8:
            raise ConfigError(f"in_width must be 8 (int8 operands), not {self.in_width!r}")
        if self.acc_width != 32:
            raise ConfigError(f"acc_width must be 32 (int32 accumulators), not {self.acc_width!r}")
        if not (_is_pow2(self.pmem_depth) and 16 <= self.pmem_depth <= 65536):
            raise ConfigError(f"pmem_depth must be a power of two from 16 to 65536, "
                              f"not {self.pmem_depth!r}")
        for name in ("spad_depth", "acc_depth"):
            value = getattr(self, name)
            if not (_is_pow2(value) and 64 <= value <= 65536):
                raise ConfigError(f"{name} must be a power of two from 64 to 65536, not {value!r}")
        if self.spad_depth < 2 * self.rows:
            raise ConfigError(f"spad_depth must hold two weight blocks ({2 * self.rows} rows), "
                              f"not {self.spad_depth!r}")
        if not (_is_pow2(self.queue_depth) and 2 <= self.queue_depth <= 64):
            raise ConfigError(f"queue_depth must be a power of two from 2 to 64, "
                              f"not {self.queue_depth!r}")
        if self.epilogue_lanes is not None and not (
                _is_pow2(self.epilogue_lanes) and 2 <= self.epilogue_lanes <= self.cols):
            raise ConfigError(f"epilogue_lanes must be None (= cols) or a power of two from 2 to "
                              f"cols ({self.cols}), not {self.epilogue_lanes!r}")
        if (isinstance(self.clock_mhz, bool) or not isinstance(self.clock_mhz, (int, float))
                or not math.isfinite(self.clock_mhz) or not 1 <= self.clock_mhz <= 2000):
            raise ConfigError(f"clock_mhz must be a number from 1 to 2000, not {self.clock_mhz!r}")
        if not (_is_pow2(self.axi_data_width) and 32 <= self.axi_data_width <= 512):
            raise ConfigError(f"axi_data_width must be a power of two from 32 to 512, "
                              f"not {self.axi_data_width!r}")
        if (isinstance(self.axi_addr_width, bool) or not isinstance(self.axi_addr_width, int)
                or not 32 <= self.axi_addr_width <= 64):
            raise ConfigError(f"axi_addr_width must be an int from 32 to 64, "
                              f"not {self.axi_addr_width!r}")
        if (isinstance(self.lut_pes, bool) or not isinstance(self.lut_pes, int)
                or not 0 <= self.lut_pes <= self.rows * self.cols):
            raise ConfigError(f"lut_pes must be an int from 0 to rows * cols "
                              f"({self.rows * self.cols}), not {self.lut_pes!r}")

    # -- derived sizes -------------------------------------------------------------------------

    @property
    def name(self):
        """The array shape, ``"8x8"`` (the same for every config of that shape: reports print
        :attr:`label`)."""
        return f"{self.rows}x{self.cols}"

    @property
    def label(self):
        """What reports call the config: the preset's name when it is a preset (``"8x8"``),
        else the shape and what differs from the preset of that shape (``"8x8 (custom:
        acc_depth 4096)"``), or the shape and the tag when no preset has that shape."""
        base = PRESETS.get(self.name)
        if base == self:
            return self.name
        if base is None:
            return f"{self.name} (custom: {self.tag})"
        changed = [f"{field.name} {getattr(self, field.name)}"
                   for field in dataclasses.fields(self)
                   if getattr(self, field.name) != getattr(base, field.name)]
        return f"{self.name} (custom: {', '.join(changed)})"

    @property
    def tag(self):
        """A stable name for build folders and artifacts; it changes with every hardware field.

        The AXI widths change only the FPGA shell, not the core: they are named (``_ax128a40``)
        only when they differ from the defaults, so every core build keeps its name. The
        epilogue's lanes are named (``_el4``) only when there are fewer than ``cols``, and the
        fabric multipliers (``_lut23``) only when there are any.
        """
        tag = f"r{self.rows}c{self.cols}_i{self.in_width}a{self.acc_width}" \
              f"_sp{self.spad_depth}_acc{self.acc_depth}_pm{self.pmem_depth}_q{self.queue_depth}"
        if self.ep_lanes != self.cols:
            tag += f"_el{self.ep_lanes}"
        if self.lut_pes:
            tag += f"_lut{self.lut_pes}"
        if (self.axi_data_width, self.axi_addr_width) != (_AXI_DATA_WIDTH, _AXI_ADDR_WIDTH):
            tag += f"_ax{self.axi_data_width}a{self.axi_addr_width}"
        return tag

    @property
    def lanes(self):
        """Operand lanes in one input-data beat: wide enough for an A row or a B row."""
        return max(self.rows, self.cols)

    @property
    def ep_lanes(self):
        """The epilogue's lanes: ``epilogue_lanes``, or ``cols`` when that is ``None``."""
        return self.cols if self.epilogue_lanes is None else self.epilogue_lanes

    @property
    def ep_ratio(self):
        """Sub-beats (cycles) the epilogue takes for one ``cols``-wide beat."""
        return self.cols // self.ep_lanes

    def is_lut_pe(self, row, col):
        """Whether PE (``row``, ``col``) multiplies in the fabric: the last ``lut_pes`` PEs
        in column-major order (index ``col * rows + row``)."""
        return col * self.rows + row >= self.rows * self.cols - self.lut_pes

    @property
    def macs_per_cycle(self):
        return self.rows * self.cols

    @property
    def spad_addr_width(self):
        return (self.spad_depth - 1).bit_length()

    @property
    def pmem_addr_width(self):
        return (self.pmem_depth - 1).bit_length()

    @property
    def pmem_beats_per_row(self):
        """Input-data beats that make one parameter-memory row (a PmemWord a column)."""
        from .isa import PMEM_WORD_BITS   # here: the config itself stays free of Amaranth
        return max(1, (PMEM_WORD_BITS * self.cols) // (self.in_width * self.lanes))

    @property
    def acc_addr_width(self):
        return (self.acc_depth - 1).bit_length()

    @property
    def mesh_latency(self):
        """Cycles from an A row entering the mesh to its ``cols`` sums leaving it, deskewed.

        Row ``r`` is skewed by ``r`` cycles, the operand crosses ``c`` columns, each PE has a
        sum register one cycle behind its product, which takes three cycles (operand, product
        and product-copy registers: ``ProcessingElement.PRODUCT_LATENCY``), and column ``c`` is
        deskewed by ``cols - 1 - c``: in all ``rows + cols + 2`` cycles.
        """
        from .pe import ProcessingElement
        return self.rows + self.cols + ProcessingElement.PRODUCT_LATENCY - 1

    @property
    def in_range(self):
        return -(1 << (self.in_width - 1)), (1 << (self.in_width - 1)) - 1

    # -- serialisation --------------------------------------------------------------------------

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, fields):
        """The config of ``fields``: every field of :class:`AccelConfig`, or ``"base"`` (a
        preset's name) and the fields that differ from that preset.

        Raises
        ------
        ConfigError
            An unknown field or base, a field left out when there is no base (the message
            lists them), or a bad value.
        """
        known = [field.name for field in dataclasses.fields(cls)]
        fields = dict(fields)
        base = fields.pop("base", None)
        unknown = sorted(set(fields) - set(known))
        if unknown:
            raise ConfigError(f"unknown config field(s) {', '.join(map(repr, unknown))}; "
                              f"known fields are {', '.join(sorted(known))}, and base")
        if base is not None:
            if not isinstance(base, str):
                raise ConfigError(f"base must be a preset's name ({', '.join(PRESETS)}), not "
                                  f"{base!r}")
            return dataclasses.replace(preset(base), **fields)
        missing = [name for name in known if name not in fields]
        if missing:
            raise ConfigError(f"the config leaves out {', '.join(missing)}: give every field, "
                              f"or a base preset for the fields left out (\"base\": \"8x8\")")
        return cls(**fields)


_BASE = AccelConfig()

PRESETS = {
    "2x2":   dataclasses.replace(_BASE, rows=2,  cols=2,  spad_depth=1024, acc_depth=256),
    "4x4":   dataclasses.replace(_BASE, rows=4,  cols=4,  spad_depth=2048, acc_depth=512),
    # Eight epilogue lanes (72 MULT18X18D and their wide stages spread over every DSP row of an
    # ECP5-85k) do not route on that part; four cost BERT-base 0.05 % more cycles (docs/fpga.md).
    "4x8":   dataclasses.replace(_BASE, rows=4,  cols=8,  spad_depth=2048, acc_depth=512,
                                 epilogue_lanes=4),
    # Row-wise epilogues (softmax, LayerNorm) need whole rows in one accumulator half, and a
    # MATMUL needs rows operand rows to hide its weight preload: 2048 rows lets 8x8 hold 32
    # rows of 256 columns.
    "8x8":   dataclasses.replace(_BASE, rows=8,  cols=8,  spad_depth=4096, acc_depth=2048,
                                 epilogue_lanes=4),
    "16x16": dataclasses.replace(_BASE, rows=16, cols=16, spad_depth=4096, acc_depth=2048),
    "32x32": dataclasses.replace(_BASE, rows=32, cols=32, spad_depth=4096, acc_depth=2048),
}


def preset(name):
    """The preset config called ``name`` (``"8x8"``), or a :class:`ConfigError` listing them."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; presets are "
                          f"{', '.join(PRESETS)}") from None


def load_config(spec):
    """A config from a preset name or from a JSON file (:meth:`AccelConfig.from_dict`: every
    field, as ``bertaccel verilog`` writes it, or a ``"base"`` preset and the fields that
    differ from it)."""
    if isinstance(spec, AccelConfig):
        return spec
    if spec.endswith(".json"):
        try:
            with open(spec) as file:
                fields = json.load(file)
        except OSError as error:
            raise ConfigError(f"cannot read config file {spec!r}: {error.strerror}") from None
        except json.JSONDecodeError as error:
            raise ConfigError(f"config file {spec!r} is not JSON: {error}") from None
        if not isinstance(fields, dict):
            raise ConfigError(f"config file {spec!r} must hold a JSON object")
        try:
            return AccelConfig.from_dict(fields)
        except ConfigError as error:
            raise ConfigError(f"config file {spec!r}: {error}") from None
    return preset(spec)
