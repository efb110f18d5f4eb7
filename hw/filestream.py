"""File ends of the simulation harness's streams: a source that reads words from a file and a
sink that writes them to one, as the run goes.

The host writes a whole program and its data into files before a run, and reads the outputs
from a file after it; the harness's stream engines (:class:`bertaccel.hw.harness.SimHarness`)
fetch one word a cycle from the source files and append each output beat to the sink file.
Nothing here holds a run's words in a memory, so a program of any size runs in one piece, and
the Amaranth design has no memory to convert (Amaranth writes a memory's initialiser bit by
bit: about 3 s a Mbit).

The two modules are hand-written Verilog-2005 (:data:`VERILOG`) that the harness instantiates
through :class:`~amaranth.hdl.Instance`; the harness's Verilog is Amaranth's output followed
by :data:`VERILOG`. They use only ``$fopen``, ``$fread``, ``$fwrite``, ``$fflush`` and
``$fclose``, which Verilator and Icarus Verilog (``-g2005`` and ``-g2012``) implement alike:
``$fread`` fills a register most significant byte first, ``%h`` writes every digit of the
word. File names are relative to the simulator's working folder.

A word read is a clocked read, as from a synchronous memory: the word fetched with ``en`` high
at a rising edge is on ``data`` after that edge, and ``data`` holds while ``en`` is low. The
word is read into a variable of the always block and then assigned non-blocking, so no other
block can see ``data`` change during the edge that fetched it (blocking writes of ``$fread``'s
output argument would race with the readers of ``data``). The sink writes the values its
inputs held before the edge, as every register of the design samples them.
"""

from amaranth import ClockSignal, Instance, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["FileSource", "FileSink", "VERILOG"]

#: The Verilog of ``bertaccel_file_source`` and ``bertaccel_file_sink``.
VERILOG = """\
// A stream source's file: `open` (re)opens FILE at its start; each `en` reads the next
// WIDTH-bit word (WIDTH/8 bytes, most significant first) onto `data` at the clock edge.
// `error` is set by an open that failed or a read past the end, until the next `open`.
module bertaccel_file_source #(parameter WIDTH = 8, parameter FILE = "source.bin") (
  input clk,
  input open,
  input en,
  output reg [WIDTH-1:0] data,
  output reg error
);
  integer fd;
  integer got;
  reg [WIDTH-1:0] word;
  initial begin
    fd = 0;
    data = 0;
    error = 0;
  end
  always @(posedge clk) begin
    if (open) begin
      if (fd != 0)
        $fclose(fd);
      fd = $fopen(FILE, "rb");
      error <= fd == 0;
    end else if (en) begin
      word = 0;
      got = 0;
      if (fd != 0)
        got = $fread(word, fd);
      data <= word;
      if (got != (WIDTH + 7) / 8)
        error <= 1'b1;
    end
  end
endmodule

// A stream sink's file: `open` (re)creates FILE, empty; each `en` appends `data` as one line
// of hexadecimal digits; `flush` pushes what was written to the file, for the host to read.
// `error` is set by an open that failed, until the next `open`.
module bertaccel_file_sink #(parameter WIDTH = 8, parameter FILE = "sink.hex") (
  input clk,
  input open,
  input en,
  input [WIDTH-1:0] data,
  input flush,
  output reg error
);
  integer fd;
  initial begin
    fd = 0;
    error = 0;
  end
  always @(posedge clk) begin
    if (open) begin
      if (fd != 0)
        $fclose(fd);
      fd = $fopen(FILE, "w");
      error <= fd == 0;
    end else if (fd != 0) begin
      if (en)
        $fwrite(fd, "%h\\n", data);
      if (flush)
        $fflush(fd);
    end
  end
endmodule
"""


class FileSource(wiring.Component):
    """Words of ``width`` bits read from the file ``path``, one per ``en``, as the run goes.

    Parameters
    ----------
    width : int
        Word width in bits, a multiple of 8; a word is ``width // 8`` bytes of the file, most
        significant first.
    path : str
        The file, relative to the simulator's working folder.

    Members
    -------
    open : In(1)
        Open the file from its start at the next clock edge (closing it first if open).
    en : In(1)
        Read the next word at the clock edge; ``open`` wins over ``en``.
    data : Out(width)
        The word read at the last edge where ``en`` was high.
    error : Out(1)
        The last ``open`` failed, or a read since then found fewer than ``width // 8`` bytes.
    """

    def __init__(self, *, width, path):
        if not (isinstance(width, int) and width > 0 and width % 8 == 0):
            raise ValueError(f"width must be a positive multiple of 8, not {width!r}")
        self.width = width
        self.path = str(path)
        super().__init__({"open": In(1), "en": In(1), "data": Out(width), "error": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.file = Instance(
            "bertaccel_file_source", p_WIDTH=self.width, p_FILE=self.path,
            i_clk=ClockSignal(), i_open=self.open, i_en=self.en, o_data=self.data,
            o_error=self.error)
        return m


class FileSink(wiring.Component):
    """Words of ``width`` bits appended to the file ``path``, one line of hex digits per ``en``.

    Parameters
    ----------
    width : int
        Word width in bits.
    path : str
        The file, relative to the simulator's working folder.

    Members
    -------
    open : In(1)
        Create the file empty at the next clock edge (closing it first if open).
    en : In(1)
        Append ``data`` at the clock edge.
    data : In(width)
    flush : In(1)
        Push the lines written so far (including one written at the same edge) to the file.
    error : Out(1)
        The last ``open`` failed.
    """

    def __init__(self, *, width, path):
        if not (isinstance(width, int) and width > 0):
            raise ValueError(f"width must be a positive int, not {width!r}")
        self.width = width
        self.path = str(path)
        super().__init__({"open": In(1), "en": In(1), "data": In(width), "flush": In(1),
                          "error": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.file = Instance(
            "bertaccel_file_sink", p_WIDTH=self.width, p_FILE=self.path,
            i_clk=ClockSignal(), i_open=self.open, i_en=self.en, i_data=self.data,
            i_flush=self.flush, o_error=self.error)
        return m
