"""End to end: GEMMs fused with an epilogue, compiled by the real driver, run on the RTL.

Every result is compared bit for bit with the software device (and that with golden.intops
applied to golden.gemm). Each config runs free and with about 30 % idle source cycles and 40 %
output backpressure. The devices come from the session-scoped ``rtl_device`` fixture, so they are
shared with other tests of the same config and settings. Seeds are printed; rerun one test with
``pytest verif/system/test_epilogue_rtl.py -k <id> -s`` to replay it.

``test_attention_of_long_rows`` runs attention in the 12-bit format: Q K^T fused with SOFTMAX
over rows of 256 keys on the 2x2 array (the longest row its accumulator holds) and of 512 on
8x8, then P V with the probabilities' two digit planes, free-running and stalled.

``test_batched_gemm`` runs batches of three GEMMs compiled as one (attention's heads), each op,
free-running and stalled: every member bit for bit with golden on its own operands.

``test_tail_epilogue`` runs two epilogues of one op on one GEMM (a ``Tail``: the last columns
with their own registers, their strips stored again), free-running and stalled.

``test_fusion_ratios`` records, on 8x8, the cycles of the fused programs of the three acceptance
shapes against the plain GEMM of the same shape, prints the ratios and checks each is at most
1.05.
"""

import dataclasses
import random

import pytest
import torch

from bertaccel import golden
from bertaccel.golden.intops import PROB_SCALE, prob_digits
from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice, compile_gemm
from bertaccel.sw import epilogue as ep_mod
from verif.helpers import check_model_cycles

__all__ = []

CONFIGS = ["2x2", "4x8", "8x8"]
OPS = ["requant", "gelu", "softmax", "layernorm"]
# (src_idle, sink_stall) out of 256: free-running, and about 30% idle / 40% backpressure.
STALLS = {"free": (0, 0), "stalled": (77, 102)}


@pytest.fixture(scope="module", params=CONFIGS)
def devices(request, rtl_device):
    cfg = PRESETS[request.param]
    return cfg, {name: rtl_device(cfg, seed=1 + index, src_idle=idle, sink_stall=stall)
                 for index, (name, (idle, stall)) in enumerate(STALLS.items())}


def _case(cfg, m, k, n, op, gen, batch=1, k_high=0):
    a = torch.randint(-128, 128, (batch * m, k), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (batch * k, n), generator=gen, dtype=torch.int8)
    epilogue = ep_mod.random_epilogue(op, k=k, n=n, generator=gen)
    inputs = {"a": a, "b": b}
    if epilogue.op == isa.EpOp.LAYERNORM:
        inputs["r"] = torch.randint(-128, 128, (batch * m, n), generator=gen, dtype=torch.int8)
    return compile_gemm(cfg, m, k, n, epilogue=epilogue, batch=batch, k_high=k_high), inputs


def _golden(cfg, program, inputs):
    """Golden's result of ``program`` on ``inputs``: each member of a batch on its own rows."""
    plan, lowered = program.meta["plan"], program.meta["epilogue"]
    batch = plan.batch
    members = []
    for a, b, r in zip(inputs["a"].chunk(batch), inputs["b"].chunk(batch),
                       inputs["r"].chunk(batch) if "r" in inputs else [None] * batch):
        c = golden.gemm(a, b, k_high=plan.k_high)
        members.append(c if lowered is None else ep_mod.apply_integer(lowered, c, r,
                                                                      cols=cfg.ep_lanes))
    return torch.cat(members)


def _check(cfg, device, program, inputs):
    """RTL == software device == golden; returns the RTL result."""
    rtl = device.run(program, **inputs)
    ref = SoftwareDevice(cfg).run(program, **inputs)
    want = _golden(cfg, program, inputs)
    lowered = program.meta["epilogue"]
    (m, k), n = program.inputs["a"], program.inputs["b"][1]
    what = (f"{lowered.op.name if lowered else 'RAW'} {m}x{k}x{n} on {cfg.name}, plan "
            f"{program.meta['plan']}")
    assert torch.equal(ref.outputs["c"], want), f"software device != golden for {what}"
    got = rtl.outputs["c"]
    if not torch.equal(got, ref.outputs["c"]):
        bad = (got != ref.outputs["c"]).nonzero()
        first = tuple(bad[0].tolist())
        raise AssertionError(f"RTL != software device for {what}: {len(bad)} of {got.numel()} "
                             f"values differ, the first at {first}: RTL {int(got[first])}, "
                             f"software {int(ref.outputs['c'][first])}")
    check_model_cycles(device, program, rtl, what=what)
    return rtl


