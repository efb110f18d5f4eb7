"""Host-side descriptions of the fused epilogues, and their lowering to the machine's integers.

An epilogue is applied by the STOREs that drain the GEMM's accumulator (see
:class:`bertaccel.hw.isa.EpOp` and :mod:`bertaccel.golden.intops`). The compiler takes one of the
frozen dataclasses below, with real-valued parameters, and :func:`lower` turns it into what the
machine holds:

* scalar parameters, written to the store unit's registers by SET instructions
  (:class:`bertaccel.hw.isa.Param`);
* one parameter-memory (PMEM) row per N strip of ``cfg.cols`` columns: a
  :data:`bertaccel.hw.isa.PmemWord` per column (int32 ``bias`` in bits 0-31, ``p1`` in 32-47,
  ``p2`` in 48-63), loaded through the data stream as bytes, the first beat in the lowest bits.

Scales become a 16-bit multiplier and a shift with :func:`bertaccel.golden.intops.quantize_scale`;
a scale that cannot be represented raises :class:`~bertaccel.golden.intops.ScaleError` naming the
parameter. Every op outputs int8 values (in int32 lanes) but SOFTMAX, whose outputs are 12-bit
probabilities, ``round(4095 p)`` (:data:`bertaccel.golden.intops.PROB_SCALE`).

The LayerNorm formats
---------------------
The hardware forms ``v = sat16(rshift_round((x + bias) * xmul + r * rmul, vshift))``, the
pre-normalisation sum ``h = x * in_scale + bias + r * residual_scale`` in an int16 unit ``u_v``.
LayerNorm does not depend on the unit, so ``u_v`` is chosen for range and resolution:

* with ``absmax`` (a calibrated bound of ``|h|``, in real units) given, ``u_v = absmax / 32767``:
  the calibrated range fills int16 and rarer values saturate;
* without it, from the worst case that the integers allow: ``|x| <= k * 128 * 128`` for a GEMM of
  depth ``k``, the residual ``|r| <= 128`` and the largest ``|bias|``; ``v`` then never
  saturates. Over a random or real int8 GEMM this leaves ``v`` a few hundred steps per standard
  deviation or more, well under one int8 output LSB after normalisation.

``xmul / 2**vshift`` is ``in_scale / u_v`` with the most bits a 16-bit ``xmul`` allows, and
``rmul`` (32 bits) is ``residual_scale / u_v`` at the same shift (the shift is lowered when
``rmul`` would not fit). ``eps_n2 = round(eps / u_v**2 * row_len**2)``. ``gamma`` is stored as
int16 in units of ``2**(12 - gshift)`` output LSBs with the largest ``gshift`` (8 to 40) that
keeps every ``|gamma|`` below 2**15, and ``beta`` as int16 in 1/256 output LSBs (so
``|beta / out_scale|`` must stay below 128).
"""

import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from ..golden import intops
from ..golden.intops import ScaleError, quantize_scale
from ..hw.isa import PMEM_SHIFT_BITS, PMEM_WORD_BITS, EpOp, Param, is_two_pass, pmem_pack

__all__ = ["Requant", "Gelu", "Softmax", "LayerNorm", "Tail", "Lowered", "ScaleError", "lower",
           "apply_registers", "apply_integer", "apply_float", "pmem_bytes", "random_epilogue",
           "random_gemm", "EDGE_SPREAD", "EPILOGUES"]

_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


@dataclass(frozen=True, eq=False)
class Requant:
    """``y = sat8(round((x + bias) * scale))``: requantise the int32 accumulator to int8.

    Parameters
    ----------
    scale : float
        Multiplier from accumulator units to output units (``in_scale / out_scale``).
    bias : scalar or (n,) array-like, optional
        Bias in accumulator units (the int32 bias of a quantised linear layer); rounded.
    per_channel_scale : (n,) array-like, optional
        Per-column factors: column ``j`` uses ``scale * per_channel_scale[j]`` (e.g. the weight
        scales of a per-channel quantised layer).
    """

    scale: float
    bias: object = None
    per_channel_scale: object = None
    op = EpOp.REQUANT


