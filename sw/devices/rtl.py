"""The RTL device: programs run on the Verilated gateware, under cocotb.

:class:`RtlDevice` is a :class:`~bertaccel.sw.device.Device` like the software device: the same
compiled programs and the same ``run`` call. Behind it is one simulator process per device, kept
running across runs::

    with RtlDevice(preset("8x8"), sink_stall=64) as device:
        result = gemm(device, a, b)       # builds (cached) and starts the simulator on first use
        result.outputs["c"], result.cycles, result.stats["sim_cycles_per_s"]

The simulator is :class:`bertaccel.hw.harness.SimHarness` (the core plus gateware stream
engines that read the instructions and data from files and write the output beats to one as the
run goes), driven by the cocotb test :func:`bertaccel.sim.rtl_server.serve`, which talks to
this object over a Unix socket. It is Verilated by default; ``RtlDevice(cfg,
simulator="icarus", icarus_std="2012")`` runs the same Verilog and the same server under Icarus
Verilog instead, bit- and cycle-exact and far slower.

Every program runs in one piece, whatever its size: this object writes the instruction words and
data beats into the harness's stream files in the simulator's working folder, asks the server to
run, and reads the output beats from the output file. The cycles are those of the hardware fed
by streams that never run dry, which :class:`~bertaccel.sw.cycles.CycleModel` counts exactly.
"""

import itertools
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import weakref
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import torch

from ...hw import isa, legal
from ...hw.harness import STREAM_FILES, harness_verilog
from ...hw.verilog import source_key
from ...hw.watchdog import DEFAULT_LIMIT, LIMIT_WIDTH, wait_text
from .base import Device, DeviceError, IllegalProgram

__all__ = ["RtlDevice"]

_TOPLEVEL = "bertaccel_harness"
_SERVER = "bertaccel.sim.rtl_server"
_devices = itertools.count()

#: The default cycle limit of a run at most, whatever the program states (``max_cycles``
#: sets any): minutes of the 2x2 under Verilator, about an hour of the 8x8.
CYCLE_CAP = 1 << 28
#: The default wall-clock limit of a run at most (``run_timeout`` sets any), in seconds.
WALL_CAP_S = 4 * 3600.0
#: The largest output file a run may write: a program whose STOREs would write more is refused
#: before it runs.
OUTPUT_CAP_BYTES = 1 << 31


def _stall_units(name, value):
    """A stall setting in 1/256 units: an int 0..255, or a probability (float) in [0, 1)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int from 0 to 255 or a probability, not {value!r}")
    if isinstance(value, float):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} as a probability must be in [0, 1), not {value!r}")
        return min(255, round(value * 256))
    if isinstance(value, int) and 0 <= value <= 255:
        return value
    raise ValueError(f"{name} must be an int from 0 to 255 (n/256 of the cycles) or a "
                     f"probability in [0, 1), not {value!r}")


def _write_stream(path, data):
    """Write a source's file whole, under a new name first: a simulator that still has the old
    file open keeps reading the old one, never a half-written new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _read_out(path, count, cfg):
    """The ``count`` output beats of the sink's file: ``(count, cfg.cols)`` ``torch.int32``."""
    digits = cfg.cols * cfg.acc_width // 4
    text = path.read_text().split() if count else []
    if len(text) != count or any(len(line) != digits for line in text):
        raise DeviceError(f"{path} holds {len(text)} lines, not {count} lines of {digits} hex "
                          f"digits (one per output beat)")
    try:
        raw = bytes.fromhex("".join(text))
    except ValueError:
        raise DeviceError(f"{path} holds a line that is not hexadecimal (an X or Z value?)") \
            from None
    # Each line is lane cols-1 first, 32 bits a lane.
    beats = np.frombuffer(raw, dtype=">i4").reshape(count, cfg.cols)[:, ::-1]
    return torch.from_numpy(beats.astype(np.int32))


class _Session:
    """The simulator process and its connection; what :func:`weakref.finalize` closes."""

    def __init__(self):
        self.thread = None
        self.conn = None
        self.pid = None
        self.tmpdir = None
        self.failure = None   # exception raised in the simulator thread
        self.log_file = None

    def alive(self):
        return self.thread is not None and self.thread.is_alive()

    def close(self, grace=30.0):
        if self.conn is not None:
            try:
                self.conn.send({"op": "stop"})
                if self.conn.poll(min(grace, 10.0)):
                    self.conn.recv()
            except (OSError, EOFError):
                pass
            self.conn.close()
            self.conn = None
        if self.thread is not None:
            self.thread.join(grace)
            if self.thread.is_alive() and self.pid:
                # The simulator did not stop (a run still going): end the process we started.
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.kill(self.pid, sig)
                    except ProcessLookupError:
                        break
                    self.thread.join(5.0)
                    if not self.thread.is_alive():
                        break
            self.thread = None
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.tmpdir = None


