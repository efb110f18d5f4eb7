"""Reproducible Verilog from Amaranth components."""

import re

from amaranth.back import verilog

__all__ = ["convert"]

# Amaranth writes one `initial` assignment per memory word, even when every word is zero:
# 131072 lines for a 128K-deep memory, which Verilator turns into one enormous C++ function.
# Verilator and FPGA block RAMs both start at zero, so an all-zero initialiser says nothing.
_ZERO_INIT = re.compile(
    r"^(?P<indent>[ \t]*)initial begin\n"
    r"(?:[ \t]*\\?[\w$.]+ ?\[\d+\] = \d+'[hbd]0+;\n)+"
    r"[ \t]*end\n",
    re.MULTILINE)


def convert(component, *, name):
    """Verilog text of ``component`` as module ``name``, with no source paths (so identical from
    run to run) and without all-zero memory initialisers."""
    text = verilog.convert(component, name=name, emit_src=False)
    return _ZERO_INIT.sub("", text)
