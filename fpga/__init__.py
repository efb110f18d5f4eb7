"""FPGA flows: synthesis, place and route with yosys and nextpnr (:mod:`.synth`), the netlist
passes between them (:mod:`.ramreg`), and the ULX3S board with its UART bridge
(:mod:`.ulx3s`, :mod:`.bridge`)."""
