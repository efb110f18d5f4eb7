"""Block tests of the epilogue's stage components, one part at a time, in the Amaranth simulator.

Each part of :mod:`bertaccel.hw.epilogue` is driven alone, with random and edge inputs and random
idle cycles (whose payloads are random bits that must change nothing), and its outputs are
checked against what :mod:`bertaccel.golden.intops` defines for its share of the work, in the
cycle that :class:`~bertaccel.hw.epilogue.Schedule` gives:

* the intake: its queue's room, which beats it takes (credits, the statistics gap after a row's
  last first pass, one beat per ``ratio`` cycles), and the sub-beats and tags it puts into
  stage IN;
* the front: REQUANT's result against ``intops.requant``; GELU's z and phi, SOFTMAX's t and
  ceil(t / 4096), LAYERNORM's v, v * v, gamma and beta, against ``intops.rshift_round`` and the
  clamps;
* the row statistics: SOFTMAX's running maximum and its growth, LAYERNORM's sums, against the
  row maxima and sums computed in torch;
* the exponentials: e and the rescaled row sum;
* the finalize pipeline: k and ``RECIP_TABLE[mant - 8192]``, j and ``RSQRT_TABLE[m - 256]``,
  N * rsq and S1 * rsq, into the right slot in the cycle the schedule gives;
* the back: whole rows of ``intops.softmax``, ``intops.layernorm`` and ``intops.gelu`` results,
  from the intermediate values and the slot statistics;
* the outlet: output rows in order under random backpressure, its credits and busy flag;
* the RECIP and EXP2 tables, portable and as an ECP5's side-by-side block RAMs.

The references of the intermediate values (:func:`softmax_row`, :func:`layernorm_row`,
:func:`gelu_parts`) restate golden's steps, and every row they make is checked against the golden
function itself, so they cannot drift from golden. The seed is logged;
``BERTACCEL_SEED=<n> pytest verif/block/test_epilogue_stages.py`` replays a run.
"""

import logging
import math
import os
import random

import pytest
import torch
from amaranth import Elaboratable, Module, Signal, Value
from amaranth.lib import data
from amaranth.sim import Simulator
from bertaccel.golden import intops
from bertaccel.hw.config import PRESETS
from bertaccel.hw.dsp import ECP5
from bertaccel.hw.epilogue import Schedule
from bertaccel.hw.epilogue.back import Back
from bertaccel.hw.epilogue.exponent import Exponent
from bertaccel.hw.epilogue.finalize import Finalize, recip_table
from bertaccel.hw.epilogue.front import Front
from bertaccel.hw.epilogue.intake import Intake
from bertaccel.hw.epilogue.outlet import Outlet
from bertaccel.hw.epilogue.stats import RowStats
from bertaccel.hw.isa import TWO_PASS, EpOp
from bertaccel.hw.memory import rom

from verif.helpers import pass_order
from verif.tb.models import IntakeModel

__all__ = []

log = logging.getLogger("tb.epilogue_stages")

#: Two lanes and one sub-beat a beat; four lanes and two sub-beats a beat.
CONFIGS = ["2x2", "8x8"]
SEED = int(os.environ.get("BERTACCEL_SEED", "1"))
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
T_PAD = -(1 << 23)          # SOFTMAX's t in a pad lane
ONE = 1 << intops.SOFTMAX_FRAC      # SOFTMAX's t of 1 (log2 units)


def make_rng(test, preset):
    """The random generator of ``test`` on ``preset``, from the logged seed."""
    log.info("%s on %s: seed %d", test, preset, SEED)
    return random.Random(f"{SEED}/{test}/{preset}")


