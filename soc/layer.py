"""One BERT encoder layer for the SoC: its six stage programs, laid out in main RAM, with the
moves between them as tables the firmware follows.

:func:`run_layer` of :mod:`bertaccel.sw.bert` runs a layer as six programs (``qkv``, ``qk``,
``pv``, ``wo``, ``w1``, ``w2``); between them the host picks columns, splits heads, takes the
two digit planes of the probabilities and packs each next program's input stream. On the SoC
the firmware does that work: :func:`layer_image` finds, for every byte of every stage's input
stream, where it comes from, by running the host's own code (``run_layer`` with a device that
records the streams it is given and returns chosen values) on tagged inputs, and writes the
answer as runs of moves.

A byte of a stage's input stream is either a constant (a weight, a bias, padding: the same in
every tagged run) or a move from a source: a byte of the layer's int8 input, or a 32-bit word
of an earlier stage's output area, taken as its low byte (``copy``) or as one of the two
6-bit digit planes of a probability (``high``, ``low``;
:func:`bertaccel.golden.intops.prob_digits`).
Each source element is told apart by its index, written 6 bits a run into the values the
device hands back; two more runs tell the moves from the constants and ``high`` from ``low``.
The streams linked into the image hold only the constants: a move the tables missed leaves a
zero, and the layer's output, compared with the software device's bit for bit, shows it.
"""

import dataclasses
import math

import torch

from ..sw.bert import STAGES, layer_programs, run_layer
from ..sw.devices import axi as axi_host
from ..sw.devices.base import Device, RunResult
from .build import SocError

__all__ = ["MOVE_COPY", "MOVE_HIGH", "MOVE_LOW", "LayerImage", "layer_image", "moves_of"]

#: How a move takes its source element (the firmware's ``MOVE_*``).
MOVE_COPY, MOVE_HIGH, MOVE_LOW = 0, 1, 2
#: The stage whose outputs are probabilities (taken by digit plane).
_PROBS = "qk"
_DIGIT = 6
_ALIGN = 64


@dataclasses.dataclass
class LayerImage:
    """A layer laid out in the SoC's main RAM.

    Members
    -------
    cfg : AccelConfig
    base : int
        The bus address of :attr:`blob`'s first byte.
    blob : bytes
        Main RAM from :attr:`base`: the layer's input, each stage's program, input stream
        (constants only) and output area, and the move tables.
    stages : list of dict
        In :data:`~bertaccel.sw.bert.STAGES` order: ``name``, ``image`` (the stage's
        :class:`~bertaccel.sw.devices.axi.DramImage`, at its bus addresses), ``moves`` (bus
        address of its table), ``n_moves`` (runs), ``model_cycles`` (the cycle model's).
    x_addr, x_len : int
        Where the layer's int8 input lies, and its bytes.
    """
    cfg: object
    base: int
    blob: bytes
    stages: list
    x_addr: int
    x_len: int

    @property
    def last(self):
        """The last stage's image: its output area is the layer's output."""
        return self.stages[-1]["image"]

    def output(self, raw):
        """The layer's int8 output ``(B*L, hidden)`` from the bytes of the last output area."""
        return self.last.outputs(raw)["c"].to(torch.int8)


class _Tracer(Device):
    """A device that keeps each program's input stream (as laid out) and answers with the
    output words ``words(stage)`` (a ``torch.int32`` tensor, one value per output word)."""

    def __init__(self, cfg, programs, words):
        super().__init__(cfg)
        self.stage_of = {id(program): stage for stage, program in programs.items()}
        self.words = words
        self.streams = {}

    def run(self, program, **inputs):
        stage = self.stage_of[id(program)]
        image = axi_host.layout(program, align=_ALIGN, **inputs)
        self.streams[stage] = dict(image.segments).get(image.data_addr, b"")
        lanes = axi_host.out_beat_bytes(self.cfg) // 4
        beats = self.words(stage).view(-1, lanes)[:, :self.cfg.cols].contiguous()
        return RunResult(outputs=program.unpack(beats))


def _streams(bert, layer, mask, programs, x_values, word_values):
    """Every stage's input stream (bytes) for the layer input ``x_values`` and output words
    ``word_values(stage)``."""
    x = x_values.to(torch.int8).view(mask.numel(), bert.spec.hidden)
    device = _Tracer(bert.cfg, programs, word_values)
    run_layer(device, bert, layer, x, mask, programs=programs)
    return device.streams


def _n_words(cfg, program):
    return program.n_out_beats * axi_host.out_beat_bytes(cfg) // 4


