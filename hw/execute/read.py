"""How the execute unit reads a scratchpad row for the mesh: the timing both stages share."""

from amaranth import Signal

from ..pipeline import delay

__all__ = ["OPERAND_DELAY", "row_read"]

#: Cycles from a row's issue (weight or operand) to its data at the mesh: the registered read
#: address, the read port's one cycle, then three registers of the data.
OPERAND_DELAY = 5


def row_read(m, port, addr, *, name):
    """Read scratchpad row ``addr`` through ``port``: its data, :data:`OPERAND_DELAY` cycles on.

    Timing: the read address is registered once more, with nothing between that register and
    the RAMs' pins: the ECP5 flow copies it beside each group of RAMs (fpga/ramreg.py), and the
    route to the copies, which spread across the chip, has a cycle of its own instead of
    following the hand-over decision. The read port is always enabled, so no enable has to
    reach the RAMs: a row read for nothing is never used (the mesh takes weight rows by their
    tag, and sums by the accumulator path's ``meta``). A row is read a cycle after it is issued
    here. Its data is registered three times before the mesh, which registers it again at its
    edge: the ECP5 flow moves the first register into the RAMs, and the route from them to the
    mesh's edge has three cycles of its own (on the 8x8 array, whose scratchpads and
    multipliers spread across the chip, that route was 6.6 ns of routing alone with one fabric
    register, and 6.1 ns from the RAM to the first of two).

    Parameters
    ----------
    m : Module
        Gets the registers.
    port : ReadPort.Signature interface
        The scratchpad's read port, driven here.
    addr : Signal
        The row issued this cycle.
    name : str
        Names the registers: ``{name}_addr`` and the delay line ``{name}_data_d*``.

    Returns
    -------
    Value
        The row read for the ``addr`` of :data:`OPERAND_DELAY` cycles ago.
    """
    addr_reg = Signal.like(addr, name=f"{name}_addr")
    m.d.sync += addr_reg.eq(addr)
    m.d.comb += [port.addr.eq(addr_reg), port.en.eq(1)]
    return delay(m, port.data, OPERAND_DELAY - 2, name=f"{name}_data")
