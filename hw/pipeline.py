"""Delay lines: how a value travels down a pipeline that never stalls.

Every unit builds its pipeline registers with these two functions, so a register's name says
which line it belongs to and how far down it is: ``{name}_d1`` is the value one cycle ago,
``{name}_d2`` two cycles ago, and so on. The names matter beyond the Verilog: timing reports
name the registers, and ``keep`` (:data:`bertaccel.hw.dsp.KEEP`) is given per register.
"""

from amaranth import Signal

__all__ = ["delay", "delay_line"]


def delay_line(m, value, cycles, *, name, reset_less=True, attrs=None):
    """``[value, value 1 cycle ago, ..., value cycles cycles ago]``: ``cycles`` registers.

    Parameters
    ----------
    m : Module
        Gets the registers, in its ``sync`` domain.
    value : Value
        What enters the line.
    cycles : int
        How many registers (0: the list is ``[value]``).
    name : str
        The registers are ``{name}_d1`` .. ``{name}_d{cycles}``.
    reset_less : bool
        Reset-less registers (the default: a value that travels with a beat needs no reset,
        and a register right after a block RAM must have none to move into it,
        :mod:`bertaccel.fpga.ramreg`). A line that carries a valid flag keeps its reset.
    attrs : dict
        Attributes of every register (:data:`bertaccel.hw.dsp.KEEP` keeps copies apart);
        None: those of ``value`` when it is a signal (``Signal.like``).
    """
    if cycles < 0:
        raise ValueError(f"a delay line has at least 0 registers, not {cycles}")
    kwargs = {} if attrs is None else {"attrs": attrs}
    line = [value]
    for stage in range(cycles):
        reg = Signal.like(value, name=f"{name}_d{stage + 1}", reset_less=reset_less, **kwargs)
        m.d.sync += reg.eq(line[-1])
        line.append(reg)
    return line


def delay(m, value, cycles, *, name, reset_less=True, attrs=None):
    """``value`` as it was ``cycles`` cycles ago: the end of :func:`delay_line`."""
    return delay_line(m, value, cycles, name=name, reset_less=reset_less, attrs=attrs)[-1]
