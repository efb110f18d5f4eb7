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
from .firmware import FIRMWARE_RESERVE, checksum, compile_firmware, parse_report

__all__ = ["SocRun", "SocLayerRun", "run_program", "run_image", "gemm_image", "run_gemm",
           "run_layer_image", "run_bert_layer"]


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


@dataclass
class SocLayerRun:
    """What :func:`run_layer_image` returns.

    Members
    -------
    output : torch.Tensor
        The layer's int8 output ``(B*L, hidden)``, from the last output area the firmware
        printed.
    cycles : dict of str to int
        ``CYCLES`` of each stage as the firmware read it.
    model_cycles : dict of str to int
        The cycle model's count for each stage's program (the core alone).
    report : Report
    layer : LayerImage
    build_s, firmware_s, run_s : float
    """
    output: object
    cycles: dict
    model_cycles: dict
    report: object
    layer: object
    build_s: float
    firmware_s: float
    run_s: float


def run_layer_image(layer, *, folder, optimize=False, timeout=3600, log=print):
    """Run ``layer`` (a :class:`~bertaccel.soc.layer.LayerImage`) on the SoC with the layer
    firmware: build (cached), compile, load the image into main RAM, run, and check what the
    firmware printed (the end, the checksum, every stage's counters). Raises ``ValueError``
    if the image does not fit main RAM (before any build), :class:`SocError` if a step
    fails. ``optimize``: build the model with ``-O2`` (:func:`~bertaccel.soc.build.build_soc`).
    """
    from .firmware import compile_layer_firmware
    from .system import MAIN_RAM_ORIGIN, MAIN_RAM_SIZE

    main_ram = bytes(layer.base - MAIN_RAM_ORIGIN) + layer.blob
    if len(main_ram) > MAIN_RAM_SIZE:    # before the build
        raise ValueError(f"the layer's image ends {len(main_ram):,} bytes into the SoC's "
                         f"{MAIN_RAM_SIZE:,}-byte main RAM; use fewer tokens")
    build = build_soc(layer.cfg, Path(folder), optimize=optimize, log=log)
    start = time.monotonic()
    firmware = compile_layer_firmware(build, layer, build.folder / "firmware-layer")
    compiled = time.monotonic()
    report = parse_report(run_soc(build, firmware, main_ram=main_ram, timeout=timeout))
    ran = time.monotonic()
    facts = report.facts
    if not report.ok:
        shown = ", ".join(f"{name} {value:#x}" for name, value in facts.items())
        raise SocError(f"the layer firmware reported {report.error or 'no end'}"
                       + (f" ({shown})" if shown else ""))
    last = layer.last
    if len(report.output) != last.out_size or checksum(report.output) != facts["checksum"]:
        raise SocError(f"the layer firmware printed {len(report.output)} output bytes with "
                       f"checksum {checksum(report.output):#010x}; it says {last.out_size} "
                       f"and {facts['checksum']:#010x}")
    for stage in layer.stages:
        name, image = stage["name"], stage["image"]
        counts = tuple(facts[f"{what}_count_{name}"] for what in ("out", "data", "prog"))
        if counts != (image.out_len, image.data_len, image.prog_len):
            raise SocError(f"stage {name}: the shell counted {counts} output beats, input "
                           f"beats and instructions; the program has "
                           f"{(image.out_len, image.data_len, image.prog_len)}")
    return SocLayerRun(output=layer.output(report.output),
                       cycles={s["name"]: facts[f"cycles_{s['name']}"] for s in layer.stages},
                       model_cycles={s["name"]: s["model_cycles"] for s in layer.stages},
                       report=report, layer=layer, build_s=build.seconds,
                       firmware_s=compiled - start, run_s=ran - compiled)


def run_bert_layer(bert, layer, batch, *, folder, optimize=False, timeout=3600, log=print):
    """Encoder layer ``layer`` of ``bert`` (a compiled
    :class:`~bertaccel.sw.bert.BertProgram`) for the tokenised ``batch`` (``input_ids``,
    ``attention_mask``, ``token_type_ids``) on the SoC and on the software device; the layer's
    input is the software device's output of the layers before it. Returns ``(soc_run,
    reference)``, the latter the software device's int8 output of the layer."""
    from ..sw import SoftwareDevice
    from ..sw.bert import run_layer
    from .layer import layer_image
    from .system import MAIN_RAM_ORIGIN

    mask = batch["attention_mask"].bool()
    x = bert.embed_input(batch["input_ids"], batch.get("token_type_ids"))
    software = SoftwareDevice(bert.cfg)
    for earlier in range(layer):
        x = run_layer(software, bert, earlier, x, mask)
    reference = run_layer(software, bert, layer, x, mask)
    image = layer_image(bert, layer, x, mask, base=MAIN_RAM_ORIGIN + FIRMWARE_RESERVE)
    return (run_layer_image(image, folder=folder, optimize=optimize, timeout=timeout, log=log),
            reference)
