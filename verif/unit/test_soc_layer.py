"""The layer image of the SoC's second firmware (:mod:`bertaccel.soc.layer`), without a
simulator: following the move tables as the firmware does (``soc/firmware/layer.c``), from the
layer's input and the software device's output areas, must give every stage's input stream
exactly as the host packs it; ``layer.h`` names every stage's regions where the image has them.
The firmware itself runs in ``verif/system/test_soc.py``.
"""

import torch

from bertaccel.hw.config import preset
from bertaccel.soc.firmware import layer_header
from bertaccel.soc.layer import MOVE_HIGH, MOVE_LOW, layer_image
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.bert import STAGES, run_layer
from bertaccel.sw.devices import axi as axi_host
from verif.helpers import random_bert

__all__ = []


class _Recorder(SoftwareDevice):
    """The software device, keeping each run's input stream and output words."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.streams, self.words = [], []

    def run(self, program, **inputs):
        result = super().run(program, **inputs)
        image = axi_host.layout(program, align=64, **inputs)
        self.streams.append(dict(image.segments).get(image.data_addr, b""))
        flat = torch.cat([result.outputs[name].reshape(-1) for name in program.outputs])
        beats = torch.cat([flat, torch.zeros(1, dtype=flat.dtype)])[program.unpack_index]
        lanes = axi_host.out_beat_bytes(self.cfg) // 4
        words = torch.zeros(beats.shape[0], lanes, dtype=torch.int64)
        words[:, :self.cfg.cols] = beats
        self.words.append(words.reshape(-1))
        return result


def _follow(constants, runs, x, words):
    stream = bytearray(constants)
    for dst, source, element, how, count in runs:
        for i in range(count):
            if source == 0:
                value = int(x[element + i])
            else:
                value = int(words[source - 1][element + i])
                value = value >> 6 if how == MOVE_HIGH else value & 63 if how == MOVE_LOW \
                    else value
            stream[dst + i] = value & 0xFF
    return bytes(stream)


def test_moves_rebuild_every_stream():
    cfg = preset("2x2")
    bert, batch = random_bert(cfg, seed=5, layers=1, lengths=(7, 4))
    mask = batch["attention_mask"].bool()
    x = bert.embed_input(batch["input_ids"], batch["token_type_ids"])
    layer = layer_image(bert, 0, x, mask, base=0x4000_2000)
    device = _Recorder(cfg)
    run_layer(device, bert, 0, x, mask)
    x_bytes = x.to(torch.int8).reshape(-1)
    blob = layer.blob
    for i, stage in enumerate(layer.stages):
        image = stage["image"]
        start = image.data_addr - layer.base
        constants = blob[start:start + image.data_len * axi_host.beat_bytes(cfg)]
        got = _follow(constants, stage["runs"], x_bytes, device.words)
        assert got == device.streams[i], f"stage {STAGES[i]}: the moves miss bytes"
        assert any(run[1] != 0 for run in stage["runs"]) or i == 0
    text = layer_header(layer)
    assert f"#define LAYER_STAGES {len(STAGES)}" in text
    for stage in layer.stages:
        image = stage["image"]
        assert (f'{{"{stage["name"]}", {image.prog_addr:#x}u, {image.data_addr:#x}u, '
                f'{image.out_addr:#x}u, {stage["moves"]:#x}u,') in text
        assert image.out_addr + image.out_size <= layer.base + len(layer.blob)
