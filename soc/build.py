"""Build the SoC's Verilated model and run firmware on it.

:func:`build_soc` builds the model of :class:`~bertaccel.soc.system.AccelSoC` once per config
and source key (cached in its folder, like the simulator builds of :mod:`bertaccel.sim.build`):
the shell's Verilog from :func:`bertaccel.hw.verilog.convert`, the register map's C header
(:func:`bertaccel.fpga.ip.csr_header`), LiteX's generated headers and Verilog, and Verilator's
C++ build, unoptimised with one job (the model runs a short firmware; the build is the cost).
The ROM's contents are a ``$readmemh`` file that the model reads when it starts, so a new
firmware needs no new build: :func:`run_soc` writes the firmware there and runs the model until
the firmware ends the simulation, returning what it printed on the UART.
"""

import fcntl
import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..fpga.ip import SHELL_MODULE, csr_header
from ..hw.axi import AxiShell
from ..hw.verilog import convert, source_key
from ..sim.build import SimulationError, verilator_bin_dir

__all__ = ["LitexFolder", "SocBuild", "SocError", "build_soc", "run_soc", "missing_tools"]

_HERE = Path(__file__).resolve().parent
_STAMP = ".bertaccel-soc.json"
_LOCK = ".bertaccel-soc.lock"


class SocError(SimulationError):
    """A SoC build or run failed; the message says which step and why."""


def missing_tools():
    """The names of the tools a SoC build needs that are not installed: ``[]`` when none."""
    missing = []
    for module in ("litex", "migen", "pythondata_cpu_vexriscv", "pythondata_misc_tapcfg",
                   "pythondata_software_picolibc", "pythondata_software_compiler_rt"):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"the Python package {module}")
    for tool in ("riscv64-unknown-elf-gcc", "riscv64-unknown-elf-objcopy"):
        if shutil.which(tool) is None:
            missing.append(tool)
    try:
        verilator_bin_dir()
    except SimulationError:
        missing.append("verilator")
    for header, package in (("event2/event.h", "libevent-dev"),
                            ("json-c/json.h", "libjson-c-dev"), ("zlib.h", "zlib1g-dev")):
        if not Path("/usr/include", header).is_file():
            missing.append(f"/usr/include/{header} (Debian: {package})")
    return missing


class LitexFolder:
    """The layout of a LiteX build folder (``self.folder``) for the shell of ``self.cfg``."""

    @property
    def gateware(self):
        """LiteX's gateware folder: the SoC's Verilog, the memories' ``.init`` files, what the
        tools build from them."""
        return self.folder / "gateware"

    @property
    def include(self):
        """The folder of LiteX's generated headers (``generated/csr.h`` and the rest)."""
        return self.folder / "software" / "include"

    @property
    def header(self):
        """The register map of the shell (:func:`bertaccel.fpga.ip.csr_header`)."""
        return self.folder / f"bertaccel_csr_{self.cfg.tag}.h"


@dataclass(frozen=True)
class SocBuild(LitexFolder):
    """A built SoC.

    Members
    -------
    cfg : AccelConfig
    folder : Path
        The LiteX build folder.
    seconds : float
        How long the build took (0 when it came from the cache).
    """
    cfg: object
    folder: Path
    seconds: float

    @property
    def model(self):
        """The Verilated model's executable (run in :attr:`gateware`)."""
        return self.gateware / "obj_dir" / "Vsim"

    def rom_file(self):
        """The ``$readmemh`` file of the ROM, which the model reads when it starts."""
        return self._init_file("rom")

    def main_ram_file(self):
        """The ``$readmemh`` file of main RAM, which the model reads when it starts."""
        return self._init_file("main_ram")

    def _init_file(self, memory):
        files = sorted(self.gateware.glob(f"*{memory}*.init"))
        if len(files) != 1:
            raise SocError(f"expected one {memory} init file in {self.gateware}, found "
                           f"{[f.name for f in files]}")
        return files[0]


