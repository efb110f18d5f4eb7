"""A LiteX system-on-chip that runs C firmware driving the accelerator, in Verilator.

:mod:`.build` makes the SoC (VexRiscv, ROM, SRAM, main RAM, UART, timer and the AXI4 shell)
and its Verilated model; :mod:`.firmware` compiles a firmware (one program, or one encoder
layer laid out by :mod:`.layer`) and reads its report; :mod:`.run` puts them together.
``bertaccel soc`` (``cli/``) and ``verif/system/test_soc.py`` use them. LiteX, Migen,
the VexRiscv Verilog and the RISC-V compiler are needed only here (docs/soc.md).
"""

__all__ = []
