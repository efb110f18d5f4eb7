"""The harness's file ends (:mod:`bertaccel.hw.filestream`) under Verilator and Icarus.

A source reads words of an odd byte count (24 bits) in file order, most significant byte first,
one per ``en``, each a clock edge after it was asked for, and holds it while ``en`` is low; a
read past the end and a missing file raise ``error``, and ``open`` starts the file over and
clears it. A sink writes one line of hex digits per ``en``, readable after ``flush``; a file it
cannot create raises ``error``. The same cocotb test runs on each simulator (the module is both
the pytest file and the cocotb test module).
"""

import gc
import inspect
import os
import random
import shutil
import warnings
from pathlib import Path

import cocotb
import pytest
from amaranth import Module
from amaranth.hdl import UnusedElaboratable
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

from bertaccel.hw.filestream import VERILOG, FileSink, FileSource
from bertaccel.hw.verilog import convert, source_key
from bertaccel.sim.build import build, run_cocotb

__all__ = []

MODULE = "verif.block.test_filestream"
WIDTH = 24
SIMULATORS = {"verilator": ("verilator", "2012"), "icarus2005": ("icarus", "2005"),
              "icarus2012": ("icarus", "2012")}


class FileEnds(wiring.Component):
    """A :class:`FileSource` of ``in.bin`` and a :class:`FileSink` of ``out.hex``, side by side,
    their ports at the top."""

    src_open: In(1)
    src_en: In(1)
    src_data: Out(WIDTH)
    src_error: Out(1)
    snk_open: In(1)
    snk_en: In(1)
    snk_data: In(WIDTH)
    snk_flush: In(1)
    snk_error: Out(1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.src = src = FileSource(width=WIDTH, path="in.bin")
        m.submodules.snk = snk = FileSink(width=WIDTH, path="out.hex")
        m.d.comb += [
            src.open.eq(self.src_open), src.en.eq(self.src_en),
            self.src_data.eq(src.data), self.src_error.eq(src.error),
            snk.open.eq(self.snk_open), snk.en.eq(self.snk_en), snk.data.eq(self.snk_data),
            snk.flush.eq(self.snk_flush), self.snk_error.eq(snk.error),
        ]
        return m


# -- cocotb side (runs inside the simulator, in the test's folder) --------------------------------

async def _pulse(dut, port):
    port.value = 1
    await FallingEdge(dut.clk)
    port.value = 0


@cocotb.test()
async def file_ends(dut):
    rng = random.Random(int(os.environ.get("BERTACCEL_FILE_SEED", "3")))
    words = [rng.randrange(1 << WIDTH) for _ in range(20)]
    Path("in.bin").write_bytes(b"".join(word.to_bytes(WIDTH // 8, "big") for word in words))
    Clock(dut.clk, 10, unit="ns").start()
    for port in (dut.rst, dut.src_open, dut.src_en, dut.snk_open, dut.snk_en, dut.snk_flush):
        port.value = 0
    await FallingEdge(dut.clk)

    await _pulse(dut, dut.src_open)
    assert not dut.src_error.value
    got = []
    for index in range(len(words)):
        dut.src_en.value = index % 3 != 2      # every third cycle idle
        await FallingEdge(dut.clk)
        if index % 3 != 2:
            got.append(dut.src_data.value.to_unsigned())
        else:
            assert dut.src_data.value.to_unsigned() == got[-1], "data changed without en"
    dut.src_en.value = 1
    while len(got) < len(words):
        await FallingEdge(dut.clk)
        got.append(dut.src_data.value.to_unsigned())
    dut.src_en.value = 0
    assert got == words and not dut.src_error.value
    await _pulse(dut, dut.src_en)              # one word too many
    assert dut.src_error.value, "a read past the end did not raise error"
    await _pulse(dut, dut.src_open)
    assert not dut.src_error.value, "open did not clear error"
    await _pulse(dut, dut.src_en)
    assert dut.src_data.value.to_unsigned() == words[0], "open did not start the file over"
    os.remove("in.bin")
    await _pulse(dut, dut.src_open)
    assert dut.src_error.value, "opening a missing file did not raise error"

    await _pulse(dut, dut.snk_open)
    assert not dut.snk_error.value
    for index, word in enumerate(words):
        dut.snk_en.value = 1
        dut.snk_data.value = word
        dut.snk_flush.value = index == len(words) - 1   # the last line and the flush together
        await FallingEdge(dut.clk)
    dut.snk_en.value = dut.snk_flush.value = 0
    lines = Path("out.hex").read_text().split()
    assert lines == [f"{word:0{WIDTH // 4}x}" for word in words]
    os.remove("out.hex")
    os.mkdir("out.hex")                        # a folder: the sink cannot create its file
    await _pulse(dut, dut.snk_open)
    assert dut.snk_error.value, "a file that cannot be created did not raise error"


# -- pytest side ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SIMULATORS))
def test_file_ends(sim_root, tmp_path, name):
    simulator, std = SIMULATORS[name]
    if simulator == "icarus" and shutil.which("iverilog") is None:
        from verif.helpers import missing_tool  # here: the simulator imports this file too
        missing_tool("needs Icarus Verilog: iverilog on PATH (Debian package iverilog)")
    suffix = f"-icarus{std}" if simulator == "icarus" else ""
    sim = build(lambda: convert(FileEnds(), name="file_ends") + VERILOG, name="file_ends",
                build_dir=sim_root / f"file_ends-w{WIDTH}{suffix}", simulator=simulator,
                icarus_std=std, source_key=source_key(inspect.getsource(FileEnds)))
    run_cocotb(sim, MODULE, "file_ends", test_dir=tmp_path, timeout=120,
               log_file=tmp_path / "sim.log")


def test_widths_are_checked():
    with warnings.catch_warnings():
        # The refused components are never elaborated; collect them while that is expected.
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="multiple of 8, not 12"):
            FileSource(width=12, path="x.bin")
        with pytest.raises(ValueError, match="positive int, not 0"):
            FileSink(width=0, path="x.hex")
        gc.collect()
