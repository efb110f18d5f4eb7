"""FPGA flows: synthesis, place and route with yosys and nextpnr (:mod:`.synth`, which runs the
flow, with :mod:`.targets`, :mod:`.designs`, :mod:`.scripts`, :mod:`.tools`, :mod:`.reports`,
:mod:`.tables` and :mod:`.errors`), the netlist passes between the tools (:mod:`.ramreg`), and
the ULX3S board with its UART bridge (:mod:`.ulx3s`, :mod:`.bridge`)."""
