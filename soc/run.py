"""One program through the whole SoC: build (cached), firmware, run, and the results.

:func:`run_image` is what ``bertaccel soc`` and ``verif/system/test_soc.py`` call: it builds
the SoC's model for the image's config (:func:`bertaccel.soc.build.build_soc`, cached),
compiles the firmware with the image linked in, runs it, and returns the outputs decoded from
what the firmware printed, with the ``CYCLES`` it read. :func:`run_program` lays a program and
its inputs out first (:func:`bertaccel.sw.devices.axi.layout`); :func:`gemm_image` makes the
image of a random GEMM, and :func:`run_gemm` runs it on the SoC and on the software device.
"""

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..sw.devices import axi as axi_host
from .build import SocError, build_soc, run_soc
from .firmware import checksum, compile_firmware, parse_report

__all__ = ["SocRun", "run_program", "run_image", "gemm_image", "run_gemm"]


@dataclass
class SocRun:
    """What :func:`run_image` returns.

    Members
    -------
    outputs : dict of str to torch.Tensor
        The program's outputs, from the output area the firmware printed; empty for a run that
        did not end with ``end ok``.
    cycles : int or None
        ``CYCLES`` as the firmware read it: ``CTRL.START`` to ``STATUS.DONE``, every memory
        access through the SoC's interconnect included (None after a fault).
    report : Report
        Everything the firmware printed, parsed (:class:`bertaccel.soc.firmware.Report`).
    image : DramImage
    build_s, firmware_s, run_s : float
        Seconds for the model's build (0 from the cache), the firmware's compile, the run.
    """
    outputs: dict
    cycles: int
    report: object
    image: object
    build_s: float
    firmware_s: float
    run_s: float


def run_program(program, *, folder, timeout=300, log=print, **inputs):
    """Run ``program`` with ``inputs`` (int8 tensors by input name) on the SoC: its
    :func:`~bertaccel.sw.devices.axi.layout`, then :func:`run_image`."""
    image = axi_host.layout(program, align=64, **inputs)
    return run_image(image, folder=folder, timeout=timeout, log=log)


def run_image(image, *, folder, timeout=300, log=print, check=True):
    """Run ``image`` (a :class:`~bertaccel.sw.devices.axi.DramImage`) on the SoC.

    Parameters
    ----------
    image : DramImage
        Its segments are linked into the firmware as they are (a test may patch them).
    folder : path
        The build folder of the config's model (``build/sim/soc-<cfg.tag>`` by convention;
        :func:`~bertaccel.soc.build.build_soc`), the firmware in its ``firmware/``.
    timeout : float
        Seconds the model may run.
    log : callable
        Progress of the build, one line at a time.
    check : bool
        Raise if the firmware did not end with ``end ok``; with False, such a run is returned
        with no outputs, its report saying why (``report.error``, ``report.facts``).

    Raises
    ------
    SocError
        A step failed; with ``check``, the firmware ended with ``end error ...`` (the message
        has the reason and the fault registers it printed); what it printed does not hold
        together (the checksum, the counters).
    """
    build = build_soc(image.cfg, Path(folder), log=log)
    start = time.monotonic()
    firmware = compile_firmware(build, image, build.folder / "firmware")
    compiled = time.monotonic()
    report = parse_report(run_soc(build, firmware, timeout=timeout))
    ran = time.monotonic()
    run = SocRun(outputs={}, cycles=report.facts.get("cycles"), report=report, image=image,
                 build_s=build.seconds, firmware_s=compiled - start, run_s=ran - compiled)
    if not report.ok:
        if not check:
            return run
        facts = ", ".join(f"{name} {value:#x}" for name, value in report.facts.items())
        raise SocError(f"the firmware reported {report.error or 'no end'}"
                       + (f" ({facts})" if facts else ""))
    _check_report(report, image)
    run.outputs = report.outputs(image)
    return run


def _check_report(report, image):
    """Raise :class:`SocError` unless what the firmware printed holds together."""
    facts = report.facts
    if len(report.output) != image.out_size or checksum(report.output) != facts["checksum"]:
        raise SocError(f"the firmware printed {len(report.output)} output bytes with checksum "
                       f"{checksum(report.output):#010x}; it says {image.out_size} and "
                       f"{facts.get('checksum', 0):#010x}")
    counts = (facts["out_count"], facts["data_count"], facts["prog_count"])
    if counts != (image.out_len, image.data_len, image.prog_len):
        raise SocError(f"the shell counted {counts} output beats, input beats and "
                       f"instructions; the program has "
                       f"{(image.out_len, image.data_len, image.prog_len)}")


def gemm_image(cfg, m, k, n, *, seed=1):
    """A random ``m x k`` by ``k x n`` int8 GEMM (``seed``) compiled for ``cfg`` and laid out:
    ``(image, inputs)``."""
    from ..sw.tiler import compile_gemm

    gen = torch.Generator().manual_seed(seed)
    inputs = {"a": torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8),
              "b": torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8)}
    return axi_host.layout(compile_gemm(cfg, m, k, n), align=64, **inputs), inputs


def run_gemm(cfg, m, k, n, *, seed=1, folder, timeout=300, log=print):
    """:func:`gemm_image` run on the SoC and on the software device: ``(soc_run,
    reference)``, the latter the software device's
    :class:`~bertaccel.sw.devices.base.RunResult`."""
    from ..sw import SoftwareDevice

    image, inputs = gemm_image(cfg, m, k, n, seed=seed)
    soc = run_image(image, folder=folder, timeout=timeout, log=log)
    return soc, SoftwareDevice(cfg).run(image.program, **inputs)