def _shapes(cfg, rng):
    r, c = cfg.rows, cfg.cols
    return [(1, 1, 1), (2 * r + c + 3, 3 * r - 1, 2 * c + 1), (37, 2 * r, 5 * c - 3)] + \
        [(rng.randint(1, 6 * r), rng.randint(1, 6 * r), rng.randint(1, 6 * c))
         for _ in range(2)]


def test_epilogue_traffic_keeps_raw_results(devices):
    """SETs and PMEM LOADs (and residual LOADs) flow through the core; with the STOREs made RAW
    again the results are the GEMM's. This holds whatever the epilogue datapath does."""
    cfg, devs = devices
    gen = torch.Generator().manual_seed(77)
    for stall, device in devs.items():
        for op in ("requant", "layernorm"):
            program, inputs = _case(cfg, 2 * cfg.rows + 5, 3 * cfg.rows, 3 * cfg.cols - 1, op,
                                    gen)
            program.instrs = [dataclasses.replace(i, op=isa.EpOp.RAW)
                              if isinstance(i, isa.Store) else i for i in program.instrs]
            program.meta["epilogue"] = None
            _check(cfg, device, program, inputs)


@pytest.mark.parametrize("stall", list(STALLS))
@pytest.mark.parametrize("op", OPS)
def test_fused_gemm(devices, op, stall):
    cfg, devs = devices
    seed = 300 + 10 * CONFIGS.index(cfg.name) + OPS.index(op) + (5 if stall == "stalled" else 0)
    print(f"seed {seed}")
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    shapes = _shapes(cfg, rng)
    if stall == "stalled":
        shapes = shapes[1:4]
    for m, k, n in shapes:
        program, inputs = _case(cfg, m, k, n, op, gen)
        _check(cfg, devs[stall], program, inputs)


@pytest.mark.parametrize("stall", list(STALLS))
def test_batched_gemm(devices, stall):
    """Three GEMMs of one shape as one program, each op (REQUANT with high rows, as attention's
    P V): the members overlap and each equals golden on its own rows."""
    cfg, devs = devices
    seed = 400 + 10 * CONFIGS.index(cfg.name) + (5 if stall == "stalled" else 0)
    print(f"seed {seed}")
    gen = torch.Generator().manual_seed(seed)
    r, c = cfg.rows, cfg.cols
    for op in OPS:
        m, k, n = 2 * r + 3, 2 * r + 1, 2 * c + 1
        program, inputs = _case(cfg, m, k, n, op, gen, batch=3,
                                k_high=r + 1 if op == "requant" else 0)
        assert program.meta["plan"].batch == 3
        _check(cfg, devs[stall], program, inputs)


@pytest.mark.parametrize("stall", list(STALLS))
def test_tail_epilogue(devices, stall):
    """A Tail (BERT's GELU with its outlier columns at their own output scale; a REQUANT with
    its last columns at another scale): the strips that hold the tail are stored a second time
    after the tail's SETs, on tiles of several N blocks so that SETs restore the head's."""
    cfg, devs = devices
    seed = 500 + 10 * CONFIGS.index(cfg.name) + (5 if stall == "stalled" else 0)
    print(f"seed {seed}")
    gen = torch.Generator().manual_seed(seed)
    r, c = cfg.rows, cfg.cols
    for op, (m, k, n, columns) in (("gelu", (2 * r + 3, 3 * r, 5 * c + 3, c // 2 + 1)),
                                   ("requant", (r + 1, 2 * r + 1, 3 * c, c + 1))):
        head = ep_mod.random_epilogue(op, k=k, n=n - columns, generator=gen)
        tail = ep_mod.random_epilogue(op, k=k, n=columns, generator=gen)
        a = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8)
        b = torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8)
        program = compile_gemm(cfg, m, k, n, epilogue=ep_mod.Tail(head, tail, columns))
        assert sum(isinstance(i, isa.Store) for i in program.instrs) > program.meta[
            "plan"].n_tiles
        _check(cfg, devs[stall], program, {"a": a, "b": b})


