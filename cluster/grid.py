"""The points of a design-space sweep: accelerator configs crossed with BERT workloads.

::

    configs, invalid = config_grid(["4x4", "8x8"], {"acc_depth": [1024, 2048]})
    workloads = workload_grid(["minilm"], seqs=[32, 128], batches=[1])

Configs are the presets named, each with every combination of the field values given (the
field lists alone vary the default :class:`~bertaccel.hw.config.AccelConfig`). A combination
that the config refuses (``epilogue_lanes`` above ``cols``) is an invalid point, named with
the config's message; a value that no combination takes is bad input (:class:`GridError`).
"""

import dataclasses
import itertools

from ..hw.config import AccelConfig, ConfigError, PRESETS, load_config

__all__ = ["FIELDS", "GridError", "Workload", "int_list", "name_list", "config_grid",
           "workload_grid", "config_label", "config_fields"]

#: The :class:`AccelConfig` fields a sweep varies, in the order they are crossed.
FIELDS = ("rows", "cols", "spad_depth", "acc_depth", "epilogue_lanes")


#: How :func:`config_label` names a field that differs from the reference config.
_LABELS = {"spad_depth": "sp", "acc_depth": "acc", "pmem_depth": "pm", "queue_depth": "q",
           "ep_lanes": "el", "axi_data_width": "axd", "axi_addr_width": "axa",
           "clock_mhz": "@"}


class GridError(ValueError):
    """A sweep's grid cannot be made; the message names the option and the value."""


@dataclasses.dataclass(frozen=True)
class Workload:
    """What a point runs: ``model`` (``minilm``, a shape of
    :data:`bertaccel.analysis.perf.SHAPES`, or a model folder) on ``batch`` sequences of ``seq``
    tokens."""

    model: str
    seq: int
    batch: int = 1

    def to_dict(self):
        return dataclasses.asdict(self)


def name_list(option, text):
    """``"a,b"`` -> ``["a", "b"]``, refusing an empty item."""
    items = [item.strip() for item in str(text).split(",")]
    if not all(items):
        raise GridError(f"{option} must be a comma-separated list without empty items, "
                        f"not {text!r}")
    return items


def int_list(option, text, *, minimum=1):
    """``"4,8"`` -> ``[4, 8]``, refusing what is not an int of at least ``minimum``."""
    values = []
    for item in name_list(option, text):
        try:
            value = int(item)
        except ValueError:
            raise GridError(f"{option} takes integers, not {item!r}") from None
        if value < minimum:
            raise GridError(f"{option} values must be at least {minimum}, not {value}")
        values.append(value)
    return list(dict.fromkeys(values))


def config_grid(presets=(), fields=None):
    """The configs of the grid, and the combinations that make no config.

    Parameters
    ----------
    presets : list of str
        Preset names or config JSON files (as ``--config`` takes them); none: the default
        :class:`AccelConfig`.
    fields : dict, optional
        ``{field: [values]}`` for fields of :data:`FIELDS`.

    Returns
    -------
    (list of AccelConfig, list of (dict, str))
        The configs, each once, in grid order; the invalid combinations as ``({"base": ...,
        field: value, ...}, message)``.

    Raises
    ------
    GridError
        An unknown preset or field, or a field value that no combination takes.
    """
    fields = {name: list(values) for name, values in (fields or {}).items() if values}
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise GridError(f"unknown config field(s) {', '.join(unknown)}; a sweep varies "
                        f"{', '.join(FIELDS)}")
    try:
        bases = [(spec, load_config(spec)) for spec in presets] or [("default", AccelConfig())]
    except ConfigError as error:
        raise GridError(str(error)) from None
    names = [name for name in FIELDS if name in fields]
    configs, invalid, taken = {}, [], set()
    for (spec, base), values in itertools.product(bases, itertools.product(
            *(fields[name] for name in names))):
        changes = dict(zip(names, values))
        try:
            cfg = dataclasses.replace(base, **changes)
        except ConfigError as error:
            invalid.append(({"base": spec, **changes}, str(error)))
            continue
        configs.setdefault(cfg.tag, cfg)
        taken.update(changes.items())
    for name in names:
        for value in fields[name]:
            if (name, value) not in taken:
                message = next(text for point, text in invalid if point.get(name) == value)
                raise GridError(f"--{name.replace('_', '-')} {value} makes no valid config "
                                f"with the rest of the grid: {message}")
    return list(configs.values()), invalid


def workload_grid(models, seqs, batches):
    """Every ``(model, seq, batch)`` of the lists, in that order of nesting."""
    return [Workload(model, seq, batch)
            for model, seq, batch in itertools.product(models, seqs, batches)]


def config_label(cfg):
    """A short name: the preset's (``"8x8"``), or the array with what differs from the preset
    of that shape, or from the default config (``"8x16 acc2048"``, ``"16x8 sp2048 el4"``)."""
    reference = PRESETS.get(cfg.name) or AccelConfig(rows=cfg.rows, cols=cfg.cols)
    if (cfg.tag, cfg.clock_mhz) == (reference.tag, reference.clock_mhz):
        return cfg.name
    parts = [cfg.name]
    for name, short in _LABELS.items():
        value = getattr(cfg, name)
        if value != getattr(reference, name):
            parts.append(f"{short}{value:g}" if name == "clock_mhz" else f"{short}{value}")
    return " ".join(parts) if len(parts) > 1 else cfg.tag


def config_fields(cfg):
    """``{"label", "name", "tag", field: value ...}`` of ``cfg`` for a sweep's rows."""
    return {"label": config_label(cfg), "name": cfg.name, "tag": cfg.tag,
            **{name: getattr(cfg, name) for name in FIELDS}, "ep_lanes": cfg.ep_lanes,
            "clock_mhz": cfg.clock_mhz}