def _key(cfg, optimize):
    import importlib.metadata

    versions = {dist: importlib.metadata.version(dist)
                for dist in ("litex", "migen", "pythondata-cpu-vexriscv", "verilator")}
    return source_key(cfg.to_json(), versions, {"optimize": optimize},
                      *((_HERE / name).read_bytes() for name in
                        ("build.py", "system.py", "verilator/veril.cpp")))


def build_soc(cfg, folder, *, optimize=False, log=print):
    """Build the Verilated SoC of ``cfg`` in ``folder`` (made if needed), or take it from
    there when the stamp says it is current. Returns a :class:`SocBuild`.

    With ``optimize``, the model's C++ is compiled with ``-O2``: a longer build for a model
    that runs a long firmware (an encoder layer) several times faster.

    The C++ of the model is compiled unoptimised with one job (the model runs only a short
    firmware), without tracing (:data:`_MAKEFILE_CHANGES`): about 35 s on one core, the
    shell's conversion to Verilog included. Raises :class:`SocError` if a step fails, naming
    it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = _key(cfg, optimize)
    with open(folder / _LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = folder / _STAMP
        build = SocBuild(cfg=cfg, folder=folder.resolve(), seconds=0.0)
        if stamp.is_file() and json.loads(stamp.read_text()).get("key") == key \
                and build.model.is_file():
            return build
        start = time.monotonic()
        stamp.unlink(missing_ok=True)
        verilog = folder / f"{SHELL_MODULE}_{cfg.tag}.v"
        log(f"converting the {cfg.name} AXI4 shell to Verilog")
        verilog.write_text(convert(AxiShell(cfg), name=SHELL_MODULE))
        build.header.write_text(csr_header(cfg))
        _verilate(cfg, verilog.resolve(), folder.resolve(), optimize, log)
        stamp.write_text(json.dumps({"key": key}) + "\n")
        return SocBuild(cfg=cfg, folder=folder.resolve(), seconds=time.monotonic() - start)


def _sim_config():
    """LiteX's simulation config: the clock and the UART on the model's stdout."""
    from litex.build.sim.config import SimConfig

    from .system import SYS_CLK_HZ

    config = SimConfig()
    config.add_clocker("sys_clk", freq_hz=SYS_CLK_HZ)
    config.add_module("serial2console", "serial")
    return config


def _verilate(cfg, verilog, folder, optimize, log):
    from litex.soc.integration.builder import Builder

    from .system import AccelSoC

    level = "-O2" if optimize else "-O0"    # LiteX's CFLAGS and Verilator's OPT_* alike
    log(f"building the SoC in {folder} (Verilator, one job, {level})")
    # LiteX logs the whole SoC at INFO (some 190 lines); its warnings and errors still show.
    logging.disable(logging.INFO)
    try:
        soc = AccelSoC(cfg, verilog)
        builder = Builder(soc, output_dir=str(folder), compile_software=False,
                          compile_gateware=True)
        # run=False only writes the Verilog, the C++ harness and build_sim.sh; the script is
        # run below, with its environment and its output under control.
        builder.build(sim_config=_sim_config(), run=False, jobs=1, threads=1,
                      opt_level=level.removeprefix("-"))
    finally:
        logging.disable(logging.NOTSET)
    _own_makefile(folder / "gateware")
    env = {name: value for name, value in os.environ.items()
           if name not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    env["PATH"] = f"{verilator_bin_dir()}{os.pathsep}{env.get('PATH', '')}"
    # One compile job, unoptimised; the precompiled header as Verilator's make sets it up breaks
    # with some compilers, so it is included as a plain header.
    env["MAKEFLAGS"] = (f"OPT_FAST={level} OPT_SLOW=-O0 OPT_GLOBAL={level} "
                        f"CFG_CXXFLAGS_PCH_I=-include")
    result = subprocess.run(["bash", "build_sim.sh"], cwd=folder / "gateware", env=env,
                            capture_output=True, text=True, check=False)
    (folder / "gateware" / "build_sim.log").write_text(result.stdout + result.stderr)
    if result.returncode:
        errors = [line for line in (result.stdout + result.stderr).splitlines()
                  if "error" in line.lower()]
        raise SocError(f"the Verilator build of the SoC failed (gateware/build_sim.log): "
                       f"{' | '.join(errors[:5]) or result.returncode}")


#: Changes to LiteX's simulation Makefile (litex/build/sim/core/Makefile), for a build of a
#: third of the time: no debug information, no waveform tracing (with a glue file to match),
#: the C++ in a few large files instead of a hundred small ones (each file parses the model's
#: headers again), and of the simulation modules only the two the SoC uses.
_MAKEFILE_CHANGES = (
    ("CFLAGS += -ggdb", "CFLAGS +="),
    ("\t\t--trace \\\n", ""),
    ("$(SRC_DIR)/veril.cpp", str(_HERE / "verilator" / "veril.cpp")),
    ("--output-split 5000 ", "--output-split 50000 "),
    ("--output-split-cfuncs 500 ", "--output-split-cfuncs 5000 "),
    ("-f $(MOD_DIR)/Makefile", '-f $(MOD_DIR)/Makefile MODULES="serial2console clocker"'),
)


def _own_makefile(gateware):
    """Point LiteX's ``build_sim.sh`` in ``gateware`` at a copy of its Makefile with
    :data:`_MAKEFILE_CHANGES`."""
    import litex.build.sim

    original = Path(litex.build.sim.__file__).resolve().parent / "core" / "Makefile"
    text = original.read_text()
    for old, new in _MAKEFILE_CHANGES:
        if old not in text:
            raise SocError(f"LiteX's {original} has no {old!r}: update soc/build.py for this "
                           f"LiteX")
        text = text.replace(old, new)
    (gateware / "Makefile.soc").write_text(text)
    script = gateware / "build_sim.sh"
    lines = script.read_text().replace(f"-f {original}", "-f Makefile.soc")
    if "-f Makefile.soc" not in lines:
        raise SocError(f"LiteX's {script} does not run {original}: update soc/build.py")
    script.write_text(lines)


def _readmemh(data, size, memory, *, fill=True):
    """The text of a ``$readmemh`` file of 32-bit words holding ``data`` for a ``size``-byte
    memory: with ``fill``, zeros to its end; without, the words past the file keep the model's
    initial zeros (a short file costs the model's start less)."""
    if len(data) > size:
        raise SocError(f"{len(data):,} bytes do not fit the {size:,}-byte {memory}")
    padded = data + bytes(-len(data) % 4)
    words = np.frombuffer(padded, dtype="<u4")
    text = "".join(f"{word:08x}\n" for word in words.tolist())
    return text + ("00000000\n" * (size // 4 - len(words)) if fill else "")


def run_soc(build, firmware, *, main_ram=b"", timeout=300):
    """Run the model of ``build`` with ``firmware`` (bytes of a flat binary for the ROM) and
    main RAM holding ``main_ram`` (bytes from its start; past them, the model's initial
    values: zeros under Verilator) at the start, and
    return what it printed on the UART (text).

    Raises
    ------
    SocError
        The firmware does not fit the ROM, ``main_ram`` main RAM, the model failed, or it did
        not end within ``timeout`` seconds.
    """
    from .system import MAIN_RAM_SIZE, ROM_SIZE

    rom = _readmemh(firmware, ROM_SIZE, "ROM (the firmware)")
    ram = _readmemh(main_ram or bytes(4), MAIN_RAM_SIZE, "main RAM", fill=False)
    with open(build.folder / _LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        build.rom_file().write_text(rom)
        build.main_ram_file().write_text(ram)
        try:
            result = subprocess.run([str(build.model)], cwd=build.gateware,
                                    stdin=subprocess.DEVNULL, capture_output=True,
                                    timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise SocError(f"the SoC did not finish within {timeout} s") from None
    text = result.stdout.decode(errors="replace")
    if result.returncode != 0:
        raise SocError(f"the SoC model exited with status {result.returncode}: "
                       f"{result.stderr.decode(errors='replace').strip()[-500:]}")
    return text