#: ``{config: keys}`` of attention's long rows: as many as the 2x2 preset's accumulator holds
#: in one row (128 strips of 2), and 512 on 8x8.
ATTENTION_KEYS = {"2x2": 256, "8x8": 512}


@pytest.mark.parametrize("stall", list(STALLS))
@pytest.mark.parametrize("name", list(ATTENTION_KEYS))
def test_attention_of_long_rows(rtl_device, name, stall):
    """Q K^T fused with SOFTMAX over rows of 256 or 512 keys (the last tenth masked as
    padding), then P V fused with REQUANT with P as its two digit planes,
    ``[P_high | P_low] @ [V; V]`` with as many high rows: each bit for bit with the software
    device and golden."""
    cfg = PRESETS[name]
    device = rtl_device(cfg, seed=3, src_idle=STALLS[stall][0], sink_stall=STALLS[stall][1])
    seed = 700 + list(ATTENTION_KEYS).index(name)
    print(f"seed {seed}")
    gen = torch.Generator().manual_seed(seed)
    m, d, keys = cfg.rows + 3, 16, ATTENTION_KEYS[name]
    q = torch.randint(-128, 128, (m, d), generator=gen, dtype=torch.int8)
    k_t = torch.randint(-128, 128, (d, keys), generator=gen, dtype=torch.int8)
    softmax = ep_mod.random_epilogue("softmax", k=d, n=keys, generator=gen)
    probs = _check(cfg, device, compile_gemm(cfg, m, d, keys, epilogue=softmax),
                   {"a": q, "b": k_t}).outputs["c"]
    assert int(probs.max()) <= PROB_SCALE and not probs[:, softmax.mask].any()
    assert ((probs.sum(dim=1) - PROB_SCALE).abs() <= 0.1 * keys).all()
    high, low = prob_digits(probs)
    v = torch.randint(-128, 128, (keys, d), generator=gen, dtype=torch.int8)
    pv = compile_gemm(cfg, m, 2 * keys, d, k_high=keys,
                      epilogue=ep_mod.Requant(scale=10 / PROB_SCALE))
    _check(cfg, device, pv, {"a": torch.cat([high, low], dim=1), "b": torch.cat([v, v])})


def test_fusion_ratios(rtl_device):
    """Cycles of GEMM+softmax (128x64x128) and GEMM+LayerNorm, GEMM+GELU (128x256x256) against
    the plain GEMM of the same shape, free-running on 8x8."""
    cfg = PRESETS["8x8"]
    device = rtl_device(cfg, seed=1)
    gen = torch.Generator().manual_seed(2024)
    lines = []
    for op, (m, k, n) in (("softmax", (128, 64, 128)), ("layernorm", (128, 256, 256)),
                          ("gelu", (128, 256, 256))):
        program, inputs = _case(cfg, m, k, n, op, gen)
        fused = _check(cfg, device, program, inputs)
        plain = _check(cfg, device, compile_gemm(cfg, m, k, n),
                       {"a": inputs["a"], "b": inputs["b"]})
        ratio = fused.cycles / plain.cycles
        plan = program.meta["plan"]
        lines.append(f"GEMM+{op} {m}x{k}x{n}: fused {fused.cycles} cycles (estimate "
                     f"{plan.est_cycles}), plain {plain.cycles}, ratio {ratio:.3f}; tiles of "
                     f"{plan.mb} rows (last {plan.ends or 'same'}), kb {plan.kb}, nb {plan.nb}")
        assert fused.cycles <= 1.05 * plain.cycles, lines[-1]
    print("\n".join(lines))