class RtlDevice(Device):
    """Runs programs on the Verilated RTL of ``cfg``, under cocotb.

    Parameters
    ----------
    cfg : AccelConfig
        The build to simulate.
    build_root : path
        Where build folders go; this device's is ``<build_root>/bertaccel_harness-<cfg.tag>``,
        with ``-icarus<std>`` added for Icarus. Relative paths are taken from the current
        directory.
    seed : int
        Seed of the harness's stall generator (0..2**32-1), the same for every run, so a run is
        reproducible; it is logged in the simulator log.
    src_idle, sink_stall : int or float
        Idle cycles on the instruction and data sources, and backpressure on the output sink:
        an int n means n/256 of the cycles, a float a probability in [0, 1). 0 = free-running.
    max_cycles : int, optional
        Cycle limit for one run; by default a generous bound from the program, at most
        :data:`CYCLE_CAP`.
    startup_timeout : float
        Seconds the simulator may take to start and connect (after the build).
    run_timeout : float, optional
        Wall-clock seconds one run may take; by default from ``max_cycles``, at most
        :data:`WALL_CAP_S`.
    watchdog : int
        Cycles without progress that end a run as stuck (the harness's
        :class:`~bertaccel.hw.watchdog.Watchdog`; the error names what the core waited for);
        :data:`~bertaccel.hw.watchdog.DEFAULT_LIMIT` by default, 0 for none.
    simulator : str
        ``"verilator"`` (the default) or ``"icarus"``: Icarus Verilog (``iverilog`` on
        ``PATH``), bit- and cycle-exact with Verilator and far slower; for small programs.
    icarus_std : str
        With ``simulator="icarus"``: ``"2012"`` (``iverilog -g2012``, SystemVerilog event
        semantics) or ``"2005"`` (``-g2005``).
    verilog : callable, optional
        Makes the Verilog text of a variant of the harness (top module ``bertaccel_harness``,
        the harness's ports and maybe more inputs, see ``ports``), e.g. the mutants of
        :mod:`bertaccel.sim.mutate`; :func:`~bertaccel.hw.harness.harness_verilog` by default.
    verilog_key : str, optional
        With ``verilog``: a name that determines its text (letters, digits, ``-``); it is
        added to the build folder's name and caches the build.
    ports : dict, optional
        ``{name: int}``: values of a variant's own inputs, sent with every run; the harness is
        reset whenever they change. The attribute ``ports`` may be changed between runs.
    netlist : bool
        Simulate the core's ECP5 netlist instead of its RTL (gate-level: yosys's
        ``synth_ecp5``, :mod:`bertaccel.sim.netlist`), on Verilator, in the same harness; its
        build folder ends in ``-netlist-<key>``.
    quick_build : bool
        Compile the simulator unoptimised (:func:`bertaccel.sim.build.build`'s ``quick``):
        about half the build time, runs about ten times slower; for a few short runs (the
        suite's gate-level test). Its build folder ends in ``-quick``.

    Members
    -------
    build : SimBuild or None
        The simulator build, once started.
    log_file : Path or None
        The simulator's log (cocotb and testbench messages, seeds).

    Raises
    ------
    DeviceError
        From :meth:`run`: the core faulted an illegal instruction (:class:`IllegalProgram`,
        from :meth:`execute`), a run timed out, the output or data beat counts differ from the
        program's, the watchdog found the run stuck, a stream file failed, or the simulator
        failed.

    Notes
    -----
    The first :meth:`run` builds the simulator if needed (cached per config and generator
    source) and starts it; :meth:`start` does that ahead of time. :meth:`close` (or leaving a
    ``with`` block) stops it. Not thread-safe beyond one run at a time (runs are serialised).
    """

    #: The core's checker faults illegal instructions (:mod:`bertaccel.hw.checker`).
    checks_instructions = True

    def __init__(self, cfg, *, build_root="build/sim", seed=0, src_idle=0, sink_stall=0,
                 max_cycles=None, startup_timeout=300.0, run_timeout=None,
                 watchdog=DEFAULT_LIMIT, simulator="verilator", icarus_std="2012", verilog=None,
                 verilog_key=None, ports=None, netlist=False, quick_build=False):
        super().__init__(cfg)
        from ...sim.build import ICARUS_STDS, SIMULATORS
        if simulator not in SIMULATORS:
            raise ValueError(f"simulator must be one of {', '.join(SIMULATORS)}, "
                             f"not {simulator!r}")
        if icarus_std not in ICARUS_STDS:
            raise ValueError(f"icarus_std must be one of {', '.join(ICARUS_STDS)}, "
                             f"not {icarus_std!r}")
        if not (isinstance(seed, int) and 0 <= seed < 1 << 32):
            raise ValueError(f"seed must be an int from 0 to 2**32-1, not {seed!r}")
        if max_cycles is not None and not (isinstance(max_cycles, int) and max_cycles > 0):
            raise ValueError(f"max_cycles must be a positive int, not {max_cycles!r}")
        if not (isinstance(watchdog, int) and 0 <= watchdog < 1 << LIMIT_WIDTH):
            raise ValueError(f"watchdog must be an int from 0 to 2**{LIMIT_WIDTH}-1, "
                             f"not {watchdog!r}")
        self.watchdog = watchdog
        self.seed = seed
        self.src_idle = _stall_units("src_idle", src_idle)
        self.sink_stall = _stall_units("sink_stall", sink_stall)
        self.max_cycles = max_cycles
        self.startup_timeout = float(startup_timeout)
        self.run_timeout = run_timeout
        self.simulator = simulator
        self.icarus_std = icarus_std if simulator == "icarus" else None
        if (verilog is None) != (verilog_key is None):
            raise ValueError("verilog and verilog_key go together: give both or neither")
        if netlist:
            if verilog is not None or simulator != "verilator":
                raise ValueError("netlist=True simulates the core's netlist on Verilator: "
                                 "no verilog of its own, no other simulator")
            from ...sim.netlist import netlist_harness_verilog, netlist_key
            verilog, verilog_key = (lambda: netlist_harness_verilog(cfg)), netlist_key()
        self.netlist = bool(netlist)
        self._verilog, self._verilog_key = verilog, verilog_key
        self.ports = dict(ports or {})
        suffix = f"-icarus{icarus_std}" if simulator == "icarus" else ""
        if verilog_key is not None:
            suffix += f"-{verilog_key}"
        self.quick_build = bool(quick_build)
        if self.quick_build:
            suffix += "-quick"
        self.build_dir = Path(build_root) / f"{_TOPLEVEL}-{cfg.tag}{suffix}"
        self.build = None
        self.log_file = None
        self._lock = threading.Lock()
        self._session = _Session()
        self._finalizer = weakref.finalize(self, self._session.close, 5.0)

    # -- life cycle ---------------------------------------------------------------------------

    def start(self):
        """Build the simulator if needed and start it; nothing happens if it is running."""
        with self._lock:
            self._start()
        return self

    def last_build_seconds(self):
        """How long this device's simulator last took to build on this machine (``None``: never
        built here; :func:`bertaccel.sim.build.last_build_seconds`)."""
        from ...sim.build import last_build_seconds
        return last_build_seconds(self.build_dir)

    def _start(self):
        session = self._session
        if session.conn is not None:
            if session.alive():
                return
            raise DeviceError(f"the simulator of this RtlDevice has exited; see "
                              f"{session.log_file}")
        from ...sim.build import build

        cfg = self.cfg
        design = self._verilog or (lambda: harness_verilog(cfg, name=_TOPLEVEL))
        key_parts = (cfg.to_json(),) + ((self._verilog_key,) if self._verilog_key else ())
        self.build = build(
            design, name=_TOPLEVEL, build_dir=self.build_dir, source_key=source_key(*key_parts),
            simulator=self.simulator, icarus_std=self.icarus_std or "2012",
            quick=self.quick_build)

        session.tmpdir = tempfile.mkdtemp(prefix="bertaccel-")  # short: sun_path has 108 bytes
        path = os.path.join(session.tmpdir, "sock")
        number = next(_devices)
        _prune_logs(self.build.build_dir, keep=20)
        self.log_file = session.log_file = (self.build.build_dir
                                            / f"rtl_server-{os.getpid()}-{number}.log")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            listener.listen(1)
            listener.settimeout(0.25)
            session.thread = threading.Thread(
                target=self._simulate, args=(session, path), daemon=True,
                name=f"rtl-sim-{cfg.name}-{number}")
            session.thread.start()
            deadline = time.monotonic() + self.startup_timeout
            while True:
                try:
                    client, _ = listener.accept()
                    break
                except socket.timeout:
                    if not session.thread.is_alive():
                        raise DeviceError(self._died("the simulator exited before it connected"))
                    if time.monotonic() > deadline:
                        raise DeviceError(self._died(
                            f"the simulator did not connect within {self.startup_timeout:g} s"))
        except BaseException:
            listener.close()
            session.close(grace=5.0)
            raise
        listener.close()
        client.setblocking(True)
        session.conn = Connection(client.detach())
        hello = self._receive(deadline - time.monotonic() + 60.0, "start-up")
        session.pid = hello.get("pid")

    def _simulate(self, session, path):
        from ...sim.build import run_cocotb
        try:
            run_cocotb(self.build, _SERVER, "serve", extra_env={"BERTACCEL_RTL_SOCKET": path},
                       test_dir=session.tmpdir, log_file=session.log_file)
        except BaseException as error:  # noqa: BLE001 - reported by the host thread
            session.failure = error

    def _died(self, what):
        session = self._session
        detail = f": {session.failure}" if session.failure else ""
        log = session.log_file
        tail = ""
        if log is not None and Path(log).is_file():
            lines = Path(log).read_text(errors="replace").splitlines()[-30:]
            tail = "\nlast lines of the simulator log:\n" + "\n".join(lines)
        return f"RtlDevice({self.cfg.name}): {what}{detail} (log: {log}){tail}"

    def _receive(self, timeout, what):
        """The next reply, waiting at most ``timeout`` s and noticing a dead simulator."""
        conn = self._session.conn
        deadline = time.monotonic() + timeout
        while not conn.poll(0.5):
            if not self._session.alive():
                if conn.poll(0):  # it replied and then stopped
                    break
                self._session.close(grace=1.0)
                raise DeviceError(self._died(f"the simulator exited during the {what}"))
            if time.monotonic() > deadline:
                self._session.close(grace=5.0)
                raise DeviceError(self._died(f"no reply from the simulator within {timeout:g} s "
                                             f"during the {what}; the simulator was stopped"))
        try:
            reply = conn.recv()
        except (EOFError, OSError):
            self._session.close(grace=1.0)
            raise DeviceError(self._died(f"the simulator hung up during the {what}")) from None
        if not reply.get("ok"):
            raise DeviceError(f"RtlDevice({self.cfg.name}): the simulator failed the {what}:\n"
                              f"{reply.get('error')}")
        return reply

    def close(self):
        """Stop the simulator (it finishes the run in progress first) and release the device."""
        with self._lock:
            self._session.close()

    # -- running --------------------------------------------------------------------------------

    def _cycle_bound(self, instrs):
        """A generous cycle limit for ``instrs`` with the device's stall settings."""
        cfg = self.cfg
        work = 0
        for instr in instrs:
            if isinstance(instr, isa.Matmul):
                work += instr.m_len + cfg.rows + 16
            elif isinstance(instr, isa.Store):
                work += instr.count * (2 if instr.two_pass else 1) + 16  # two-pass: read twice
            else:
                work += getattr(instr, "count", 0) + 16                  # SET: no count
        slow = 256 / (256 - max(self.src_idle, self.sink_stall))
        return int(10_000 + 8 * work * slow)

    def _check(self, reply, program, n_data, n_out, max_cycles):
        """Raise :class:`DeviceError` unless ``reply`` is a clean run of ``program``
        (:class:`IllegalProgram` where the core's checker faulted an instruction)."""
        n_instr = len(program.instrs)
        where = (f"RtlDevice({self.cfg.name}, seed={self.seed}, src_idle={self.src_idle}, "
                 f"sink_stall={self.sink_stall}), {n_instr}-instruction program")
        if reply["timed_out"]:
            raise DeviceError(f"{where}: not done after {max_cycles} cycles "
                              f"({reply['n_out']} of {n_out} output beats, "
                              f"{reply['data_used']} of {n_data} data beats); "
                              f"log: {self.log_file}")
        if reply["error"]:
            fault, pc = reply["fault"], reply["fault_pc"]
            if fault not in set(legal.Fault) - {legal.Fault.NONE} or pc >= n_instr:
                raise DeviceError(f"{where}: the core stopped with an error naming no rule of "
                                  f"hw/legal.py (fault code {fault}, instruction {pc}): the "
                                  f"gateware is broken; log: {self.log_file}")
            raise IllegalProgram(program, legal.Fault(fault), pc, where=where,
                                 cycles=reply["cycles"])
        if reply["stuck"]:
            raise DeviceError(f"{where}: stuck: no progress for {self.watchdog} cycles; "
                              f"{wait_text(reply['wait'])} ({reply['data_used']} of {n_data} "
                              f"data beats, {reply['n_out']} of {n_out} output beats); "
                              f"log: {self.log_file}")
        if reply["file_error"]:
            raise DeviceError(f"{where}: the harness could not open a stream file in "
                              f"{self._session.tmpdir} or read enough words from it; "
                              f"log: {self.log_file}")
        if reply["data_used"] != n_data or reply["n_out"] != n_out:
            raise DeviceError(f"{where}: the core consumed {reply['data_used']} data beats "
                              f"and produced {reply['n_out']} output beats; the program "
                              f"has {n_data} and {n_out}")

    def _execute(self, program, data_beats):
        cfg = self.cfg
        if data_beats.dtype != torch.int8 or data_beats.dim() != 2 \
                or data_beats.shape[1] != cfg.lanes:
            raise DeviceError(f"data_beats must be a (beats, {cfg.lanes}) torch.int8 tensor, "
                              f"not {tuple(data_beats.shape)} {data_beats.dtype}")
        instrs = program.instrs
        words = program.words()
        n_data = data_beats.shape[0]
        n_out = sum(instr.count for instr in instrs if isinstance(instr, isa.Store))
        out_bytes = n_out * (cfg.cols * cfg.acc_width // 4 + 1)
        if out_bytes > OUTPUT_CAP_BYTES:
            raise DeviceError(f"RtlDevice({cfg.name}): the program's STOREs send {n_out} beats, "
                              f"a {out_bytes / 2**30:.1f} GiB output file, over the "
                              f"{OUTPUT_CAP_BYTES // 2**30} GiB a run may write")
        max_cycles = self.max_cycles or min(self._cycle_bound(instrs), CYCLE_CAP)
        timeout = self.run_timeout or min(120.0 + max_cycles * 1e-3, WALL_CAP_S)
        with self._lock:
            self._start()
            begin = time.perf_counter()
            folder = Path(self._session.tmpdir)
            _write_stream(folder / STREAM_FILES["instr"],
                          b"".join(word.to_bytes(isa.INSTR_WIDTH // 8, "big") for word in words))
            # A beat's lanes as one word, lane 0 in the lowest byte: the file holds the bytes of
            # each beat in reverse lane order, most significant first.
            _write_stream(folder / STREAM_FILES["data"],
                          data_beats.contiguous().numpy().view(np.uint8)[:, ::-1].tobytes())
            loaded = time.perf_counter()
            self._session.conn.send({
                "op": "run", "n_instr": len(words), "n_data": n_data, "seed": self.seed,
                "src_idle": self.src_idle, "sink_stall": self.sink_stall,
                "max_cycles": max_cycles, "watchdog": self.watchdog, "tag": f"{len(instrs)}-instruction program for "
                                                 f"{cfg.name}",
                "ports": dict(self.ports)})
            reply = self._receive(timeout, "run")
            self._check(reply, program, n_data, n_out, max_cycles)
            ran = time.perf_counter()
            out_beats = _read_out(folder / STREAM_FILES["out"], reply["n_out"], cfg)
            end = time.perf_counter()

        cycles = reply["cycles"]
        return out_beats, {
            "cycles": cycles,
            # What the core waited for in its last cycle (idle: an instruction).
            "wait": reply["wait"],
            "instructions": len(instrs),
            "data_beats": n_data,
            "out_beats": out_beats.shape[0],
            "sim_wall_s": end - begin,
            "sim_load_s": (loaded - begin) + (end - ran),
            "sim_run_s": reply["run_s"],
            "sim_cycles_per_s": cycles / reply["run_s"] if reply["run_s"] > 0 else None,
            "seed": self.seed, "src_idle": self.src_idle, "sink_stall": self.sink_stall,
            "simulator": self.simulator, "icarus_std": self.icarus_std,
            "netlist": self.netlist,
        }

    def __repr__(self):
        state = "running" if self._session.alive() else "stopped"
        sim = self.simulator + (f" -g{self.icarus_std}" if self.icarus_std else "") \
            + (" netlist" if self.netlist else "")
        return (f"<RtlDevice {self.cfg.name} ({self.cfg.tag}) {sim} seed={self.seed} "
                f"src_idle={self.src_idle} sink_stall={self.sink_stall} {state}>")


def _mtime(path):
    """``path``'s modification time; 0 once it is gone (another process pruned it)."""
    try:
        return os.path.getmtime(path)
    except FileNotFoundError:
        return 0.0


def _prune_logs(folder, *, keep):
    """Delete all but the latest ``keep`` simulator logs in ``folder``; processes sharing the
    build prune at once, so a log may vanish between the listing and its turn."""
    logs = sorted(folder.glob("rtl_server-*.log"), key=_mtime)
    for old in logs[:-keep]:
        old.unlink(missing_ok=True)