@dataclass(frozen=True, eq=False)
class Gelu:
    """``y = round(GELU(x * in_scale + bias) / out_scale)``, int8, erf form.

    Parameters
    ----------
    in_scale : float
        Real value of one accumulator unit.
    out_scale : float
        Real value of one output LSB.
    bias : scalar or (n,) array-like, optional
        Real-valued bias added before the GELU (rounded to accumulator units).
    """

    in_scale: float
    out_scale: float
    bias: object = None
    op = EpOp.GELU


@dataclass(frozen=True, eq=False)
class Softmax:
    """``y = round(4095 * softmax(x * in_scale + mask))`` (12 bits) over each row of the GEMM.

    Parameters
    ----------
    in_scale : float
        Real value of one accumulator unit, including attention's ``1 / sqrt(d)``.
    mask : (n,) array-like, optional
        Per-column padding mask. Boolean: ``True`` marks a masked (padding) column, as torch's
        ``key_padding_mask`` does. Floating point: added to the scaled logits (0 keeps a
        column; a large negative value or ``-inf`` masks it), as in Hugging Face's extended
        attention mask. Masked columns get probability 0.
    """

    in_scale: float
    mask: object = None
    op = EpOp.SOFTMAX


@dataclass(frozen=True, eq=False)
class LayerNorm:
    """``y = round(LayerNorm(x * in_scale + bias + r * residual_scale) / out_scale)``, int8.

    The residual ``r`` is a third int8 input of the program, of shape ``(m, n)``.

    Parameters
    ----------
    in_scale : float
        Real value of one accumulator unit.
    gamma, beta : (n,) array-like
        LayerNorm weight and bias (real).
    out_scale : float
        Real value of one output LSB.
    eps : float
        LayerNorm's epsilon (BERT: 1e-12).
    residual_scale : float
        Real value of one residual LSB.
    bias : scalar or (n,) array-like, optional
        Real-valued bias of the linear layer, added before the residual.
    absmax : float, optional
        Calibrated bound of ``|x * in_scale + bias + r * residual_scale|``; it sets the int16
        format of the sum (see the module docstring). By default the worst case of the GEMM.
    """

    in_scale: float
    gamma: object
    beta: object
    out_scale: float
    eps: float
    residual_scale: float
    bias: object = None
    absmax: float | None = None
    op = EpOp.LAYERNORM


@dataclass(frozen=True, eq=False)
class Tail:
    """``epilogue`` on every column of a GEMM but the last ``columns``, and ``tail`` on those:
    two single-pass epilogues of one op on one GEMM (BERT's GELU outlier columns, whose output
    scale is their own). PMEM holds each column's own parameters; the tiler stores the strips
    that hold tail columns a second time, after SETs of ``tail``'s registers (and SETs back
    where a STORE follows), and each column is taken from the STORE of its own epilogue.

    Parameters
    ----------
    epilogue, tail : Requant or Gelu
        Of one op.
    columns : int
        The tail's columns: at least 1, fewer than the GEMM's.
    """

    epilogue: object
    tail: object
    columns: int

    @property
    def op(self):
        return self.epilogue.op


#: The epilogue classes by the name the command line uses.
EPILOGUES = {"requant": Requant, "gelu": Gelu, "softmax": Softmax, "layernorm": LayerNorm}


@dataclass(frozen=True, eq=False)
class Lowered:
    """An epilogue in the machine's integers, for a GEMM of ``n`` columns.

    Members
    -------
    op : EpOp
    sets : tuple of (Param, int)
        The SETs to issue, in order.
    bias, p1, p2 : numpy.ndarray
        ``(n_strips * cols,)`` PmemWord fields per column (int64 holding int32, and the 16-bit
        fields as unsigned values); the padding columns past ``n`` are 0.
    residual : bool
        The op reads a residual from scratchpad B.
    two_pass : bool
        SOFTMAX or LAYERNORM: whole rows, each read twice.
    info : dict
        The integer parameters chosen, by their golden.intops names (for reports and tests).
    tail : tuple or None
        ``(columns, sets)``: the last ``columns`` columns take the registers ``sets`` (a
        :class:`Tail`), the others :attr:`sets`.
    """

    op: EpOp
    sets: tuple
    bias: np.ndarray
    p1: np.ndarray
    p2: np.ndarray
    residual: bool
    two_pass: bool
    info: dict = field(default_factory=dict)
    tail: tuple | None = None


