"""The gateware: Amaranth generators of the accelerator, sized by one :class:`~.config.AccelConfig`.

From the PE up: :mod:`.pe` -> :mod:`.mesh` -> the load, execute and store units
(:mod:`.load`, :mod:`.execute`, :mod:`.store`) with the epilogue on the accumulator drain
(:mod:`.epilogue`) -> :mod:`.controller` and :mod:`.memory` -> :mod:`.core`; the AXI4 shell
(:mod:`.axi`), the simulation harness (:mod:`.harness`) and the one Verilog converter
(:mod:`.verilog`). The instruction set is :mod:`.isa`, written once for gateware and host.
"""