def sat(v, bits):
    """golden's saturation of ``v`` to ``bits`` signed bits."""
    return v.clamp(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def i64(values):
    """``values`` as an int64 tensor."""
    return torch.tensor(values, dtype=torch.int64)


def as_signed(value, bits):
    """The ``bits``-bit two's complement number ``value``."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


# -- golden's steps, each checked against golden's function ------------------------------------

def gelu_parts(x, *, gmul, gshift, omul, oshift):
    """golden's z and phi of ``x = acc + bias``."""
    t = intops.rshift_round(x * gmul, gshift)
    phi = i64(intops.PHI_TABLE)[t.clamp(-256, 255) + 256]
    phi = torch.where(t >= 256, 1 << 16, torch.where(t < -256, 0, phi))
    return sat(intops.rshift_round(x * omul, oshift), 24), phi


def check_gelu_parts(z, phi, acc, bias, **scales):
    """z and phi combined as golden combines them are ``intops.gelu``'s results."""
    want = intops.gelu(acc.view(1, -1), bias=bias, **scales)[0]
    assert torch.equal(sat(intops.rshift_round(z * phi, 24), 8), want.long())


def softmax_row(t, row_len, lanes):
    """golden's SOFTMAX of one row of logits ``t``, sub-beat by sub-beat: the running maximum
    and its growth, e (first and second pass), the sum, k and R."""
    valid = torch.arange(len(t)) < row_len
    t = torch.where(valid, t, T_PAD)
    table = i64(intops.EXP2_TABLE)

    def exp2(lo, m):
        u = (m << intops.SOFTMAX_FRAC) - t[lo:lo + lanes]
        q, f = u >> intops.SOFTMAX_FRAC, u & (ONE - 1)
        e = intops.rshift_round(table[f] << intops.EXP2_GUARD, q.clamp(max=40))
        e = torch.where(q < intops.EXP2_CUTOFF, e, 0)
        return torch.where(valid[lo:lo + lanes], e, 0)

    out = {"t": t, "m_run": [], "dm": [], "e_first": []}
    m, total = -(1 << 15), 0
    for lo in range(0, len(t), lanes):
        new = max(m, int((t[lo:lo + lanes].max() + ONE - 1) >> intops.SOFTMAX_FRAC))
        e = exp2(lo, new)
        total = (total >> min(new - m, 63)) + int(e.sum())
        out["m_run"].append(new)
        out["dm"].append(new - m)
        out["e_first"].append(e)
        m = new
    k = total.bit_length() - 1
    out.update(m=m, total=total, k=k, r=recip(total),
               e_second=[exp2(lo, m) for lo in range(0, len(t), lanes)])
    y = torch.cat([intops.rshift_round(e * out["r"], intops.RECIP_SHIFT + k)
                   .clamp(0, intops.PROB_SCALE) for e in out["e_second"]])
    want = intops.softmax(t.view(1, -1), mul=1, shift=0, cols=lanes, row_len=row_len)[0]
    assert torch.equal(torch.where(valid, y, 0), want.long())
    out["y"] = want
    return out


def recip(total):
    """golden's RECIP_TABLE entry of a SOFTMAX row sum ``total`` (at least 2**20)."""
    k = total.bit_length() - 1
    return intops.RECIP_TABLE[(total >> (k - intops.RECIP_BITS)) - (1 << intops.RECIP_BITS)]


def layernorm_row(v, row_len, eps, *, gamma, beta, gshift):
    """golden's LAYERNORM of one row of ``v``: S1, S2, D, j, rsq, and the results."""
    valid = torch.arange(len(v)) < row_len
    v = torch.where(valid, v, 0)
    s1, s2 = int(v.sum()), int((v * v).sum())
    d = row_len * s2 - s1 * s1 + eps
    j = (d.bit_length() - 9) // 2 if d > 0 else 0
    rsq = intops.RSQRT_TABLE[(d >> 2 * j if j >= 0 else d << -2 * j) - 256] if d > 0 else 0
    z = intops.rshift_round((row_len * v - s1) * rsq, 11 + j)
    y = sat(intops.rshift_round(z * gamma + (beta << (gshift - 8)), gshift), 8)
    want = intops.layernorm(v.view(1, -1), xmul=1, vshift=0, gamma=gamma, beta=beta,
                            gshift=gshift, eps_n2=eps, row_len=row_len)[0]
    assert torch.equal(torch.where(valid, y, 0), want.long())
    return {"v": v, "s1": s1, "s2": s2, "d": d, "j": j, "rsq": rsq, "y": want}


# -- the simulator -------------------------------------------------------------------------------

def simulate(dut, bench_step, cycles):
    """Run ``dut`` for ``cycles``; each cycle ``bench_step(ctx, t)`` sets the inputs and reads
    the outputs (after the inputs settle, before the clock edge) and returns a record."""
    trace = []

    async def bench(ctx):
        for t in range(cycles):
            trace.append(bench_step(ctx, t))
            await ctx.tick()
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return trace


def put(ctx, port, value):
    """``port`` takes ``value``: a mapping or list for a layout, or raw bits."""
    if isinstance(port, data.View) and isinstance(value, int):
        port = Value.cast(port)
    ctx.set(port, value)


def bits_of(port):
    """Width of ``port``."""
    return Value.cast(port).shape().width


def place(groups, rng, *, idle, gap=0):
    """The cycle each item enters: in order, at most one a cycle, random idle cycles between,
    and ``gap`` more between groups. Returns the cycles (flat) and the first free cycle."""
    t, at = 2, []
    for group in groups:
        for _ in group:
            while rng.random() < idle:
                t += 1
            at.append(t)
            t += 1
        t += gap
    return at, t


def place_passes(items, rng, sch, *, idle):
    """The cycle each item enters, as :func:`place`, with a row's second pass no earlier than
    the intake lets it in: ``gap - (ratio - 1)`` cycles after the last first-pass sub-beat of
    its slot (a beat's last sub-beat enters ``ratio - 1`` cycles after its first)."""
    t, at, earliest = 2, [], {}
    for item in items:
        ctl = item["in"]["ctl"]
        while rng.random() < idle:
            t += 1
        if ctl["second"]:
            t = max(t, earliest.get(ctl["slot"], 0))
        elif ctl["last"] and item["op"] in sch.gap:
            earliest[ctl["slot"]] = t + sch.gap[item["op"]] - (sch.ratio - 1)
        at.append(t)
        t += 1
    return at, t


def same(const, value):
    """The layout constant ``const`` holds ``value`` (a mapping or list)."""
    return const.as_bits() == const.shape().const(value).as_bits()


def run_lanes(dut, src, dst, items, at, end, latency, rng, *, extra=None, watch=None):
    """Feed ``items`` (each ``{"in": payload}``) into the stream ``src`` at cycles ``at``
    (random bits between, with valid low), and return the records of stream ``dst``
    ``latency`` cycles after each, and the whole trace. Each cycle ``extra(t, item)`` gives
    more inputs, ``[(port, value)]``, and ``watch(ctx)`` more outputs to record."""
    entering = dict(zip(at, items))
    width = bits_of(src.payload)

    def step(ctx, t):
        item = entering.get(t)
        put(ctx, src.valid, int(item is not None))
        put(ctx, src.payload, item["in"] if item else rng.getrandbits(width))
        for port, value in (extra(t, item) if extra else []):
            put(ctx, port, value)
        return {"valid": ctx.get(dst.valid), "out": ctx.get(dst.payload),
                **(watch(ctx) if watch else {})}

    trace = simulate(dut, step, end + latency + 1)
    assert [t for t, r in enumerate(trace) if r["valid"]] == [t + latency for t in at], \
        "outputs are not exactly the schedule's latency after their inputs"
    for t, item in zip(at, items):
        assert same(trace[t + latency]["out"].ctl, item["in"]["ctl"]), \
            f"cycle {t}: the tags changed on their way"
    return [trace[t + latency] for t in at], trace


def sums_of(port):
    """A ``watch`` of the statistics stream ``port``: its payload while valid, else None."""
    return lambda ctx: {"sums": ctx.get(port.payload) if ctx.get(port.valid) else None}


# -- STOREs: rows in the documented pass order --------------------------------------------------

def store_subs(rng, cfg, op, n=None):
    """A STORE's sub-beats in order: ``(n, row_len, subs)``, each sub-beat a dict of its row,
    second, column slice and tags (slots taken in turn, as the intake assigns them); rows of
    ``n`` columns (a multiple of ``cols``; default 1 to 3 beats)."""
    sch, lanes = Schedule.of(cfg), cfg.ep_lanes
    rows, n = rng.randint(1, 4), rng.randint(1, 3) * cfg.cols if n is None else n
    two_pass = op in TWO_PASS
    row_len = rng.randint(n - cfg.cols + 1, n) if two_pass else n
    subs = []
    for row, second in pass_order(rows, two_pass):
        for j in range(n // lanes):
            lo = j * lanes
            ctl = {"op": op, "second": int(second), "last": int(lo + lanes == n),
                   "lane_valid": sum(1 << i for i in range(lanes) if lo + i < row_len),
                   "slot": row % 2}
            if sch.ratio > 1:
                ctl["sub"] = j % sch.ratio
            subs.append({"row": row, "second": second, "j": j, "cols": slice(lo, lo + lanes),
                         "ctl": ctl})
    return n, row_len, subs


#: How much M rises from one sub-beat to the next in a "climbing" row (:func:`logits`): in a
#: row of three sub-beats, taken from anywhere in the list, the sum loop's A drops every
#: multiple of 8 from 0 to 32 bits (7 then 25 drops 32), and 32 and 40 empty it.
CLIMB = [7, 25, 9, 31, 17, 30, 3, 0, 32, 40, 12, 24]


def logits(rng, n, lanes, kind=None):
    """A row of SOFTMAX logits t (int24): a spread, a plateau, one far above the rest, a row
    whose maximum M rises by one each sub-beat, one whose M rises by 0 to 40 each sub-beat
    (every shift of the sum loop, hw/epilogue/exponent.py), or a masked row (t at its floor
    but perhaps one); ``kind`` names one, else it is drawn."""
    kind = kind or rng.choice(["spread", "equal", "outlier", "edges", "rising", "climbing",
                               "masked"])
    if kind == "equal":
        return i64([rng.randint(-(1 << 23), (1 << 23) - 1)] * n)
    if kind in ("rising", "climbing"):
        subs = -(-n // lanes)
        start = rng.randrange(len(CLIMB))
        steps = [1] * subs if kind == "rising" else (CLIMB[start:] + CLIMB[:start]) * subs
        rise = torch.cumsum(i64(steps), 0).repeat_interleave(lanes)[:n]
        return rng.randint(-(1 << 22), 1 << 22) + ONE * rise
    if kind == "masked":
        t = torch.full((n,), T_PAD)
        if rng.random() < 0.5:
            t[rng.randrange(n)] = rng.randint(-(1 << 23), (1 << 23) - 1)
        return t
    t = torch.randint(-3000, 3000, (n,)) * rng.choice([1, 16, 256, ONE]) \
        + rng.randint(-10**6, 10**6)
    if kind == "outlier":
        t[rng.randrange(n)] += 10**6
    if kind == "edges":
        t[rng.randrange(n)] = (1 << 23) - 1
        t[rng.randrange(n)] = -(1 << 23)
    return sat(t, 24)


def norm_row(rng, n):
    """A row of LAYERNORM's v (int16): noise of a random scale, a constant, or an outlier."""
    kind = rng.choice(["noise", "noise", "constant", "outlier", "extremes"])
    if kind == "constant":
        return i64([rng.randint(-(1 << 15), (1 << 15) - 1)] * n)
    if kind == "extremes":
        return i64([rng.choice([-(1 << 15), (1 << 15) - 1]) for _ in range(n)])
    v = (torch.randn(n) * 10 ** rng.uniform(0, 4)).round().long() + rng.randint(-100, 100)
    if kind == "outlier":
        v[rng.randrange(n)] = rng.choice([-(1 << 15), (1 << 15) - 1])
    return sat(v, 16)


def carry_bits(rng):
    """A lane's ``carry`` of random bits."""
    return {"out": rng.randint(I32_MIN, I32_MAX)}


def value32(rng):
    """An int32: an edge, or random bits of a random width."""
    if rng.random() < 0.2:
        return rng.choice([I32_MIN, I32_MIN + 1, -1, 0, 1, I32_MAX - 1, I32_MAX])
    bits = rng.randint(1, 32)
    return rng.randint(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


# -- the front ---------------------------------------------------------------------------------

def front_params(rng):
    """Random parameters, the front's multipliers and shifts at their edges now and then."""
    edge = rng.random() < 0.3
    return {"mul0": rng.choice([0, 1, 0xFFFF]) if edge else rng.getrandbits(16),
            "shift0": rng.choice([0, 1, 62, 63]) if edge else rng.randint(0, 40),
            "mul1": rng.getrandbits(32), "shift1": rng.randint(0, 63),
            "row_len": rng.getrandbits(16), "eps": rng.getrandbits(64),
            "flags": rng.getrandbits(8)}


def front_sub(rng, sch, lanes):
    """A random sub-beat for the front, ``{"in": payload, "params": params}``, or one at an
    edge: rounding ties, GELU's t at the ends of the PHI table, SOFTMAX's x + mask past int32."""
    op = rng.choice(list(EpOp))
    prm = front_params(rng)
    acc = [value32(rng) for _ in range(lanes)]
    bias = [value32(rng) for _ in range(lanes)]
    case = rng.choice(["random", "random", "tie", "phi", "sat32"])
    if case == "tie" and op != EpOp.GELU:
        s = rng.randint(1, 20)
        prm.update(mul0=1, shift0=s, flags=prm["flags"] & ~1, mul1=rng.getrandbits(8))
        acc = [rng.choice([-1, 1]) * (2 * rng.randint(0, 1000) + 1) << (s - 1)
               for _ in range(lanes)]
        bias = [0] * lanes
    elif case == "sat32":         # SOFTMAX's x + mask past int32, shifted into int24's range
        op, sign = EpOp.SOFTMAX, rng.choice([-1, 1])
        prm.update(mul0=rng.randint(1, 0xFFFF), shift0=rng.randint(16, 40))
        acc = [sign * rng.randint(1 << 30, 1 << 31) for _ in range(lanes)]
        bias = [sign * rng.randint(1 << 30, 1 << 31) for _ in range(lanes)]
        acc, bias = [max(I32_MIN, min(I32_MAX, v)) for v in acc], \
            [max(I32_MIN, min(I32_MAX, v)) for v in bias]
    elif case == "phi":
        op = EpOp.GELU
        prm.update(mul0=1, shift0=0)
        acc, bias = [rng.choice([-258, -257, -256, -255, 254, 255, 256, 257])
                     for _ in range(lanes)], [0] * lanes
    ctl = {"op": op, "second": rng.getrandbits(1), "last": rng.getrandbits(1),
           "lane_valid": rng.getrandbits(lanes), "slot": rng.getrandbits(1)}
    if sch.ratio > 1:
        ctl["sub"] = rng.randrange(sch.ratio)
    beat = {"acc": acc, "res": [rng.randint(-128, 127) for _ in range(lanes)],
            "pm": [{"bias": b & 0xFFFFFFFF, "p1": rng.getrandbits(16), "p2": rng.getrandbits(16)}
                   for b in bias],
            "op": op, "second": ctl["second"], "last": ctl["last"],
            "lane_valid": ctl["lane_valid"]}
    return {"in": {"ctl": ctl, "lanes": beat}, "params": prm}


def front_expected(item, lanes):
    """What stage PRE holds for ``item``, lane by lane: ``{field: tensor}``; ``gelu`` says
    whether ``phi`` is the sub-beat's."""
    gelu = int(item["in"]["lanes"]["op"] == EpOp.GELU)
    return {**front_values(item, lanes), "gelu": torch.full((lanes,), gelu, dtype=torch.long)}


def front_values(item, lanes):
    """The op's values in stage PRE for ``item``, lane by lane: ``{field: tensor}``."""
    beat, prm = item["in"]["lanes"], item["params"]
    op, lane_valid = beat["op"], beat["lane_valid"]
    acc = i64(beat["acc"])
    bias = i64([as_signed(pm["bias"], 32) for pm in beat["pm"]])
    p1, p2 = i64([pm["p1"] for pm in beat["pm"]]), i64([pm["p2"] for pm in beat["pm"]])
    valid = i64([(lane_valid >> i) & 1 for i in range(lanes)]).bool()
    x = acc + bias
    if op == EpOp.RAW:
        return {"carry.out": acc}
    if op == EpOp.REQUANT:
        per_column = prm["flags"] & 1
        mul, shift = (p1, p2 & 63) if per_column else (prm["mul0"], prm["shift0"])
        return {"carry.out": intops.requant(acc.view(1, -1), bias=bias, mul=mul, shift=shift)[0]}
    if op == EpOp.GELU:
        scales = {"gmul": prm["mul0"], "gshift": prm["shift0"], "omul": prm["mul1"] & 0xFFFF,
                  "oshift": prm["shift1"]}
        z, phi = gelu_parts(x, **scales)
        check_gelu_parts(z, phi, acc, bias, **scales)
        return {"a": z, "phi": phi}
    if op == EpOp.SOFTMAX:
        t = sat(intops.rshift_round(sat(x, 32) * prm["mul0"], prm["shift0"]), 24)
        t = torch.where(valid, t, T_PAD)
        pairs = torch.stack([t[0::2] > t[1::2], torch.zeros(len(t) // 2, dtype=torch.bool)], 1)
        return {"a": t, "c": (t + ONE - 1) >> intops.SOFTMAX_FRAC, "gt": pairs.flatten().long()}
    res = i64(beat["res"])
    v = sat(intops.rshift_round(x * prm["mul0"] + res * prm["mul1"], prm["shift0"]), 16)
    v = torch.where(valid, v, 0)
    return {"a": v, "v2": v * v, "carry.coef.m": torch.where(p1 >= 1 << 15, p1 - (1 << 16), p1),
            "carry.coef.beta": torch.where(p2 >= 1 << 15, p2 - (1 << 16), p2) + 128}


def lane_fields(out, lanes, names):
    """``{name: tensor over the lanes}`` of an output stage: lane fields, and ``carry.out``,
    ``carry.coef.m``, ``carry.coef.beta`` by those names."""
    got = {}
    for name in names:
        path = name.split(".")
        values = []
        for i in range(lanes):
            value = out.lanes[i]
            for part in path:
                value = getattr(value, part)
            values.append(value)
        got[name] = i64(values)
    return got


@pytest.mark.parametrize("preset", CONFIGS)
def test_front(preset):
    """Stages ADD to PRE: every op's values against golden's, per lane, with the params of
    the cycle the sub-beat was in IN (and random params in every other cycle)."""
    cfg, rng = PRESETS[preset], make_rng("front", preset)
    sch, lanes = Schedule.of(cfg), cfg.ep_lanes
    dut = Front(cfg)
    items = [front_sub(rng, sch, lanes) for _ in range(160)]
    at, end = place([items], rng, idle=0.3)
    width = bits_of(dut.params)

    def params(t, item):
        # the intake's one-hot op of the sub-beat in IN, a copy per lane (random bits between)
        op = (1 << item["in"]["ctl"]["op"].value) if item else rng.getrandbits(len(EpOp))
        return [(dut.params, item["params"] if item else rng.getrandbits(width)),
                (dut.i_sub_op, [op] * lanes)]
    outs, _ = run_lanes(dut, dut.i_sub, dut.o_lanes, items, at, end, sch.PRE - sch.IN, rng,
                        extra=params)
    for n, (item, record) in enumerate(zip(items, outs)):
        want = front_expected(item, lanes)
        got = lane_fields(record["out"], lanes, want)
        for name in want:
            assert torch.equal(got[name], want[name].long()), \
                (n, item["in"]["ctl"]["op"], name, got[name], want[name], item)


# -- STOREs of rows through the middle of the pipeline -----------------------------------------

OPS = [EpOp.SOFTMAX, EpOp.LAYERNORM, EpOp.SOFTMAX, EpOp.LAYERNORM, EpOp.GELU, EpOp.REQUANT]


def stores(rng, cfg, count):
    """``count`` STOREs (every op of :data:`OPS` among them, then random ones), each ``(op, n,
    row_len, subs, rows)``: its sub-beats and its rows (:func:`new_row`)."""
    out = []
    for op in rng.sample(OPS, len(OPS)) + [rng.choice(OPS) for _ in range(count - len(OPS))]:
        n, row_len, subs = store_subs(rng, cfg, op)
        params = store_params(rng, row_len)
        rows = {row: new_row(rng, op, n, row_len, cfg.ep_lanes, **params)
                for row in sorted({sub["row"] for sub in subs})}
        out.append((op, n, row_len, subs, rows))
    return out


def store_params(rng, row_len):
    """The parameters a STORE's rows share: realistic ones (as verif/block/test_epilogue.py
    makes them: outputs in int8's range, z and t in their tables' range), random ones, or for
    LAYERNORM ``fine`` ones, where eps is large, z small and gshift 8, so that every unit of
    z moves the results. LAYERNORM's gamma is drawn for an output scale ``s_out`` and the
    ``gshift`` that suits it; GELU's scales for an input of ``bits`` bits."""
    kind = rng.choice(["realistic", "realistic", "random", "fine"])
    if kind == "random":
        return {"kind": kind, "gshift": rng.randint(8, 30), "s_out": None, "bits": None,
                "eps": rng.choice([0, 1, rng.getrandbits(40)])}
    if kind == "fine":      # v of spread about 100, eps of a spread of 6400: z about +-64
        return {"kind": kind, "gshift": 8, "s_out": None, "bits": rng.randint(8, 24),
                "eps": row_len ** 2 * 6400 ** 2}
    s_out = 10 ** rng.uniform(-1.5, -0.5)
    return {"kind": kind, "gshift": max(8, 12 + math.floor(math.log2(32767 * s_out / 2.0))),
            "s_out": s_out, "bits": rng.randint(8, 24),
            "eps": rng.choice([0, 1, rng.getrandbits(20)])}


def new_row(rng, op, n, row_len, lanes, *, kind, gshift, s_out, bits, eps):
    """A row of golden's values: SOFTMAX's :func:`softmax_row` of random logits, LAYERNORM's
    :func:`layernorm_row` of a random v (with gamma and beta as :func:`store_params` says),
    GELU's z, phi and results of a random x = acc + bias, REQUANT's random results. ``a`` is
    what the lanes hold after the front, ``carry`` what they carry, ``y`` the results."""
    if op == EpOp.SOFTMAX:
        row = softmax_row(logits(rng, n, lanes), row_len, lanes)
        return {**row, "a": row["t"]}
    if op == EpOp.LAYERNORM:
        v = norm_row(rng, n)
        if kind == "random":
            gamma = torch.randint(-(1 << 15), 1 << 15, (n,))
            beta = torch.randint(-(1 << 15), 1 << 15, (n,))
        elif kind == "fine":
            v = sat((torch.randn(n) * 100).round().long() + rng.randint(-1000, 1000), 16)
            gamma = torch.randint(128, 512, (n,)) * rng.choice([-1, 1])
            beta = torch.randint(-1024, 1024, (n,))
        else:
            gamma = sat((torch.randn(n) * 0.4 + 1) / s_out * 2.0 ** (gshift - 12), 16)
            beta = sat(torch.randn(n) * 0.5 / s_out * 256, 16)
            gamma, beta = gamma.round().long(), beta.round().long()
        row = layernorm_row(v, row_len, eps, gamma=gamma, beta=beta, gshift=gshift)
        return {**row, "a": row["v"], "gshift": gshift,
                "carry": [{"coef": {"m": int(g), "beta": int(b) + 128}}
                          for g, b in zip(gamma, beta)]}
    if op == EpOp.GELU:
        if bits is None:
            scales = {"gmul": rng.getrandbits(16), "gshift": rng.randint(0, 40),
                      "omul": rng.getrandbits(16), "oshift": rng.randint(0, 40)}
            x = i64([value32(rng) for _ in range(n)])
        else:       # t about +-256 (phi's table) and z about +-2**15 (int8 with 8 fractions)
            scales = {"gmul": rng.randint(1 << 15, 0xFFFF), "gshift": bits + 16 - 9,
                      "omul": rng.randint(1 << 15, 0xFFFF), "oshift": bits + 16 - 15}
            x = torch.randint(-(1 << bits), 1 << bits, (n,))
        z, phi = gelu_parts(x, **scales)
        check_gelu_parts(z, phi, x, 0, **scales)
        return {"a": z, "y": intops.gelu(x.view(1, -1), **scales)[0],
                "carry": [{"coef": {"m": int(p), "beta": rng.randint(-(1 << 16), 1 << 16)}}
                          for p in phi]}
    y = torch.randint(-128, 128, (n,))
    return {"a": torch.randint(-(1 << 23), 1 << 23, (n,)), "y": y,
            "carry": [{"out": int(v)} for v in y]}


def stats_items(rng, cfg, store_list):
    """Stage PRE of every sub-beat of ``store_list``, as the front leaves it."""
    lanes, items = cfg.ep_lanes, []
    for op, _, _, subs, rows in store_list:
        for sub in subs:
            a = rows[sub["row"]]["a"][sub["cols"]]
            a16 = (a + (1 << 15)) % (1 << 16) - (1 << 15)
            lane = [{"a": int(a[i]), "c": int((a[i] + ONE - 1) >> intops.SOFTMAX_FRAC),
                     "v2": int(a16[i] ** 2), "gt": int(i % 2 == 0 and a[i] > a[i + 1]),
                     "phi": rng.getrandbits(17), "gelu": int(op == EpOp.GELU),
                     "carry": carry_bits(rng)} for i in range(lanes)]
            items.append({"in": {"ctl": sub["ctl"], "lanes": lane}, "op": op, "sub": sub,
                          "row": rows[sub["row"]]})
    return items


@pytest.mark.parametrize("preset", CONFIGS)
def test_row_stats(preset):
    """Trees and ACC: SOFTMAX's running maximum M (and how much it grew) in every lane, the
    row's M on its second pass; LAYERNORM's sums of v and v * v for the one cycle they are
    final; the lanes' values unchanged."""
    cfg, rng = PRESETS[preset], make_rng("row_stats", preset)
    sch, lanes = Schedule.of(cfg), cfg.ep_lanes
    dut = RowStats(cfg)
    items = stats_items(rng, cfg, stores(rng, cfg, 8))
    at, end = place_passes(items, rng, sch, idle=0.3)
    watch = sums_of(dut.o_sums)
    outs, trace = run_lanes(dut, dut.i_lanes, dut.o_lanes, items, at, end, sch.ACC - sch.PRE,
                            rng, watch=lambda ctx: {**watch(ctx), "dm": ctx.get(dut.o_dm)})
    sums_at = {}
    for t, item, record in zip(at, items, outs):
        sub, row, out = item["sub"], item["row"], record["out"]
        got = lane_fields(out, lanes, ["a", "m", "carry.out", "carry.coef.m"])
        lanes_in = item["in"]["lanes"]
        assert torch.equal(got["a"], i64([lane["a"] for lane in lanes_in]))
        if item["op"] == EpOp.GELU:         # phi joins the carry, beside beta
            assert torch.equal(got["carry.coef.m"], i64([lane["phi"] for lane in lanes_in]))
            assert torch.equal(got["carry.out"] >> 18,
                               i64([lane["carry"]["out"] >> 18 for lane in lanes_in]))
        else:
            assert torch.equal(got["carry.out"],
                               i64([lane["carry"]["out"] for lane in lanes_in]))
        if item["op"] == EpOp.SOFTMAX:
            want = row["m_run"][sub["j"]] if not sub["second"] else row["m"]
            assert got["m"].tolist() == [want] * lanes, (t, sub, got["m"], want)
            if not sub["second"]:
                assert record["dm"] == row["dm"][sub["j"]], (t, sub)
        if item["op"] == EpOp.LAYERNORM and not sub["second"] and sub["ctl"]["last"]:
            sums_at[t + sch.ACC - sch.PRE] = (row["s1"], row["s2"], sub["ctl"]["slot"])
    got_sums = {t: (r["sums"].s1, r["sums"].s2, r["sums"].slot)
                for t, r in enumerate(trace) if r["sums"] is not None}
    assert got_sums == sums_at


@pytest.mark.parametrize("preset", CONFIGS)
def test_exponent(preset):
    """U to E and the sum loop: SOFTMAX's e in every lane (with M so far on a first pass, the
    row's M on its second), and the row's rescaled sum S for the one cycle it is final; the
    other ops' values unchanged."""
    cfg, rng = PRESETS[preset], make_rng("exponent", preset)
    sch, lanes = Schedule.of(cfg), cfg.ep_lanes
    dut = Exponent(cfg)
    items, steps = [], set()
    for op, _, _, subs, rows in stores(rng, cfg, 8) + climbing_stores(rng, cfg, 4):
        if op == EpOp.SOFTMAX:
            steps.update(step for row in rows.values() for step in loop_steps(row["dm"]))
        for sub in subs:
            row = rows[sub["row"]]
            a = row["a"][sub["cols"]]
            m = (row["m"] if sub["second"] else row["m_run"][sub["j"]]) \
                if op == EpOp.SOFTMAX else rng.randint(-(1 << 16), (1 << 16) - 1)
            if op == EpOp.SOFTMAX:      # pad lanes: e is 0 whatever t, even one near 4096 M
                a = [int(a[i]) if sub["ctl"]["lane_valid"] >> i & 1
                     else (m << intops.SOFTMAX_FRAC) - rng.randint(0, 16 * ONE - 1)
                     for i in range(lanes)]
            lane = [{"a": int(a[i]), "m": m, "carry": carry_bits(rng)} for i in range(lanes)]
            dm = row["dm"][sub["j"]] if op == EpOp.SOFTMAX and not sub["second"] else None
            items.append({"in": {"ctl": sub["ctl"], "lanes": lane}, "op": op, "sub": sub,
                          "row": row, "dm": dm})
    at, end = place([items], rng, idle=0.3)

    def dm(t, item):      # how much M grew, beside the sub-beat in ACC (else anything)
        known = item is not None and item["dm"] is not None
        return [(dut.i_dm, item["dm"] if known else rng.getrandbits(17))]
    sums = sums_of(dut.o_sums)
    outs, trace = run_lanes(dut, dut.i_lanes, dut.o_lanes, items, at, end, sch.E - sch.ACC, rng,
                            extra=dm, watch=lambda ctx: {**sums(ctx), "bind": ctx.get(dut.o_bind)})
    sums_at = {}
    for t, item, record in zip(at, items, outs):
        sub, row = item["sub"], item["row"]
        assert all(sel.softmax == (item["op"] == EpOp.SOFTMAX)
                   and sel.slot == sub["ctl"]["slot"] for sel in record["bind"]), (t, sub)
        got = lane_fields(record["out"], lanes, ["a", "carry.out"])
        assert torch.equal(got["carry.out"],
                           i64([lane["carry"]["out"] for lane in item["in"]["lanes"]]))
        if item["op"] == EpOp.SOFTMAX:
            want = row["e_second" if sub["second"] else "e_first"][sub["j"]]
            if not sub["second"] and sub["ctl"]["last"]:
                sums_at[t + sch.SLOOP - sch.ACC] = (row["total"], sub["ctl"]["slot"])
        else:
            want = i64([lane["a"] for lane in item["in"]["lanes"]])
        assert torch.equal(got["a"], want), (t, sub, got["a"], want)
    # The loop keeps S = A >> p with p < 8 (hw/epilogue/exponent.py).
    got_sums = {t: (r["sums"].a >> r["sums"].p, r["sums"].slot)
                for t, r in enumerate(trace) if r["sums"] is not None}
    assert got_sums == sums_at
    assert steps == {None, 0, 8, 16, 24, 32}, steps       # the loop took every step


def climbing_stores(rng, cfg, count):
    """``count`` SOFTMAX STOREs (as :func:`stores`) of "climbing" rows of six sub-beats."""
    out = []
    for _ in range(count):
        n, row_len, subs = store_subs(rng, cfg, EpOp.SOFTMAX, n=6 * cfg.ep_lanes)
        rows = {}
        for row in sorted({sub["row"] for sub in subs}):
            smx = softmax_row(logits(rng, n, cfg.ep_lanes, "climbing"), row_len, cfg.ep_lanes)
            rows[row] = {**smx, "a": smx["t"]}
        out.append((EpOp.SOFTMAX, n, row_len, subs, rows))
    return out


def loop_steps(dm):
    """The bits the sum loop drops from A at each sub-beat of a row whose M grew by ``dm``
    (hw/epilogue/exponent.py), None where S starts afresh."""
    steps, p = [], 0
    for j, grow in enumerate(dm):
        if j == 0 or grow >= 32:
            steps.append(None)
            p = 0
        else:
            steps.append((p + grow) & ~7)
            p = (p + grow) & 7
    return steps


# -- the finalize pipeline ---------------------------------------------------------------------

def finalize_rows(rng, cfg):
    """Groups of row statistics that share ``row_len`` and ``eps``: ``(params, [(op, slot,
    stats)])``, SOFTMAX's sums at their edges and from :func:`softmax_row`, LAYERNORM's from
    :func:`layernorm_row` (constant rows with and without eps among them)."""
    groups = []
    for _ in range(10):
        row_len = rng.choice([1, 2, cfg.cols, rng.randint(1, intops.MAX_ROW), intops.MAX_ROW])
        eps = rng.choice([0, 1, rng.getrandbits(30), (1 << 62) - 1])
        rows = []
        for _ in range(rng.randint(1, 6)):
            slot = rng.getrandbits(1)
            if rng.random() < 0.5:
                # A row's sum holds its largest exponential: from 2**20 to 1024 * 2**21.
                total = rng.choice([1 << 20, (1 << 21) - 1, 1 << 21, (1 << 21) + 1,
                                    (1 << 32) - 1, 1 << 31, rng.randint(1 << 20, (1 << 31)),
                                    softmax_row(logits(rng, cfg.cols, cfg.ep_lanes), cfg.cols,
                                                cfg.ep_lanes)["total"]])
                rows.append((EpOp.SOFTMAX, slot, {"total": total, "k": total.bit_length() - 1,
                                                  "r": recip(total)}))
            else:
                gamma = beta = torch.zeros(row_len, dtype=torch.int64)
                row = layernorm_row(norm_row(rng, row_len), row_len, eps, gamma=gamma,
                                    beta=beta, gshift=8)
                rows.append((EpOp.LAYERNORM, slot, row))
        groups.append(({"row_len": row_len, "eps": eps}, rows))
    return groups


def sum_fields(rng, total, slot):
    """A row's sum ``total`` as the exponent's loop leaves it, ``A >> p``: ``p`` bits below
    ``total``, any of them (a row's whole range of p, 0 to 7)."""
    p = rng.randrange(8)
    return {"a": total << p | rng.getrandbits(p), "p": p, "slot": slot}


@pytest.mark.parametrize("preset", CONFIGS)
def test_finalize(preset):
    """Each row's statistics reach its slot exactly SMX_FINALIZE (SOFTMAX) or LN_FINALIZE
    (LAYERNORM) cycles after its sums came, and nothing else changes a slot."""
    cfg, rng = PRESETS[preset], make_rng("finalize", preset)
    sch = Schedule.of(cfg)
    dut = Finalize(cfg)
    groups = finalize_rows(rng, cfg)
    # Params are set a cycle before a group's first row and stay while its rows are in the
    # pipeline (a SET waits for an idle unit).
    at, end = place([rows for _, rows in groups], rng, idle=0.5, gap=sch.LN_FINALIZE)
    rows = [row for _, group in groups for row in group]
    params = [prm for prm, group in groups for _ in group]
    entering = dict(zip(at, zip(rows, params)))
    slots = [{"r": 0, "k": 0, "nr": 0, "sr": 0, "j": 0} for _ in range(2)]
    writes = {}                     # cycle -> [(slot, fields it holds from then on)]
    for t, (op, slot, stats), prm in zip(at, rows, params):
        if op == EpOp.SOFTMAX:
            fields, latency = {"r": stats["r"], "k": stats["k"]}, sch.SMX_FINALIZE
        else:
            fields = {"nr": prm["row_len"] * stats["rsq"], "sr": stats["s1"] * stats["rsq"],
                      "j": stats["j"]}
            latency = sch.LN_FINALIZE
        writes.setdefault(t + latency, []).append((slot, fields))
    prm_now = {}

    def step(ctx, t):
        row, ahead = entering.get(t), entering.get(t + 1)
        if ahead:
            prm_now.update(ahead[1])
        (op, slot, stats) = row[0] if row else (None, 0, {})
        put(ctx, dut.i_smx.valid, int(op == EpOp.SOFTMAX))
        put(ctx, dut.i_smx.payload, sum_fields(rng, stats["total"], slot)
            if op == EpOp.SOFTMAX else rng.getrandbits(bits_of(dut.i_smx.payload)))
        put(ctx, dut.i_ln.valid, int(op == EpOp.LAYERNORM))
        put(ctx, dut.i_ln.payload, {"s1": stats["s1"], "s2": stats["s2"], "slot": slot}
            if op == EpOp.LAYERNORM else rng.getrandbits(bits_of(dut.i_ln.payload)))
        put(ctx, dut.params, {"mul0": 0, "shift0": 0, "mul1": 0, "shift1": 0, "flags": 0,
                              **prm_now} if prm_now else 0)
        for slot_n, fields in writes.get(t, []):
            slots[slot_n].update(fields)
        got = ctx.get(dut.o_slots)
        for n in range(2):
            assert same(got[n], slots[n]), (t, n, got[n], slots[n])
    simulate(dut, step, end + sch.LN_FINALIZE + 2)
    assert len(writes) > 20


TABLES = {
    # name: (table, its read a cycle or two after the address)
    "recip": (intops.RECIP_TABLE, recip_table, 2),
    "exp2": (intops.EXP2_TABLE,
             lambda m, addr, platform: rom(m, intops.EXP2_TABLE, addr, name="exp2",
                                           platform=platform), 1),
}


@pytest.mark.parametrize("platform", [None, ECP5], ids=["portable", "ecp5"])
@pytest.mark.parametrize("name", TABLES)
def test_table(name, platform):
    """RECIP_TABLE[addr] two cycles after addr, EXP2_TABLE[addr] one, the same in the portable
    form (one memory) and the ECP5 one (slices of one block RAM's width): every entry's edges
    and random addresses, one a cycle."""
    table, read, latency = TABLES[name]
    rng = make_rng(name, "ecp5" if platform else "portable")

    class Table(Elaboratable):
        def __init__(self):
            self.addr = Signal(range(len(table)))
            self.data = Signal(max(table).bit_length())

        def elaborate(self, _):
            m = Module()
            m.d.comb += self.data.eq(read(m, self.addr, platform))
            return m
    dut = Table()
    addrs = [0, 1, len(table) - 1] + [rng.randrange(len(table)) for _ in range(200)]

    def step(ctx, t):
        ctx.set(dut.addr, addrs[t] if t < len(addrs) else 0)
        return ctx.get(dut.data)
    got = simulate(dut, step, len(addrs) + latency)
    assert got[latency:] == [table[a] for a in addrs]


# -- the back ----------------------------------------------------------------------------------

def back_items(rng, cfg, store_list):
    """Stage E of every sub-beat of ``store_list``, as the exponentials leave it: SOFTMAX's e
    in ``a``; LAYERNORM's v and GELU's z in ``a`` and their coefficients in ``carry``;
    REQUANT's results in ``carry.out``."""
    lanes, items = cfg.ep_lanes, []
    for number, (op, _, _, subs, rows) in enumerate(store_list):
        for sub in subs:
            row, cols = rows[sub["row"]], sub["cols"]
            if op == EpOp.SOFTMAX:
                a = row["e_second" if sub["second"] else "e_first"][sub["j"]]
                carry = [carry_bits(rng) for _ in range(lanes)]
            else:
                a, carry = row["a"][cols], row["carry"][cols]
            lane = [{"a": int(a[i]), "carry": carry[i]} for i in range(lanes)]
            items.append({"in": {"ctl": sub["ctl"], "lanes": lane}, "op": op, "sub": sub,
                          "row": row, "store": number})
    return items


def slot_stats(rng, op=None, row=None, row_len=0):
    """What the finalize pipeline leaves in a slot for ``row`` of ``op`` (the other op's
    fields random; all random without an op)."""
    stats = {"r": rng.getrandbits(17), "k": rng.getrandbits(5), "nr": rng.getrandbits(30),
             "sr": rng.randint(-(1 << 45), (1 << 45) - 1), "j": rng.randint(-32, 31)}
    if op == EpOp.SOFTMAX:
        stats.update(r=row["r"], k=row["k"])
    elif op == EpOp.LAYERNORM:
        stats.update(nr=row_len * row["rsq"], sr=row["s1"] * row["rsq"], j=row["j"])
    return stats


def slot_writes(rng, sch, store_list, items, at):
    """cycle -> [(slot, stats)]: a row's statistics reach its slot in the cycle its first
    second-pass sub-beat is in stage BIND - 1, and random bits replace them the cycle after
    its last one was there (so a read a cycle early or late is caught)."""
    writes, later = {}, {}
    read = sch.BIND - 1 - sch.E
    for number, (op, _, row_len, _, rows) in enumerate(store_list):
        if op not in TWO_PASS:
            continue
        for row_number, row in rows.items():
            cycles = [t for t, item in zip(at, items) if item["store"] == number
                      and item["sub"]["row"] == row_number and item["sub"]["second"]]
            slot = row_number % 2
            later.setdefault(cycles[0] + read, []).append(
                (slot, slot_stats(rng, op, row, row_len)))
            writes.setdefault(cycles[-1] + read + 1, []).append(
                (slot, slot_stats(rng)))
    for t, pairs in later.items():            # a row's own write wins over the random bits
        writes.setdefault(t, []).extend(pairs)
    return writes


@pytest.mark.parametrize("preset", CONFIGS)
def test_back(preset):
    """E + 1 to the end: the results of every op, as golden's functions give them for the
    whole row, from the sub-beat's values and its slot's statistics."""
    cfg, rng = PRESETS[preset], make_rng("back", preset)
    sch, lanes = Schedule.of(cfg), cfg.ep_lanes
    dut = Back(cfg)
    store_list = stores(rng, cfg, 8)
    items = back_items(rng, cfg, store_list)
    groups = [[item for item in items if item["store"] == n] for n in range(len(store_list))]
    # Params stay while a STORE's beats are inside (a SET waits for an idle unit).
    at, end = place(groups, rng, idle=0.3, gap=sch.depth)
    writes = slot_writes(rng, sch, store_list, items, at)
    slots = [slot_stats(rng) for _ in range(2)]
    gshift = {"now": 8}

    def inputs(t, item):
        for slot, stats in writes.get(t, []):
            slots[slot] = stats
        if item is not None:
            gshift["now"] = item["row"].get("gshift", rng.randint(0, 63))
        bind = ({"softmax": int(item["op"] == EpOp.SOFTMAX), "slot": item["in"]["ctl"]["slot"]}
                if item is not None else rng.getrandbits(2 * lanes))
        return [(dut.i_slots, list(slots)),
                (dut.i_bind, [bind] * lanes if item is not None else bind),
                (dut.params, {"mul0": 0, "shift0": 0, "mul1": 0, "row_len": 0, "eps": 0,
                              "flags": 0, "shift1": gshift["now"]})]
    outs, _ = run_lanes(dut, dut.i_lanes, dut.o_row, items, at, end, sch.depth - 1 - sch.E,
                        rng, extra=inputs)
    checked = set()
    for t, item, record in zip(at, items, outs):
        sub = item["sub"]
        if not sub["second"]:
            continue                           # a first pass leaves nothing
        got = i64([record["out"].lanes[i] for i in range(lanes)])
        want = item["row"]["y"][sub["cols"]].long()
        assert torch.equal(got, want), (t, item["op"], sub, got, want)
        checked.add(item["op"])
    assert checked == set(OPS)


# -- the intake and the outlet -----------------------------------------------------------------

def random_beat(rng, cfg):
    """A beat of random values, two-pass ops and row ends common (to meet the gap often)."""
    cols = cfg.cols
    return {"acc": [rng.randint(I32_MIN, I32_MAX) for _ in range(cols)],
            "pm": [{"bias": rng.getrandbits(32), "p1": rng.getrandbits(16),
                    "p2": rng.getrandbits(16)} for _ in range(cols)],
            "res": [rng.randint(-128, 127) for _ in range(cols)],
            "op": rng.choice([EpOp.SOFTMAX, EpOp.LAYERNORM] * 3 + list(EpOp)),
            "second": rng.getrandbits(1), "last": rng.getrandbits(1),
            "lane_valid": rng.getrandbits(cols)}


@pytest.mark.parametrize("preset", CONFIGS)
def test_intake(preset):
    """The queue's room, the takes, stage IN and the busy flag against :class:`IntakeModel`,
    with a source that idles at random (random payloads while not valid), random credits and
    runs where the queue fills."""
    cfg, rng = PRESETS[preset], make_rng("intake", preset)
    dut, model = Intake(cfg), IntakeModel(cfg)
    credit, taken, counts = [1], [], {"gap_waits": 0, "full": 0}

    def step(ctx, t):
        offer = rng.random() < (0.9 if t // 100 % 2 else 0.5)
        beat = random_beat(rng, cfg)
        put(ctx, dut.i_beat.valid, int(offer))
        put(ctx, dut.i_beat.payload, beat)
        # Whether a credit will be left next cycle, if the output pops now or not and if no
        # output-owing beat is taken now or if one is: random, and the model takes the one
        # that applies.
        credit_next = [[int(rng.random() < 0.7) for _ in range(2)] for _ in range(2)]
        popped = rng.getrandbits(1)
        put(ctx, dut.i_credit_next, credit_next)
        put(ctx, dut.i_popped, popped)
        room = model.room(t)
        assert ctx.get(dut.i_beat.ready) == room, t
        counts["full"] += not room
        head = model.head(t)
        take = head is not None and model.takes(t, credit[0])
        counts["gap_waits"] += head is not None and model.waits(t, head)
        assert ctx.get(dut.o_taken) == take, (t, head and (head["op"], head["second"]))
        owe = take and bool(head["second"])
        assert ctx.get(dut.o_owe) == owe, t
        want = model.stage_in.pop(t, None)
        assert ctx.get(dut.o_sub.valid) == (want is not None), t
        if want is not None:
            got = ctx.get(dut.o_sub.payload)
            assert same(got.ctl, want["ctl"]) and same(got.lanes, want["lanes"]), t
            one_hot = 1 << EpOp(want["ctl"]["op"]).value
            assert all(ctx.get(dut.o_sub_op[i]) == one_hot for i in range(cfg.ep_lanes)), t
        if take:
            model.take(t)
            taken.append((head["op"], head["second"]))
        if offer and room:
            model.queued.append((beat, t))
        credit[0] = credit_next[popped][owe]
        busy_next = (t + 1) in model.stage_in or t + 1 < model.open or bool(model.queued)
        assert ctx.get(dut.o_busy_next) == busy_next, t
    simulate(dut, step, 1500)
    assert len({op for op, second in taken if second and op in TWO_PASS}) == 2
    assert counts["gap_waits"] > 0 and counts["full"] > 0 and len(taken) > 200, counts


@pytest.mark.parametrize("preset", CONFIGS)
def test_outlet(preset):
    """Every beat that owes an output leaves as one row of its sub-beats, in order, under
    random backpressure; a credit is left next cycle (``o_credit_next``, for the pop
    ``o_popped`` says and the ``i_owe`` given) exactly while fewer than ``fifo_depth`` output
    beats will be owed; ``o_busy_next`` says whether one will be owed in the next cycle."""
    cfg, rng = PRESETS[preset], make_rng("outlet", preset)
    sch, lanes = Schedule.of(cfg), cfg.ep_lanes
    dut = Outlet(cfg)
    cycles, arriving, sent, got = 1500, {}, [], []
    state = {"owed": 0, "open": 0, "ready": 1.0, "refused": 0, "credit": 1}
    pressure = [1.0, 0.05, 0.7, 0.3]        # chance of o_data.ready, 150 cycles each

    def intake(t, credit):
        """A beat accepted now (one every ratio cycles, an output-producing one on credit)
        reaches the outlet ``depth`` cycles later, a sub-beat a cycle. Returns whether it owes
        an output."""
        second = rng.random() < 0.7
        if t < state["open"] or t > cycles - 4 * sch.depth or rng.random() < 0.3 or (
                second and not credit):
            return 0
        rows = [[rng.randint(I32_MIN, I32_MAX) for _ in range(lanes)] for _ in range(sch.ratio)]
        for j, row in enumerate(rows):
            ctl = {"op": EpOp.RAW, "second": int(second), "last": 0,
                   "lane_valid": (1 << lanes) - 1, "slot": 0, **({"sub": j} if sch.ratio > 1
                                                                 else {})}
            arriving[t + sch.depth + j] = {"ctl": ctl, "lanes": row}
        if second:
            sent.append([value for row in rows for value in row])
        state["open"] = t + sch.ratio
        return int(second)

    def step(ctx, t):
        credit = state["credit"]
        assert credit == (state["owed"] < sch.fifo_depth), t
        owe = intake(t, credit)
        put(ctx, dut.i_owe, owe)
        sub = arriving.pop(t, None)
        put(ctx, dut.i_row.valid, int(sub is not None))
        put(ctx, dut.i_row.payload, sub or rng.getrandbits(bits_of(dut.i_row.payload)))
        state["refused"] += not credit
        if t % 150 == 0:
            state["ready"] = pressure[t // 150 % len(pressure)] if t < cycles - 300 else 1.0
        ready = int(rng.random() < state["ready"])
        put(ctx, dut.o_data.ready, ready)
        popped = ctx.get(dut.o_data.valid) and ready
        assert ctx.get(dut.o_popped) == popped, t
        if popped:
            row = ctx.get(dut.o_data.payload)
            got.append([row[i] for i in range(cfg.cols)])
        state["owed"] += owe - popped
        assert ctx.get(dut.o_busy_next) == (state["owed"] > 0), t
        state["credit"] = ctx.get(dut.o_credit_next[popped][owe])
    simulate(dut, step, cycles)
    assert got == sent and len(sent) > 100 and state["refused"] > 0
