"""The simulation runtime shared by the RTL device and the tests: Verilator builds driven by
cocotb (:mod:`.build`) and the simulator side of the RTL device (:mod:`.rtl_server`)."""
