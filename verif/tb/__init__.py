"""Testbench parts that any test may import.

:mod:`verif.tb.streams`: for cocotb, a source, a sink and a monitor of Amaranth streams with
cocotbext-axi's pause generators, and the drain every test ends with. :mod:`verif.tb.harness`:
the core's harness in the Amaranth simulator, as a device. :mod:`verif.tb.programs`: programs
for the tests of the core. :mod:`verif.tb.models`: reference models of blocks (a PE, the
epilogue's intake).
"""
