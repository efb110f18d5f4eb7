"""The watchdog: ends a run that makes no progress, and what the core was waiting for.

A legal program never stops making progress: every instruction is taken by its unit within a
bounded time of the one before it (dispatch is in program order and the checker refuses the
token counts that would deadlock, :mod:`.legal`), and the longest instruction moves at most
``2 * max(spad_depth, acc_depth)`` rows with no handshake outside its unit (a two-pass STORE
into the scratchpad). So a run in which no stream moves and no unit takes an instruction for
:data:`DEFAULT_LIMIT` cycles waits for something that will not come: input data the host did
not send, room for results nobody takes, a bus that does not answer. The harness and the AXI
shell each count such cycles with a :class:`Watchdog` and end the run; :data:`Wait` says what
the core was waiting for at that moment.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["DEFAULT_LIMIT", "LIMIT_WIDTH", "Wait", "WAIT_TEXT", "Watchdog", "wait_text"]

#: Cycles without progress after which a run is stuck, unless the host sets another limit
#: (``WATCHDOG`` on the AXI shell, ``RtlDevice(watchdog=...)``): 2**20, about 7 ms at 150 MHz,
#: far above the longest instruction of any config (a test checks the presets).
DEFAULT_LIMIT = 1 << 20
#: Width of a limit.
LIMIT_WIDTH = 32

#: What the core waits for, as its ``o_wait`` port gives it each cycle: ``instr`` it can take
#: an instruction and none is offered; ``data`` the load unit wants an input beat and none is
#: offered; ``room`` a result is offered and not taken; ``load``, ``execute``, ``store`` that
#: unit holds an instruction.
Wait = data.StructLayout({"instr": 1, "data": 1, "room": 1, "load": 1, "execute": 1,
                          "store": 1})

#: :data:`Wait`'s fields in words, for the host's messages.
WAIT_TEXT = {
    "instr": "the core waits for an instruction",
    "data": "the load unit waits for input data",
    "room": "the store unit waits for room for a result",
    "load": "the load unit holds an instruction",
    "execute": "the execute unit holds an instruction",
    "store": "the store unit holds an instruction",
}


def wait_text(bits):
    """The set fields of a :data:`Wait` value (an int) in words, ``"; "``-joined; what the
    units hold comes last ("nothing" when no field is set)."""
    names = [name for name, _ in Wait]
    said = [WAIT_TEXT[name] for index, name in enumerate(names) if bits >> index & 1]
    return "; ".join(said) or "nothing"


class Watchdog(wiring.Component):
    """Counts the cycles of a run without progress; fires at ``limit``.

    Members
    -------
    start : In(1)
        A run begins: latch ``limit`` and clear the count and ``fired``.
    limit : In(LIMIT_WIDTH)
        Cycles without progress that end the run; 0 turns the watchdog off.
    running : In(1)
        Count only while a run is in progress.
    progress : In(1)
        Something moved this cycle: the count starts over.
    fired : Out(1)
        Sticky until the next ``start``: ``limit`` cycles passed without progress.
    """

    start: In(1)
    limit: In(LIMIT_WIDTH)
    running: In(1)
    progress: In(1)
    fired: Out(1)

    def elaborate(self, platform):
        m = Module()
        limit = Signal(LIMIT_WIDTH)
        idle = Signal(LIMIT_WIDTH)      # cycles since the last progress
        # Timing: the compare reads two registers; `fired` is a register.
        with m.If(self.running & ~self.fired):
            m.d.sync += idle.eq(Mux(self.progress, 0, idle + 1))
            with m.If((limit != 0) & (idle == limit)):
                m.d.sync += self.fired.eq(1)
        with m.If(self.start):
            m.d.sync += [limit.eq(self.limit), idle.eq(0), self.fired.eq(0)]
        return m
