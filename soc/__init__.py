"""A LiteX system-on-chip that runs C firmware driving the accelerator, in Verilator.

:mod:`.build` makes the SoC (VexRiscv, ROM, SRAM, main RAM, UART, timer and the AXI4 shell)
and its Verilated model; :mod:`.firmware` compiles the firmware for one program and reads its
report. ``bertaccel soc`` (``cli/``) and ``verif/system/test_soc.py`` use both. LiteX, Migen,
the VexRiscv Verilog and the RISC-V compiler are needed only here (docs/soc.md).
"""

__all__ = []
