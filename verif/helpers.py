"""Helpers shared by the tests (the fixtures are in conftest.py).

Test files import from here, never from one another.
"""

import torch
from bertaccel.hw import isa
from bertaccel.sw.cycles import CycleModel

__all__ = ["check_model_cycles", "check_outputs", "load", "matmul", "store", "two_pass_sets", "pass_order"]


def check_model_cycles(device, program, result, *, what=""):
    """Assert that the cycle model gives exactly the cycles of a free-running RTL run.

    ``device`` is the :class:`~bertaccel.sw.devices.rtl.RtlDevice` that ran ``program`` and
    returned ``result``. Runs with idle source cycles or sink backpressure are skipped (their
    stalls are random; the model is for free-running streams). Returns the model's cycles, or
    ``None`` when skipped.
    """
    if device.src_idle or device.sink_stall:
        return None
    report = CycleModel(device.cfg).run(program)
    assert report.cycles == result.cycles, (
        f"cycle model {report.cycles} vs RTL {result.cycles} for {what or repr(program)} on "
        f"{device.cfg.name}: {report.summary()}")
    return report.cycles


def check_outputs(result, reference, *, what=""):
    """Assert that every output of ``result`` equals the same output of ``reference``, bit for bit.

    Both are :class:`~bertaccel.sw.devices.base.RunResult` objects of the same program, typically
    from the RTL and the software device. The message names the output, how many values differ
    and the first of them.
    """
    assert result.outputs.keys() == reference.outputs.keys(), \
        f"outputs {sorted(result.outputs)} vs {sorted(reference.outputs)} for {what}"
    for name, want in reference.outputs.items():
        got = result.outputs[name]
        if torch.equal(got, want):
            continue
        if got.shape != want.shape or got.dtype != want.dtype:
            raise AssertionError(f"output {name!r} for {what}: {got.dtype} {tuple(got.shape)}, "
                                 f"not {want.dtype} {tuple(want.shape)}")
        bad = (got != want).nonzero()
        first = tuple(bad[0].tolist())
        raise AssertionError(f"output {name!r} for {what}: {len(bad)} of {got.numel()} values "
                             f"differ, the first at {first}: {int(got[first])}, not "
                             f"{int(want[first])}")


# Instructions for hand-written programs: every operand at address 0, so that only the counts
# and the token flags shape the timing.

def load(count, **flags):
    """A LOAD of ``count`` beats into scratchpad A at row 0."""
    return isa.Load(target=isa.Target.SPAD_A, addr=0, count=count, **flags)


def matmul(m_len, **flags):
    """A MATMUL of ``m_len`` operand rows from row 0 of both scratchpads into accumulator row 0."""
    return isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=m_len, accumulate=False, **flags)


def store(rows, strips=1, op=isa.EpOp.RAW, **flags):
    """A STORE of ``rows`` x ``strips`` accumulator rows from row 0 through the epilogue ``op``."""
    return isa.Store(acc_addr=0, rows=rows, strips=strips, stride=rows, op=op, **flags)


def two_pass_sets(cfg, strips):
    """SETs that make a SOFTMAX / LAYERNORM STORE of ``strips`` strips legal."""
    return [isa.Set(index=isa.Param.ROW_LEN, value=strips * cfg.cols),
            isa.Set(index=isa.Param.SHIFT1, value=8)]


def pass_order(rows, two_pass):
    """``(row, second)`` in the order the store unit sends a STORE's rows to the epilogue:
    once each, or for a two-pass op P1(0), P1(1), P2(0), P1(2), P2(1), ..., P2(R-1)."""
    if not two_pass:
        return [(r, True) for r in range(rows)]
    order = [(0, False)] + ([(1, False)] if rows > 1 else [])
    for r in range(rows):
        order.append((r, True))
        if r + 2 < rows:
            order.append((r + 2, False))
    return order