def moves_of(bert, layer, mask, programs):
    """``{stage: (constants, moves)}``: the stage's input stream with every moved byte zero,
    and its moves as a ``(n, 4)`` int64 tensor of ``(dst byte, source, element, how)`` rows;
    source 0 is the layer's input, source ``1 + i`` the output area of stage ``STAGES[i]``."""
    cfg = bert.cfg
    sizes = [mask.numel() * bert.spec.hidden] + [_n_words(cfg, programs[s]) for s in STAGES]
    offsets = [0]
    for size in sizes:
        offsets.append(offsets[-1] + size)
    passes = max(1, math.ceil(math.log2(max(offsets[-1], 2)) / _DIGIT))

    def run(value_of, probs_of):
        def words(stage):
            i = 1 + STAGES.index(stage)
            ids = torch.arange(offsets[i], offsets[i + 1])
            return (probs_of if stage == _PROBS else value_of)(ids).to(torch.int32)
        return _streams(bert, layer, mask, programs, value_of(torch.arange(sizes[0])), words)

    zero = run(torch.zeros_like, torch.zeros_like)
    ones = run(torch.ones_like, lambda ids: torch.full_like(ids, 1 << _DIGIT))
    lows = run(torch.ones_like, torch.ones_like)
    digits = []
    for p in range(passes):
        def digit(ids, p=p):
            return (ids >> (_DIGIT * p)) & ((1 << _DIGIT) - 1)
        digits.append(run(digit, lambda ids, d=digit: d(ids) * ((1 << _DIGIT) + 1)))
    result = {}
    for stage in STAGES:
        planes = [torch.frombuffer(bytearray(r[stage]), dtype=torch.uint8).to(torch.int64)
                  for r in (zero, ones, lows, *digits)]
        z, one, low, *ds = planes
        moved = (one != z) | (low != z)
        fixed = ~moved
        for d in ds:
            if not torch.equal(d[fixed], z[fixed]):
                raise SocError(f"stage {stage}: a byte of the input stream is neither a "
                               f"constant nor a move")
        ids = sum(d << (_DIGIT * p) for p, d in enumerate(ds))[moved]
        source = torch.bucketize(ids, torch.tensor(offsets[1:]), right=True)
        element = ids - torch.tensor(offsets)[source]
        probs = source == 1 + STAGES.index(_PROBS)
        how = torch.where(probs, torch.where(one[moved] == 1, MOVE_HIGH, MOVE_LOW), MOVE_COPY)
        dst = torch.nonzero(moved).view(-1)
        constants = torch.where(moved, 0, z).to(torch.uint8).numpy().tobytes()
        result[stage] = (constants, torch.stack([dst, source, element, how], dim=1))
    return result


def _runs(moves):
    """Rows ``(dst, source, element, how)`` joined into runs: ``(dst, source, element, how,
    count)``, each a run of consecutive bytes from consecutive elements of one source."""
    runs = []
    for dst, source, element, how in moves.tolist():
        if runs:
            last = runs[-1]
            if (last[1], last[3]) == (source, how) and dst == last[0] + last[4] \
                    and element == last[2] + last[4]:
                last[4] += 1
                continue
        runs.append([dst, source, element, how, 1])
    return runs


def _table(runs):
    """A move table as it lies in memory: per run, three little-endian words: the byte offset
    in the stream, the source element, and ``count | how << 24 | source << 28``."""
    words = []
    for dst, source, element, how, count in runs:
        if count >= 1 << 24 or source >= 16:
            raise ValueError(f"a move run of {count} bytes from source {source} does not fit")
        words += [dst, element, count | how << 24 | source << 28]
    return b"".join(word.to_bytes(4, "little") for word in words)


def layer_image(bert, layer, x, mask, *, base):
    """Lay out encoder layer ``layer`` of ``bert`` (a compiled
    :class:`~bertaccel.sw.bert.BertProgram`) on the int8 input ``x`` ``(B*L, hidden)`` with the
    valid-token ``mask`` ``(B, L)`` in main RAM from bus address ``base``: a
    :class:`LayerImage`."""
    from ..sw.cycles import CycleModel

    cfg = bert.cfg
    programs = layer_programs(bert, layer, mask)
    found = moves_of(bert, layer, mask, programs)
    blob = bytearray()

    def place(data):
        blob.extend(bytes(-len(blob) % _ALIGN))
        addr = base + len(blob)
        blob.extend(data)
        return addr

    x_bytes = x.to(torch.int8).contiguous().numpy().view("uint8").tobytes()
    x_addr = place(x_bytes)
    stages = []
    for stage in STAGES:
        constants, moves = found[stage]
        program = programs[stage]
        cursor = base + len(blob) + (-len(blob) % _ALIGN)
        image = _laid_out(program, cursor, constants)
        for addr, data in image.segments:
            blob.extend(bytes(addr - base - len(blob)))
            blob.extend(data)
        blob.extend(bytes(image.out_addr + image.out_size - base - len(blob)))
        stages.append({"name": stage, "image": image, "runs": _runs(moves),
                       "model_cycles": CycleModel(cfg).run(program).cycles})
    for entry in stages:
        entry["moves"] = place(_table(entry["runs"]))
        entry["n_moves"] = len(entry["runs"])
    return LayerImage(cfg=cfg, base=base, blob=bytes(blob), stages=stages, x_addr=x_addr,
                      x_len=len(x_bytes))


def _laid_out(program, base, stream):
    """``program``'s :class:`~bertaccel.sw.devices.axi.DramImage` from bus address ``base``,
    with the input stream ``stream`` (bytes) as it is."""
    cfg = program.cfg
    prog = axi_host.instr_bytes(program)
    beats = len(stream) // axi_host.beat_bytes(cfg)
    prog_addr = base
    data_addr = prog_addr + -(-len(prog) // _ALIGN) * _ALIGN
    out_addr = data_addr + -(-len(stream) // _ALIGN) * _ALIGN
    segments = [(prog_addr, prog)] + ([(data_addr, stream)] if stream else [])
    return axi_host.DramImage(program=program, prog_addr=prog_addr, prog_len=len(program.instrs),
                              data_addr=data_addr, data_len=beats, out_addr=out_addr,
                              out_len=program.n_out_beats, segments=segments)
