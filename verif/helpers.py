"""Helpers shared by the tests (the fixtures are in conftest.py)."""

from bertaccel.sw.cycles import CycleModel, rtl_chunks

__all__ = ["check_model_cycles"]


def check_model_cycles(device, program, result, *, what=""):
    """Assert that the cycle model gives exactly the cycles of a free-running RTL run.

    ``device`` is the :class:`~bertaccel.sw.devices.rtl.RtlDevice` that ran ``program`` and
    returned ``result``. Runs with idle source cycles or sink backpressure are skipped (their
    stalls are random; the model is for free-running streams). Returns the model's cycles, or
    ``None`` when skipped.
    """
    if device.src_idle or device.sink_stall:
        return None
    report = CycleModel(device.cfg).run(program, chunks=rtl_chunks(program, device.depths))
    assert report.cycles == result.cycles, (
        f"cycle model {report.cycles} vs RTL {result.cycles} for {what or repr(program)} on "
        f"{device.cfg.name}: {report.summary()}")
    return report.cycles
