"""The cocotb side of :class:`bertaccel.sw.devices.rtl.RtlDevice`: a simulator that serves program runs.

One cocotb test, :func:`serve`, runs for the life of an ``RtlDevice``. It starts the clock,
resets the :class:`~bertaccel.hw.harness.SimHarness`, connects to the Unix socket named by
``BERTACCEL_RTL_SOCKET`` and answers requests until it is told to stop (or the host goes away).

Protocol (pickled dicts over a :class:`multiprocessing.connection.Connection`):

``{"op": "run", "instr": [int], "data": [int], "seed": int, "src_idle": int, "sink_stall": int,
"max_cycles": int, "out_bytes": int, "tag": str}``
    Write ``instr`` (128-bit words) into the instruction memory and ``data`` (``lanes`` x 8-bit
    words) into the data-in memory, pulse ``start``, await ``done`` for at most ``max_cycles``
    clock cycles, and read back ``n_out`` output words. Reply ``{"ok": True, "out": bytes,
    "cycles", "n_out", "data_used", "error", "timed_out", "load_s", "run_s", "read_s",
    "wall_s"}`` where ``out`` holds ``n_out`` words of ``out_bytes`` bytes, little-endian. After a
    time-out, or a run in which the core flagged an illegal instruction, the harness is reset
    (registers only: the memories keep their contents), so the next run starts clean.

``{"op": "stop"}``
    Reply ``{"ok": True}`` and end the test, which ends the simulator.

A request that raises gets ``{"ok": False, "error": "<traceback>"}`` and the server goes on.

The testbench touches Python once per memory word and twice per run, never once per cycle: the
stream sources, the sink and the stall generators are gateware in the harness. All host-port
traffic is driven just after a falling edge and sampled at the next falling edge, so it never
races the rising edge that acts on it.
"""

import os
import time
import traceback
from multiprocessing.connection import Client

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, First, RisingEdge, Timer

__all__ = ["serve", "SOCKET_ENV", "PERIOD_NS"]

SOCKET_ENV = "BERTACCEL_RTL_SOCKET"
PERIOD_NS = 10

# h_sel values (bertaccel.hw.harness.HostSel); restated to keep the simulator's imports light.
_INSTR, _DATA_IN, _DATA_OUT = 0, 1, 2


class _Server:
    """Drives one :class:`SimHarness` on behalf of the host."""

    def __init__(self, dut):
        self.dut = dut
        self.log = dut._log.getChild("rtl_server")
        self.runs = 0

    async def reset(self, cycles=4):
        dut = self.dut
        dut.rst.value = 1
        dut.start.value = 0
        dut.h_we.value = 0
        dut.h_sel.value = 0
        dut.h_addr.value = 0
        for _ in range(cycles):
            await FallingEdge(dut.clk)
        dut.rst.value = 0
        await FallingEdge(dut.clk)

    async def write(self, sel, words):
        dut = self.dut
        h_addr, h_wdata = dut.h_addr, dut.h_wdata
        falling = FallingEdge(dut.clk)
        dut.h_sel.value = sel
        dut.h_we.value = 1
        for addr, word in enumerate(words):
            h_addr.value = addr
            h_wdata.value = word
            await falling  # the rising edge in between wrote the word
        dut.h_we.value = 0

    async def read(self, sel, count):
        dut = self.dut
        h_addr, h_rdata = dut.h_addr, dut.h_rdata
        falling = FallingEdge(dut.clk)
        dut.h_sel.value = sel
        h_addr.value = 0
        await falling
        words = []
        for addr in range(1, count + 1):
            # h_rdata now shows the word addressed before the last rising edge.
            h_addr.value = addr
            words.append(h_rdata.value.to_unsigned())
            await falling
        return words

    async def run(self, request):
        dut = self.dut
        self.runs += 1
        instr, data = request["instr"], request["data"]
        seed, src_idle, sink_stall = request["seed"], request["src_idle"], request["sink_stall"]
        max_cycles, out_bytes = request["max_cycles"], request["out_bytes"]
        self.log.info("run %d (%s): %d instructions, %d data beats, seed %d, src_idle %d/256, "
                      "sink_stall %d/256, max_cycles %d", self.runs, request.get("tag", ""),
                      len(instr), len(data), seed, src_idle, sink_stall, max_cycles)
        begin = time.perf_counter()
        await self.write(_INSTR, instr)
        await self.write(_DATA_IN, data)
        loaded = time.perf_counter()

        dut.n_instr.value = len(instr)
        dut.n_data.value = len(data)
        dut.seed.value = seed
        dut.src_idle.value = src_idle
        dut.sink_stall.value = sink_stall
        dut.start.value = 1
        await FallingEdge(dut.clk)
        dut.start.value = 0
        # One callback for the whole run: done's edge or the time limit, whichever comes first
        # (ClockCycles would wake Python on every edge).
        done = RisingEdge(dut.done)
        fired = await First(done, Timer(max_cycles * PERIOD_NS, unit="ns"))
        timed_out = fired is not done and not dut.done.value
        await FallingEdge(dut.clk)
        ran = time.perf_counter()

        cycles = dut.cycles.value.to_unsigned()
        n_out = dut.n_out.value.to_unsigned()
        data_used = dut.data_used.value.to_unsigned()
        error = bool(dut.error.value)
        if timed_out:
            self.log.warning("run %d timed out after %d cycles (n_out %d, data_used %d); "
                             "resetting the harness", self.runs, max_cycles, n_out, data_used)
            out = b""
            await self.reset()
        else:
            mask = (1 << (8 * out_bytes)) - 1
            words = await self.read(_DATA_OUT, n_out)
            out = b"".join((word & mask).to_bytes(out_bytes, "little") for word in words)
            if error:
                # The core's error flag is sticky and drops every later instruction.
                self.log.warning("run %d: the core flagged an illegal instruction; resetting "
                                 "the harness", self.runs)
                await self.reset()
        end = time.perf_counter()
        self.log.info("run %d: %d cycles, %d output beats, %d data beats used, error %d, "
                      "%.3f s (%.0f cycles/s)", self.runs, cycles, n_out, data_used, error,
                      end - begin, cycles / max(ran - loaded, 1e-9))
        return {"ok": True, "out": out, "cycles": cycles, "n_out": n_out,
                "data_used": data_used, "error": error, "timed_out": timed_out,
                "load_s": loaded - begin, "run_s": ran - loaded, "read_s": end - ran,
                "wall_s": end - begin}


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
