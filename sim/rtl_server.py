"""The cocotb side of :class:`bertaccel.sw.devices.rtl.RtlDevice`: a simulator that serves program runs.

One cocotb test, :func:`serve`, runs for the life of an ``RtlDevice``. It starts the clock,
resets the :class:`~bertaccel.hw.harness.SimHarness`, connects to the Unix socket named by
``BERTACCEL_RTL_SOCKET`` and answers requests until it is told to stop (or the host goes away).

Protocol (pickled dicts over a :class:`multiprocessing.connection.Connection`):

``{"op": "run", "n_instr": int, "n_data": int, "seed": int, "src_idle": int, "sink_stall": int,
"max_cycles": int, "watchdog": int, "tag": str, "ports": dict}``
    The host has written the program and its data into the harness's stream files
    (:data:`bertaccel.hw.harness.STREAM_FILES`) in the simulator's working folder. Pulse
    ``start``, await ``done`` for at most ``max_cycles`` clock cycles, and reply ``{"ok": True,
    "cycles", "n_out", "data_used", "error", "fault", "fault_pc", "file_error", "stuck",
    "wait", "timed_out", "run_s", "wall_s"}``; ``watchdog`` (optional, 2**20 by default) is the
    harness's watchdog limit, ``stuck`` whether it ended the run and ``wait`` the core's
    :data:`~bertaccel.hw.watchdog.Wait` bits then;
    the output beats are then in the output file, for the host to read. After a time-out, or a
    run in which the core flagged an illegal instruction, the watchdog fired or a stream file
    failed, the harness is
    reset, so the next run starts clean. ``ports`` (optional) holds values for top-level inputs
    that a variant of the harness has besides its own (the mutant select of
    :mod:`bertaccel.sim.mutate`); when they differ from the last run's, they are set and the
    harness is reset under them first, so that no run inherits state made under other values.

``{"op": "stop"}``
    Reply ``{"ok": True}`` and end the test, which ends the simulator.

A request that raises gets ``{"ok": False, "error": "<traceback>"}`` and the server goes on.

The testbench touches Python twice per run, never once per cycle nor once per word: the stream
sources, the sink and the stall generators are gateware in the harness, reading and writing the
files as the run goes. Inputs are driven just after a falling edge and sampled at the next
falling edge, so they never race the rising edge that acts on them.
"""

import os
import time
import traceback
from multiprocessing.connection import Client

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, First, RisingEdge, Timer

from bertaccel.hw.watchdog import DEFAULT_LIMIT

__all__ = ["serve", "SOCKET_ENV", "PERIOD_NS"]

SOCKET_ENV = "BERTACCEL_RTL_SOCKET"
PERIOD_NS = 10


class _Server:
    """Drives one :class:`SimHarness` on behalf of the host."""

    def __init__(self, dut):
        self.dut = dut
        self.log = dut._log.getChild("rtl_server")
        self.runs = 0
        self.ports = {}

    async def reset(self, cycles=4):
        dut = self.dut
        dut.rst.value = 1
        dut.start.value = 0
        for _ in range(cycles):
            await FallingEdge(dut.clk)
        dut.rst.value = 0
        await FallingEdge(dut.clk)

    async def run(self, request):
        dut = self.dut
        self.runs += 1
        n_instr, n_data = request["n_instr"], request["n_data"]
        seed, src_idle, sink_stall = request["seed"], request["src_idle"], request["sink_stall"]
        max_cycles = request["max_cycles"]
        ports = request.get("ports") or {}
        if ports != self.ports:
            for name, value in ports.items():
                getattr(dut, name).value = value
            self.ports = dict(ports)
            await self.reset()
        self.log.info("run %d (%s): %d instructions, %d data beats, seed %d, src_idle %d/256, "
                      "sink_stall %d/256, max_cycles %d", self.runs, request.get("tag", ""),
                      n_instr, n_data, seed, src_idle, sink_stall, max_cycles)
        begin = time.perf_counter()
        dut.n_instr.value = n_instr
        dut.n_data.value = n_data
        dut.seed.value = seed
        dut.src_idle.value = src_idle
        dut.sink_stall.value = sink_stall
        dut.watchdog.value = request.get("watchdog", DEFAULT_LIMIT)
        dut.start.value = 1
        await FallingEdge(dut.clk)
        dut.start.value = 0
        # One callback for the whole run: done's edge or the time limit, whichever comes first
        # (ClockCycles would wake Python on every edge).
        done = RisingEdge(dut.done)
        fired = await First(done, Timer(max_cycles * PERIOD_NS, unit="ns"))
        timed_out = fired is not done and not dut.done.value
        await FallingEdge(dut.clk)
        end = time.perf_counter()

        cycles = dut.cycles.value.to_unsigned()
        n_out = dut.n_out.value.to_unsigned()
        data_used = dut.data_used.value.to_unsigned()
        error = bool(dut.error.value)
        fault = dut.fault.value.to_unsigned()
        fault_pc = dut.fault_pc.value.to_unsigned()
        file_error = bool(dut.file_error.value)
        stuck = bool(dut.stuck.value)
        wait = dut.wait.value.to_unsigned()
        if timed_out or error or file_error or stuck:
            # The core's error flag is sticky and drops every later instruction.
            self.log.warning("run %d: %s (n_out %d, data_used %d); resetting the harness",
                             self.runs, f"timed out after {max_cycles} cycles" if timed_out
                             else f"fault {fault} at instruction {fault_pc}" if error
                             else f"stuck, waiting ({wait:#x})" if stuck
                             else "a stream file failed", n_out, data_used)
            await self.reset()
        self.log.info("run %d: %d cycles, %d output beats, %d data beats used, error %d, "
                      "file_error %d, %.3f s (%.0f cycles/s)", self.runs, cycles, n_out,
                      data_used, error, file_error, end - begin, cycles / max(end - begin, 1e-9))
        return {"ok": True, "cycles": cycles, "n_out": n_out, "data_used": data_used,
                "error": error, "fault": fault, "fault_pc": fault_pc, "file_error": file_error,
                "stuck": stuck, "wait": wait, "timed_out": timed_out, "run_s": end - begin,
                "wall_s": time.perf_counter() - begin}


@cocotb.test()
async def serve(dut):
    """Serve run requests from the host until it says stop or disconnects."""
    path = os.environ[SOCKET_ENV]
    server = _Server(dut)
    conn = Client(path, family="AF_UNIX")
    server.log.info("connected to %s", path)
    Clock(dut.clk, PERIOD_NS, unit="ns", impl="gpi").start()
    await server.reset()
    conn.send({"ok": True, "ready": True, "pid": os.getpid()})
    try:
        while True:
            try:
                request = conn.recv()  # blocks the simulator: nothing is running meanwhile
            except (EOFError, OSError):
                server.log.warning("the host went away; stopping")
                return
            op = request.get("op")
            if op == "stop":
                conn.send({"ok": True})
                return
            try:
                if op != "run":
                    raise ValueError(f"unknown request op {op!r}")
                reply = await server.run(request)
            except Exception:  # noqa: BLE001 - reported to the host, which raises it
                reply = {"ok": False, "error": traceback.format_exc()}
                server.log.error("request failed:\n%s", reply["error"])
            conn.send(reply)
    finally:
        conn.close()
