"""The platform under which components state their internal invariants, for formal proofs.

A component whose proof needs facts about its own registers (the induction invariants that a
k-induction proof cannot find from the outputs alone) adds them, as ``Assert`` statements,
when it is elaborated for :data:`FORMAL`; and, where a proof compares what the component holds
with a reference model, drives a view of it (``Queue.contents``). Under every other platform
the component is unchanged: the Verilog of the product carries none of it. The harnesses that
use them are in ``verif/formal``.
"""

__all__ = ["FORMAL", "is_formal"]


class _FormalTarget:
    """Stands in for an Amaranth platform when a design is written for SymbiYosys."""

    family = None

    def __repr__(self):
        return "FORMAL"


#: Pass as ``platform`` to ``amaranth.back.rtlil.convert`` for a proof.
FORMAL = _FormalTarget()


def is_formal(platform):
    """Whether components add their invariants for ``platform``."""
    return platform is FORMAL