def _real(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
            or not math.isfinite(value):
        raise ScaleError(f"{name} must be a finite number, not {value!r}")
    return float(value)


def _column_vector(value, n, name, *, default=0.0):
    """``value`` (None, a scalar or an (n,) array-like) as an (n,) float64 array."""
    if value is None:
        return np.full(n, default, dtype=np.float64)
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().double().numpy()
    array = np.asarray(value, dtype=np.float64)
    if array.ndim == 0:
        array = np.full(n, float(array))
    if array.shape != (n,):
        raise ScaleError(f"{name} must be a scalar or have shape ({n},), not {array.shape}")
    return array


def _int32(values, name):
    if not np.all(np.isfinite(values)):
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise ScaleError(f"{name}[{bad}] must be finite, not {float(values[bad])!r}")
    out = np.round(values).astype(np.float64)
    if out.size and (out.min() < _I32_MIN or out.max() > _I32_MAX):
        bad = int(np.argmax(np.abs(out)))
        raise ScaleError(f"{name}[{bad}] = {float(values[bad])!r} is {out[bad]:.0f} "
                         f"accumulator units, outside int32")
    return out.astype(np.int64)


def _pad(values, width):
    out = np.zeros(width, dtype=np.int64)
    out[:len(values)] = values
    return out


def lower(epilogue, cfg, *, n, k):
    """The integers of ``epilogue`` for a GEMM of depth ``k`` and ``n`` output columns.

    Parameters
    ----------
    epilogue : Requant or Gelu or Softmax or LayerNorm
    cfg : AccelConfig
    n, k : int
        GEMM output columns and depth (``k`` bounds the accumulator for LayerNorm's format).

    Returns
    -------
    Lowered

    Raises
    ------
    ScaleError
        A scale, bias, mask, gamma or beta cannot be represented; the message names it.
    TypeError
        ``epilogue`` is not one of the epilogue classes.
    """
    if isinstance(epilogue, Tail):
        return _lower_tail(epilogue, cfg, n, k)
    if not isinstance(epilogue, tuple(EPILOGUES.values())):
        raise TypeError(f"epilogue must be one of {', '.join(c.__name__ for c in EPILOGUES.values())}"
                        f", not {type(epilogue).__name__}")
    name = type(epilogue).__name__
    width = -(-n // cfg.cols) * cfg.cols
    zeros = np.zeros(width, dtype=np.int64)
    p1, p2 = zeros, zeros
    info = {}
    if isinstance(epilogue, Requant):
        scale = _real(epilogue.scale, f"{name}.scale")
        mul, shift = quantize_scale(scale, name=f"{name}.scale")
        bias = _int32(_column_vector(epilogue.bias, n, f"{name}.bias"), f"{name}.bias")
        sets = [(Param.MUL0, mul), (Param.SHIFT0, shift)]
        info.update(mul=mul, shift=shift)
        if epilogue.per_channel_scale is not None:
            factors = _column_vector(epilogue.per_channel_scale, n, f"{name}.per_channel_scale")
            pairs = [quantize_scale(scale * float(f), name=f"{name}.scale * "
                                    f"{name}.per_channel_scale[{j}]")
                     for j, f in enumerate(factors)]
            muls = np.array([p[0] for p in pairs], dtype=np.int64)
            shifts = np.array([p[1] for p in pairs], dtype=np.int64)
            p1, p2 = _pad(muls, width), _pad(shifts, width)
            sets.append((Param.FLAGS, 1))
            info.update(mul=muls, shift=shifts)
        else:
            sets.append((Param.FLAGS, 0))
    elif isinstance(epilogue, Gelu):
        in_scale = _real(epilogue.in_scale, f"{name}.in_scale")
        out_scale = _real(epilogue.out_scale, f"{name}.out_scale")
        if in_scale <= 0 or out_scale <= 0:
            raise ScaleError(f"{name}.in_scale and {name}.out_scale must be above 0, not "
                             f"{in_scale!r} and {out_scale!r}")
        gmul, gshift = quantize_scale(in_scale * 64, name=f"{name}.in_scale (x 64)")
        omul, oshift = quantize_scale(in_scale / out_scale * 256,
                                      name=f"{name}.in_scale / {name}.out_scale (x 256)")
        bias = _int32(_column_vector(epilogue.bias, n, f"{name}.bias") / in_scale,
                      f"{name}.bias")
        sets = [(Param.MUL0, gmul), (Param.SHIFT0, gshift), (Param.MUL1, omul),
                (Param.SHIFT1, oshift)]
        info.update(gmul=gmul, gshift=gshift, omul=omul, oshift=oshift)
    elif isinstance(epilogue, Softmax):
        in_scale = _real(epilogue.in_scale, f"{name}.in_scale")
        one = 1 << intops.SOFTMAX_FRAC      # the logit t has SOFTMAX_FRAC fraction bits
        mul, shift = quantize_scale(in_scale * math.log2(math.e) * one,
                                    name=f"{name}.in_scale (x log2(e) x {one})")
        bias = _mask(epilogue.mask, n, in_scale, name)
        sets = [(Param.MUL0, mul), (Param.SHIFT0, shift), (Param.ROW_LEN, n)]
        info.update(mul=mul, shift=shift, row_len=n)
    else:
        bias, p1, p2, sets = _layernorm(epilogue, n, k, width, info)
    return Lowered(op=epilogue.op, sets=tuple(sets), bias=_pad(bias, width), p1=p1, p2=p2,
                   residual=epilogue.op == EpOp.LAYERNORM,
                   two_pass=is_two_pass(epilogue.op), info=info)


def _lower_tail(epilogue, cfg, n, k):
    """:func:`lower` of a :class:`Tail`: each part lowered on its columns, PMEM joined."""
    head, tail, columns = epilogue.epilogue, epilogue.tail, epilogue.columns
    if not isinstance(head, (Requant, Gelu)) or type(tail) is not type(head):
        raise TypeError(f"a Tail's epilogue and tail must be both Requant or both Gelu, not "
                        f"{type(head).__name__} and {type(tail).__name__}")
    if isinstance(columns, bool) or not isinstance(columns, (int, np.integer)) \
            or not 1 <= columns < n:
        raise ValueError(f"Tail.columns must be an int from 1 to n - 1 = {n - 1}, not "
                         f"{columns!r}")
    first = lower(head, cfg, n=n - columns, k=k)
    last = lower(tail, cfg, n=int(columns), k=k)
    width = -(-n // cfg.cols) * cfg.cols

    def joined(name):
        return _pad(np.concatenate([getattr(first, name)[:n - columns],
                                    getattr(last, name)[:columns]]), width)
    return Lowered(op=first.op, sets=first.sets, bias=joined("bias"), p1=joined("p1"),
                   p2=joined("p2"), residual=False, two_pass=False,
                   info={**first.info, "tail": last.info}, tail=(int(columns), last.sets))


def _mask(mask, n, in_scale, name):
    """The additive int32 mask per column: 0 keeps, -2**31 (or a negative logit offset) masks."""
    if mask is None:
        return np.zeros(n, dtype=np.int64)
    if isinstance(mask, torch.Tensor):
        mask = mask.detach().cpu().numpy()
    mask = np.asarray(mask)
    if mask.shape != (n,):
        raise ScaleError(f"{name}.mask must have shape ({n},), not {mask.shape}")
    if mask.dtype == np.bool_:
        return np.where(mask, _I32_MIN, 0).astype(np.int64)
    values = mask.astype(np.float64)
    if np.any(np.isnan(values)) or np.any(values == np.inf):
        raise ScaleError(f"{name}.mask must not hold NaN or +inf")
    units = np.where(np.isneginf(values), float(_I32_MIN), values / in_scale)
    return np.clip(np.round(units), _I32_MIN, _I32_MAX).astype(np.int64)


#: LayerNorm's largest gamma shift: beta * 2**(gshift - 8) must stay far inside int64.
_GSHIFT_MAX = 40


def _layernorm(ep, n, k, width, info):
    name = "LayerNorm"
    in_scale = _real(ep.in_scale, f"{name}.in_scale")
    out_scale = _real(ep.out_scale, f"{name}.out_scale")
    rscale = _real(ep.residual_scale, f"{name}.residual_scale")
    eps = _real(ep.eps, f"{name}.eps")
    for what, value in (("in_scale", in_scale), ("out_scale", out_scale),
                        ("residual_scale", rscale)):
        if value <= 0:
            raise ScaleError(f"{name}.{what} must be above 0, not {value!r}")
    if eps < 0:
        raise ScaleError(f"{name}.eps must be at least 0, not {eps!r}")
    bias_real = _column_vector(ep.bias, n, f"{name}.bias")
    bias = _int32(bias_real / in_scale, f"{name}.bias")
    gamma = _column_vector(ep.gamma, n, f"{name}.gamma")
    beta = _column_vector(ep.beta, n, f"{name}.beta")
    if not (np.all(np.isfinite(gamma)) and np.all(np.isfinite(beta))):
        raise ScaleError(f"{name}.gamma and {name}.beta must be finite")

    # The int16 unit of v = x * in_scale + bias + r * residual_scale.
    if ep.absmax is not None:
        bound = _real(ep.absmax, f"{name}.absmax")
        if bound <= 0:
            raise ScaleError(f"{name}.absmax must be above 0, not {bound!r}")
        source = "absmax"
    else:
        bound = (k * 128 * 128 * in_scale + float(np.abs(bias_real).max(initial=0.0))
                 + 128 * rscale)
        source = "worst case"
    unit = bound / 32767
    xmul, vshift = quantize_scale(in_scale / unit, name=f"{name}.in_scale / v unit")
    rmul = round(rscale / unit * 2 ** vshift)
    while rmul >= 1 << 32 and vshift > 0:      # rmul is a 32-bit register
        vshift -= 1
        xmul = round(in_scale / unit * 2 ** vshift)
        rmul = round(rscale / unit * 2 ** vshift)
    if rmul >= 1 << 32 or xmul == 0:
        raise ScaleError(f"{name}.residual_scale / {name}.in_scale = {rscale / in_scale:g} is "
                         f"too large for a 16-bit xmul and a 32-bit rmul at one shift")
    if rmul == 0:
        raise ScaleError(f"{name}.residual_scale {rscale!r} is too small next to the v unit "
                         f"{unit:g} ({source})")
    eps_n2 = round(eps / unit ** 2 * n * n)
    if eps_n2 >= 1 << 62:
        raise ScaleError(f"{name}.eps {eps!r} is too large: eps * row_len**2 in v units is "
                         f"{eps_n2:.3g}, above 2**62")

    g_lsb = gamma / out_scale              # output LSBs per normalised unit
    top = float(np.abs(g_lsb).max(initial=0.0))
    gshift = _GSHIFT_MAX if top == 0 else min(_GSHIFT_MAX,
                                              12 + math.floor(math.log2(32767 / top)))
    if gshift < 8:
        raise ScaleError(f"{name}.gamma / {name}.out_scale reaches {top:g} output LSBs, beyond "
                         f"the int16 format (at most {32767 * 16})")
    gamma_q = np.round(g_lsb * 2.0 ** (gshift - 12)).astype(np.int64)
    beta_q = np.round(beta / out_scale * 256).astype(np.int64)
    if beta_q.size and np.abs(beta_q).max() > 32767:
        bad = int(np.argmax(np.abs(beta_q)))
        raise ScaleError(f"{name}.beta[{bad}] / {name}.out_scale = {beta[bad] / out_scale:g} "
                         f"output LSBs is beyond the int16 format (|beta| below 128 LSBs)")
    sets = [(Param.MUL0, xmul), (Param.SHIFT0, vshift), (Param.MUL1, rmul),
            (Param.SHIFT1, gshift), (Param.ROW_LEN, n), (Param.EPS, eps_n2)]
    info.update(xmul=xmul, vshift=vshift, rmul=rmul, gshift=gshift, eps_n2=eps_n2, row_len=n,
                v_unit=unit, v_unit_from=source)
    return bias, _pad(gamma_q & 0xFFFF, width), _pad(beta_q & 0xFFFF, width), sets


def pmem_bytes(lowered, cols):
    """The PMEM rows of ``lowered``: ``(n_strips, cols * PMEM_WORD_BITS / 8)`` uint8, one
    :data:`~bertaccel.hw.isa.PmemWord` per column, little-endian
    (:func:`~bertaccel.hw.isa.pmem_pack`)."""
    words = pmem_pack(bias=lowered.bias, p1=lowered.p1, p2=lowered.p2)
    return words.astype("<u8").view(np.uint8).reshape(-1, cols * PMEM_WORD_BITS // 8)


def _signed16(values):
    values = torch.as_tensor(values, dtype=torch.int64)
    return torch.where(values >= 1 << 15, values - (1 << 16), values)


#: GELU's ``omul`` is the low bits of MUL1, a register as wide as LAYERNORM's ``rmul``.
_MUL_MASK = (1 << intops.MUL_BITS) - 1


def apply_registers(op, x, *, regs, bias, p1, p2, residual=None, lanes):
    """The epilogue ``op`` as the machine applies it: :mod:`bertaccel.golden.intops` called with
    the store unit's parameter registers and the PMEM fields of the columns. Every software path
    (the software device, :func:`apply_integer`, the fast runtime) applies an epilogue here.

    Parameters
    ----------
    op : isa.EpOp
        REQUANT, GELU, SOFTMAX or LAYERNORM.
    x : torch.Tensor
        ``(rows, n)`` int32 accumulator values.
    regs : mapping of isa.Param to int
        The parameter registers (missing ones read 0).
    bias, p1, p2 : torch.Tensor
        ``(n,)`` PMEM fields of the columns: ``bias`` signed, ``p1`` and ``p2`` unsigned 16-bit.
    residual : torch.Tensor, optional
        ``(rows, n)`` int8 residual (LAYERNORM).
    lanes : int
        The epilogue's lanes (``cfg.ep_lanes``): the strip width of SOFTMAX's running maximum.

    Returns
    -------
    torch.Tensor
        ``(rows, n)`` int8 values (int64); SOFTMAX's 12-bit probabilities.
    """
    reg = lambda param: regs.get(param, 0)  # noqa: E731
    if op == EpOp.REQUANT:
        if reg(Param.FLAGS) & 1:
            mul, shift = p1, p2 & ((1 << PMEM_SHIFT_BITS) - 1)
        else:
            mul, shift = reg(Param.MUL0), reg(Param.SHIFT0)
        return intops.requant(x, bias=bias, mul=mul, shift=shift)
    if op == EpOp.GELU:
        return intops.gelu(x, bias=bias, gmul=reg(Param.MUL0), gshift=reg(Param.SHIFT0),
                           omul=reg(Param.MUL1) & _MUL_MASK, oshift=reg(Param.SHIFT1))
    if op == EpOp.SOFTMAX:
        return intops.softmax(x, mask=bias, mul=reg(Param.MUL0), shift=reg(Param.SHIFT0),
                              cols=lanes, row_len=reg(Param.ROW_LEN))
    if op == EpOp.LAYERNORM:
        return intops.layernorm(x, bias=bias, residual=residual, xmul=reg(Param.MUL0),
                                rmul=reg(Param.MUL1), vshift=reg(Param.SHIFT0),
                                gamma=_signed16(p1), beta=_signed16(p2),
                                gshift=reg(Param.SHIFT1), eps_n2=reg(Param.EPS),
                                row_len=reg(Param.ROW_LEN))
    raise ValueError(f"unknown epilogue {op!r}")


def apply_integer(lowered, c, r=None, *, cols):
    """golden.intops applied to the int32 GEMM result ``c`` ``(m, n)``: the bit-exact epilogue
    of ``lowered`` (:func:`apply_registers` with its SETs and PMEM fields).

    Parameters
    ----------
    lowered : Lowered
    c : torch.Tensor
        ``(m, n)`` int32 accumulator values.
    r : torch.Tensor, optional
        ``(m, n)`` int8 residual (LayerNorm).
    cols : int
        The epilogue's lanes (``cfg.ep_lanes``): the strip width of SOFTMAX's running maximum.
    """
    n = c.shape[1]

    def part(sets, lo, hi):
        field = lambda values: torch.from_numpy(values[lo:hi].copy())  # noqa: E731
        return apply_registers(lowered.op, c[:, lo:hi], regs=dict(sets),
                               bias=field(lowered.bias), p1=field(lowered.p1) & 0xFFFF,
                               p2=field(lowered.p2) & 0xFFFF, residual=r, lanes=cols)
    if lowered.tail is None:
        return part(lowered.sets, 0, n)
    columns, sets = lowered.tail
    return torch.cat([part(lowered.sets, 0, n - columns), part(sets, n - columns, n)], dim=1)


def apply_float(epilogue, c, r=None):
    """The epilogue in float64 torch on the GEMM result ``c``, in output LSBs, clipped to the
    output range (int8; SOFTMAX 0 to 4095) but not rounded: what the integer epilogue
    approximates."""
    x = c.double()
    n = x.shape[1]
    if isinstance(epilogue, Tail):
        cut = n - epilogue.columns
        return torch.cat([apply_float(epilogue.epilogue, c[:, :cut]),
                          apply_float(epilogue.tail, c[:, cut:])], dim=1)

    def vec(value, default=0.0):
        return torch.from_numpy(_column_vector(value, n, "vector", default=default))

    if isinstance(epilogue, Requant):
        scale = epilogue.scale * (vec(epilogue.per_channel_scale, 1.0)
                                  if epilogue.per_channel_scale is not None else 1.0)
        y = (x + vec(epilogue.bias).round()) * scale
    elif isinstance(epilogue, Gelu):
        y = torch.nn.functional.gelu(x * epilogue.in_scale + vec(epilogue.bias)) \
            / epilogue.out_scale
    elif isinstance(epilogue, Softmax):
        logits = x * epilogue.in_scale
        if epilogue.mask is not None:
            mask = torch.as_tensor(np.asarray(epilogue.mask))
            if mask.dtype == torch.bool:
                logits = logits.masked_fill(mask, -math.inf)
            else:
                logits = logits + mask.double()
        return intops.PROB_SCALE * torch.softmax(logits, dim=1)
    elif isinstance(epilogue, LayerNorm):
        h = x * epilogue.in_scale + vec(epilogue.bias)
        if r is not None:
            h = h + r.double() * epilogue.residual_scale
        y = torch.nn.functional.layer_norm(h, (n,), vec(epilogue.gamma), vec(epilogue.beta),
                                           epilogue.eps) / epilogue.out_scale
    else:
        raise TypeError(f"not an epilogue: {type(epilogue).__name__}")
    return y.clamp(-128, 127)


#: Octaves the scales of an ``"edge"`` GEMM's epilogue spread over (:func:`random_gemm`).
EDGE_SPREAD = 6


def random_epilogue(name, *, k, n, generator, spread=0):
    """An epilogue ``name`` (a key of :data:`EPILOGUES`) with realistic random parameters for a
    GEMM of random int8 operands of depth ``k`` and ``n`` columns, drawn from ``generator``.

    The accumulator of two uniform int8 operands has a standard deviation of about
    ``5461 * sqrt(k)``; the scales put the epilogue's input in the range a BERT layer sees
    (GELU inputs of a few units, softmax logits of a few units with the last tenth of the
    columns masked as padding, LayerNorm sums of about one unit with an int8 residual of the
    same size, per-column bias, gamma and beta). With ``spread`` (octaves) every scale and
    bias is also multiplied by ``2**u``, ``u`` uniform in ``[-spread, spread]`` (a draw per
    column for the per-column ones), so that values reach the epilogue's range limits:
    saturation, shifts of many sizes, the ends of the tables.
    """
    if name not in EPILOGUES:
        raise ValueError(f"unknown epilogue {name!r}; epilogues are {', '.join(EPILOGUES)}")
    std = 5461.0 * math.sqrt(k)

    def uniform(low, high, size=n):
        return (low + (high - low) * torch.rand(size, generator=generator, dtype=torch.float64))

    def normal(scale, size=n):
        return scale * torch.randn(size, generator=generator, dtype=torch.float64)

    def wide(size=()):
        if not spread:
            return torch.ones(size, dtype=torch.float64)
        return 2.0 ** uniform(-spread, spread, size)

    if name == "requant":
        out_scale = 4.0 / 127
        bias = torch.round(normal(0.2 * std) * wide(n)).to(torch.int64)
        return Requant(scale=float((1.0 / std) / out_scale * wide()), bias=bias,
                       per_channel_scale=uniform(0.5, 1.5) * wide(n))
    if name == "gelu":
        return Gelu(in_scale=float(2.0 / std * wide()), out_scale=float(8.0 / 127 * wide()),
                    bias=normal(0.2) * wide(n))
    if name == "softmax":
        mask = torch.zeros(n, dtype=torch.bool)
        if n >= 4:
            mask[n - n // 10:] = True
        return Softmax(in_scale=float(3.0 / std * wide()), mask=mask)
    in_scale, gamma, beta = float(1.0 / std * wide()), uniform(0.5, 1.5) * wide(n), normal(0.2)
    out_scale = float(5.0 / 127 * wide())
    # beta is held in output LSBs, below 128 of them.
    beta = (beta * wide(n)).clamp(-100 * out_scale, 100 * out_scale)
    return LayerNorm(in_scale=in_scale, gamma=gamma, beta=beta, out_scale=out_scale, eps=1e-12,
                     residual_scale=float(1.0 / 74 * wide()), bias=normal(0.1) * wide(n))


def random_gemm(m, k, n, op, *, generator, operands="random"):
    """``(inputs, epilogue)`` of a GEMM of ``m x k x n``: int8 ``a`` and ``b`` (uniform, or
    every element -128 with ``operands="min"``), :func:`random_epilogue` of ``op`` (``None``:
    raw; with ``operands="edge"`` uniform operands and the epilogue's scales spread over
    :data:`EDGE_SPREAD` octaves), and for LayerNorm its residual ``r``; drawn from
    ``generator`` in that order.

    ``operands="flat"`` makes every row of the product nearly constant: the columns of ``b``
    are one random column, with about one entry in eight one more, and the scales are spread
    as for ``"edge"``; a LayerNorm has no bias and a zero residual, so its rows' variance is
    zero or a few units (the smallest ``D`` and the ends of the RSQRT table), and softmax
    rows are (nearly) uniform."""
    if operands == "min":
        a = torch.full((m, k), -128, dtype=torch.int8)
        b = torch.full((k, n), -128, dtype=torch.int8)
    else:
        a = torch.randint(-128, 128, (m, k), generator=generator, dtype=torch.int8)
        b = torch.randint(-128, 128, (k, n), generator=generator, dtype=torch.int8)
    if operands == "flat":
        column = b[:, :1].expand(k, n).to(torch.int16)
        nudge = torch.randint(0, 8, (k, n), generator=generator) == 0
        b = (column + nudge).clamp(max=127).to(torch.int8)
    inputs = {"a": a, "b": b}
    spread = EDGE_SPREAD if operands in ("edge", "flat") else 0
    epilogue = None if op is None else random_epilogue(op, k=k, n=n, generator=generator,
                                                       spread=spread)
    if op == "layernorm":
        inputs["r"] = torch.randint(-128, 128, (m, n), generator=generator, dtype=torch.int8)
        if operands == "flat":
            inputs["r"].zero_()
            epilogue = replace(epilogue, bias=None)
    return inputs, epilogue
