"""Devices: the narrow protocol every backend implements, and the bit-exact software device.

A device is made for one :class:`~bertaccel.hw.config.AccelConfig` and runs compiled
:class:`~bertaccel.sw.program.Program` objects::

    with SoftwareDevice(cfg) as device:
        result = device.run(compile_gemm(cfg, m, k, n), a=a, b=b)
        c = result.outputs["c"]

:meth:`Device.run` validates the program, packs the inputs into the data stream, hands the
instruction list and the stream to the backend's :meth:`Device._execute`, and unpacks the output
stream. Backends differ only in ``_execute``.
"""

import random
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..golden import intops
from ..hw import isa
from ..hw.config import AccelConfig
from .cycles import CycleModel, rtl_chunks
from .program import PARAM_WIDTHS, OperandError, Program, to_int8
from .tiler import compile_gemm

__all__ = ["Device", "DeviceError", "RunResult", "SoftwareDevice", "gemm"]


class DeviceError(RuntimeError):
    """A device could not run a program (a stream ran short, the backend failed)."""


@dataclass
class RunResult:
    """What one :meth:`Device.run` returns.

    Members
    -------
    outputs : dict of str to torch.Tensor
        The program's outputs by name, ``torch.int32``.
    cycles : int or None
        Clock cycles the run took, where the device counts them; ``None`` where it does not.
    stats : dict
        Backend-specific counters.
    wall_s : float
        Host wall-clock seconds of the whole run, packing and unpacking included.
    """

    outputs: dict
    cycles: int | None = None
    stats: dict = field(default_factory=dict)
    wall_s: float = 0.0


class Device:
    """The device protocol: run compiled programs for one build.

    Parameters
    ----------
    cfg : AccelConfig
        The build the device implements.

    Members
    -------
    cfg : AccelConfig
        As given.

    Notes
    -----
    A subclass implements :meth:`_execute`; it may override :meth:`close`. Devices are context
    managers: ``with Device(...) as device:`` closes the device on exit.
    """

    def __init__(self, cfg):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        self.cfg = cfg

    def run(self, program, **inputs):
        """Run ``program`` on ``inputs``.

        Parameters
        ----------
        program : Program
            A program compiled for :attr:`cfg`.
        **inputs
            One int8-valued tensor per input of the program.

        Returns
        -------
        RunResult

        Raises
        ------
        ProgramError
            If the program is not valid (see :meth:`Program.validate`); nothing runs.
        OperandError
            If an input is missing, unknown or not an int8-valued tensor of its shape.
        DeviceError
            If the program was compiled for another build, or the backend fails.
        """
        start = time.perf_counter()
        if not isinstance(program, Program):
            raise TypeError(f"program must be a Program, not {type(program).__name__}")
        if program.cfg != self.cfg:
            raise DeviceError(f"the program is compiled for {program.cfg.tag}, but this device "
                              f"is {self.cfg.tag}")
        program.validate()
        data_beats = program.pack(**inputs)
        out_beats, stats = self._execute(program, data_beats)
        outputs = program.unpack(out_beats)
        stats = dict(stats)
        cycles = stats.pop("cycles", None)
        return RunResult(outputs=outputs, cycles=cycles, stats=stats,
                         wall_s=time.perf_counter() - start)

    def _execute(self, program, data_beats):
        """Run a validated program on a packed data stream.

        Parameters
        ----------
        program : Program
            Validated, for :attr:`cfg`.
        data_beats : torch.Tensor
            ``(program.n_data_beats, cfg.lanes)`` ``torch.int8``.

        Returns
        -------
        out_beats : torch.Tensor
            ``(program.n_out_beats, cfg.cols)`` ``torch.int32``, in the order they left.
        stats : dict
            Counters; a ``"cycles"`` entry becomes :attr:`RunResult.cycles`.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement _execute")

    def close(self):
        """Release the device. The base device holds nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False


class SoftwareDevice(Device):
    """The bit-exact software model of the machine.

    By default it executes the instructions one at a time in program order, which the token
    rules make equivalent to the concurrent hardware, with whole-slice tensor operations: its
    cost is a few microseconds of Python per instruction.

    Parameters
    ----------
    cfg : AccelConfig
        The build to model.
    interleave : int or str or None
        ``None`` (the default): program order. An int: a random seed; the three units then run
        in a random interleaving that respects only each unit's own order and the tokens, as the
        hardware may, so a program whose tokens miss a hazard gives wrong results (or stops with
        a :class:`DeviceError` if its tokens deadlock). ``"load-first"`` / ``"store-last"``: the
        load unit runs as far ahead as its tokens allow / the store unit as late as possible.
    cycle_model : bool
        Report the cycles the hardware takes (:class:`~bertaccel.sw.cycles.CycleModel`) as
        :attr:`RunResult.cycles`, with ``stats["cycle_breakdown"]`` (cycles by class) and
        ``stats["cycle_report"]`` (the :class:`~bertaccel.sw.cycles.CycleReport`). ``True`` by
        default; ``False`` leaves ``cycles`` ``None`` and saves the model's few microseconds per
        instruction. The cycles do not depend on ``interleave``.
    harness_depths : tuple of int, optional
        ``(instr_depth, data_depth, out_depth)``: count cycles as
        :class:`~bertaccel.sw.rtl.RtlDevice` with those harness memories does: a program that
        does not fit them runs in chunks, and the cycles are the chunks' sum. ``None`` (the
        default): the program is one run, as on the hardware.

    Members
    -------
    spad_a : torch.Tensor
        ``(spad_depth, rows)`` ``torch.int8``, scratchpad A.
    spad_b : torch.Tensor
        ``(spad_depth, cols)`` ``torch.int8``, scratchpad B.
    acc : torch.Tensor
        ``(acc_depth, cols)`` ``torch.int32``, the accumulator.
    pmem : torch.Tensor
        ``(pmem_depth, cols * 8)`` ``torch.uint8``, the epilogue parameter memory as bytes: column
        ``c`` of a row is the little-endian 64-bit :data:`~bertaccel.hw.isa.PmemWord` in bytes
        ``8c .. 8c+7`` (``bias`` in bytes 0-3, ``p1`` in 4-5, ``p2`` in 6-7).
        :meth:`pmem_fields` decodes it.
    params : dict of isa.Param to int
        The store unit's parameter registers, as the SETs left them (truncated to their widths).

    Notes
    -----
    Like the hardware, the memories and registers start at zero and keep their contents from one
    run to the next; :meth:`reset` clears them.

    A STORE with an epilogue op gathers its ``rows x strips`` accumulator rows into a
    ``(rows, strips * cols)`` matrix (strip ``s`` is columns ``s*cols ..``), takes the per-column
    parameters of strip ``s`` from PMEM row ``param_addr + s`` and, for LAYERNORM, the residual of
    row ``m`` of strip ``s`` from scratchpad-B row ``aux_addr + s*rows + m``, and applies the op of
    :mod:`bertaccel.golden.intops` with the registers: REQUANT ``mul = MUL0, shift = SHIFT0``, or
    per column ``mul = p1, shift = p2 & 63`` when ``FLAGS`` bit 0 is set, ``bias``; GELU
    ``gmul, gshift, omul, oshift = MUL0, SHIFT0, MUL1, SHIFT1``, ``bias``; SOFTMAX ``mul, shift =
    MUL0, SHIFT0``, ``mask = bias``, ``row_len = ROW_LEN``, beats of ``cols`` columns; LAYERNORM
    ``xmul, vshift, rmul, gshift = MUL0, SHIFT0, MUL1, SHIFT1``, ``row_len = ROW_LEN``,
    ``eps_n2 = EPS``, ``bias``, ``gamma = int16(p1)``, ``beta = int16(p2)``. The results leave
    row by row (``m`` outer, ``s`` inner), int8 values in int32 lanes; SOFTMAX and LAYERNORM give
    0 in the columns at or past ``row_len``.
    """

    _PRIORITIES = {"load-first": ("load", "exec", "store"), "store-last": ("exec", "load", "store")}

    def __init__(self, cfg, *, interleave=None, cycle_model=True, harness_depths=None):
        super().__init__(cfg)
        if not (interleave is None or interleave in self._PRIORITIES
                or (isinstance(interleave, int) and not isinstance(interleave, bool))):
            raise ValueError(f"interleave must be None, an int seed, or one of "
                             f"{', '.join(map(repr, self._PRIORITIES))}, not {interleave!r}")
        self.interleave = interleave
        self.cycle_model = bool(cycle_model)
        self.harness_depths = None if harness_depths is None else tuple(harness_depths)
        self._cycles = None
        self.spad_a = torch.zeros((cfg.spad_depth, cfg.rows), dtype=torch.int8)
        self.spad_b = torch.zeros((cfg.spad_depth, cfg.cols), dtype=torch.int8)
        self.acc = torch.zeros((cfg.acc_depth, cfg.cols), dtype=torch.int32)
        self.pmem = torch.zeros((cfg.pmem_depth, cfg.cols * 8), dtype=torch.uint8)
        self.params = dict.fromkeys(isa.Param, 0)

    def reset(self):
        """Clear the memories and the parameter registers to zero, as at power-up."""
        self.spad_a.zero_()
        self.spad_b.zero_()
        self.acc.zero_()
        self.pmem.zero_()
        self.params = dict.fromkeys(isa.Param, 0)

    def pmem_fields(self, rows=None):
        """The PmemWord fields of PMEM rows ``rows`` (a slice or index tensor; all by default):
        ``(bias, p1, p2)``, each ``(n_rows, cols)`` ``torch.int64``; ``bias`` signed (int32),
        ``p1`` and ``p2`` unsigned 16-bit values."""
        data = self.pmem if rows is None else self.pmem[rows]
        words = np.ascontiguousarray(data.numpy()).view("<u8").astype(np.int64)
        words = torch.from_numpy(words.reshape(data.shape[0], self.cfg.cols))
        bias = words & 0xFFFFFFFF
        bias = torch.where(bias >= 1 << 31, bias - (1 << 32), bias)
        return bias, (words >> 32) & 0xFFFF, (words >> 48) & 0xFFFF

    def _order(self, program):
        """The instructions ``(number, instr)`` in the order this device executes them."""
        if self.interleave is None:
            yield from enumerate(program.instrs)
            return
        queues = {"load": [], "exec": [], "store": []}
        for number, instr in enumerate(program.instrs):
            queues[isa.unit_of(instr)].append((number, instr))
        heads = {unit: 0 for unit in queues}
        tokens = {"l2e": 0, "e2l": 0, "e2s": 0, "s2e": 0}
        pops = {"load": (None, "e2l"), "exec": ("l2e", "s2e"), "store": ("e2s", None)}
        pushes = {"load": (None, "l2e"), "exec": ("e2l", "e2s"), "store": ("s2e", None)}
        rng = random.Random(self.interleave) if isinstance(self.interleave, int) else None
        priority = self._PRIORITIES.get(self.interleave)

        def needs(unit, instr):
            prev, nxt = pops[unit]
            return [channel for channel, flag in ((prev, instr.pop_prev), (nxt, instr.pop_next))
                    if flag]

        while True:
            ready = []
            for unit, queue in queues.items():
                if heads[unit] < len(queue):
                    instr = queue[heads[unit]][1]
                    if all(tokens[channel] for channel in needs(unit, instr)):
                        ready.append(unit)
            if not ready:
                break
            unit = rng.choice(ready) if rng else min(ready, key=priority.index)
            number, instr = queues[unit][heads[unit]]
            heads[unit] += 1
            for channel in needs(unit, instr):
                tokens[channel] -= 1
            prev, nxt = pushes[unit]
            for channel, flag in ((prev, instr.push_prev), (nxt, instr.push_next)):
                if flag:
                    tokens[channel] += 1
            yield number, instr
        stuck = {unit: queue[heads[unit]][0] for unit, queue in queues.items()
                 if heads[unit] < len(queue)}
        if stuck:
            raise DeviceError(f"the program deadlocks: the units wait at instructions "
                              f"{stuck} with tokens {tokens}")

    def _execute(self, program, data_beats):
        cfg = self.cfg
        rows, cols = cfg.rows, cfg.cols
        spad_a, spad_b, acc = self.spad_a, self.spad_b, self.acc
        if data_beats.dtype != torch.int8 or data_beats.dim() != 2 \
                or data_beats.shape[1] != cfg.lanes:
            raise DeviceError(f"data_beats must be a (beats, {cfg.lanes}) torch.int8 tensor, "
                              f"not {tuple(data_beats.shape)} {data_beats.dtype}")
        n_beats = data_beats.shape[0]
        pos = 0
        stored = []
        n_macs = 0
        for number, instr in self._order(program):
            kind = type(instr)
            if kind is isa.Matmul:
                m_len = instr.m_len
                if not m_len:
                    continue
                a = spad_a[instr.a_addr:instr.a_addr + m_len]
                w = spad_b[instr.b_addr:instr.b_addr + rows]
                product = torch._int_mm(a, w)
                target = acc[instr.acc_addr:instr.acc_addr + m_len]
                if instr.accumulate:
                    target.add_(product)  # int32 addition wraps modulo 2**32
                else:
                    target.copy_(product)
                n_macs += m_len * rows * cols
            elif kind is isa.Load:
                count = instr.count
                if pos + count > n_beats:
                    raise DeviceError(f"instruction {number} (LOAD) needs data beats "
                                      f"{pos}..{pos + count - 1}, but the stream has {n_beats}")
                beats = data_beats[pos:pos + count]
                pos += count
                if instr.target == isa.Target.SPAD_A:
                    spad_a[instr.addr:instr.addr + count] = beats[:, :rows]
                elif instr.target == isa.Target.SPAD_B:
                    spad_b[instr.addr:instr.addr + count] = beats[:, :cols]
                else:
                    self._load_pmem(number, instr, beats)
            elif kind is isa.Store:
                if instr.count:
                    # Beat (m, s) is acc[acc_addr + s*stride + m]; beats leave row by row.
                    # index_select copies: later MATMULs overwrite these accumulator rows.
                    m = torch.arange(instr.rows).unsqueeze(1)
                    s = torch.arange(instr.strips).unsqueeze(0)
                    index = (instr.acc_addr + s * instr.stride + m).reshape(-1)
                    beats = acc.index_select(0, index)
                    if instr.op != isa.EpOp.RAW:
                        beats = self._epilogue(number, instr, beats)
                    stored.append(beats)
            elif kind is isa.Set:
                # The register keeps the low bits of the value, as the hardware's does.
                self.params[instr.index] = instr.value & ((1 << PARAM_WIDTHS[instr.index]) - 1)
            else:
                raise DeviceError(f"instruction {number} is not an ISA instruction: {instr!r}")
        if pos != n_beats:
            raise DeviceError(f"the program consumed {pos} data beats, but the stream has "
                              f"{n_beats}: {n_beats - pos} left over")
        out = torch.cat(stored) if stored else torch.zeros((0, cols), dtype=torch.int32)
        stats = {"instructions": len(program.instrs), "data_beats": n_beats,
                 "out_beats": out.shape[0], "macs": n_macs}
        if self.cycle_model:
            stats.update(self._count_cycles(program))
        return out, stats

    def _count_cycles(self, program):
        """``cycles``, ``cycle_breakdown`` and ``cycle_report`` of ``program``, from the model."""
        if self._cycles is None:
            self._cycles = CycleModel(self.cfg)
        chunks = None if self.harness_depths is None else rtl_chunks(program,
                                                                     self.harness_depths)
        report = self._cycles.run(program, chunks=chunks)
        return {"cycles": report.cycles, "cycle_breakdown": dict(report.breakdown),
                "cycle_report": report}


    def _load_pmem(self, number, instr, beats):
        """LOAD into PMEM through the gearbox: ``pmem_beats_per_row`` beats make a row, the first
        beat in the lowest bits; a beat brings its low ``min(lanes, 8 * cols)`` bytes."""
        cfg = self.cfg
        per_row = cfg.pmem_beats_per_row
        if instr.count % per_row:
            raise DeviceError(f"instruction {number} (LOAD): count {instr.count} into PMEM is "
                              f"not a multiple of {per_row} beats a row")
        row_bytes = cfg.cols * 8
        beat_bytes = min(cfg.lanes, row_bytes)
        n_rows = instr.count // per_row
        data = beats[:, :beat_bytes].contiguous().view(torch.uint8)
        self.pmem[instr.addr:instr.addr + n_rows] = data.reshape(n_rows, row_bytes)

    def _epilogue(self, number, instr, beats):
        """The epilogue ``instr.op`` on a STORE's accumulator ``beats`` (row by row)."""
        cfg = self.cfg
        cols, rows, strips = cfg.cols, instr.rows, instr.strips
        x = beats.reshape(rows, strips * cols)
        bias, p1, p2 = (field.reshape(-1) for field in self.pmem_fields(
            slice(instr.param_addr, instr.param_addr + strips)))
        regs = self.params
        op = instr.op
        try:
            if op == isa.EpOp.REQUANT:
                if regs[isa.Param.FLAGS] & 1:
                    mul, shift = p1, p2 & 63
                else:
                    mul, shift = regs[isa.Param.MUL0], regs[isa.Param.SHIFT0]
                y = intops.requant(x, bias=bias, mul=mul, shift=shift)
            elif op == isa.EpOp.GELU:
                y = intops.gelu(x, bias=bias, gmul=regs[isa.Param.MUL0],
                                gshift=regs[isa.Param.SHIFT0], omul=regs[isa.Param.MUL1],
                                oshift=regs[isa.Param.SHIFT1])
            elif op == isa.EpOp.SOFTMAX:
                y = intops.softmax(x, mask=bias, mul=regs[isa.Param.MUL0],
                                   shift=regs[isa.Param.SHIFT0], cols=cfg.ep_lanes,
                                   row_len=regs[isa.Param.ROW_LEN])
            elif op == isa.EpOp.LAYERNORM:
                # Row m of strip s is spad_b[aux_addr + s*rows + m].
                index = (instr.aux_addr + torch.arange(strips).unsqueeze(0) * rows
                         + torch.arange(rows).unsqueeze(1)).reshape(-1)
                residual = self.spad_b.index_select(0, index).reshape(rows, strips * cols)
                signed = torch.where(p1 >= 1 << 15, p1 - (1 << 16), p1), \
                    torch.where(p2 >= 1 << 15, p2 - (1 << 16), p2)
                y = intops.layernorm(x, bias=bias, residual=residual,
                                     xmul=regs[isa.Param.MUL0], rmul=regs[isa.Param.MUL1],
                                     vshift=regs[isa.Param.SHIFT0], gamma=signed[0],
                                     beta=signed[1], gshift=regs[isa.Param.SHIFT1],
                                     eps_n2=regs[isa.Param.EPS], row_len=regs[isa.Param.ROW_LEN])
            else:
                raise DeviceError(f"instruction {number} (STORE): unknown epilogue {op!r}")
        except (ValueError, RuntimeError) as error:
            raise DeviceError(f"instruction {number} (STORE {op.name}): {error}") from None
        return y.reshape(rows * strips, cols)


def gemm(device, a, b, *, epilogue=None, r=None):
    """``a @ b`` on ``device``, with an optional fused epilogue: check the operands, compile with
    :func:`compile_gemm`, run.

    Parameters
    ----------
    device : Device
        The device to run on; the program is compiled for ``device.cfg``.
    a : torch.Tensor or numpy.ndarray
        ``(m, k)`` int8-valued matrix.
    b : torch.Tensor or numpy.ndarray
        ``(k, n)`` int8-valued matrix.
    epilogue : Requant or Gelu or Softmax or LayerNorm, optional
        Applied to the product on its way out (:mod:`bertaccel.sw.epilogue`).
    r : torch.Tensor or numpy.ndarray, optional
        ``(m, n)`` int8-valued residual; required by (and only by) :class:`LayerNorm`.

    Returns
    -------
    RunResult
        ``outputs["c"]`` is the ``(m, n)`` ``torch.int32`` product, or with an epilogue its
        int8 results (as int32).

    Raises
    ------
    OperandError
        If an operand is not 2-D or not int8-valued, the shapes do not chain, or the residual is
        missing, unexpected or of the wrong shape.
    ScaleError
        If an epilogue parameter cannot be represented.
    """
    shapes = {}
    operands = {}
    for name, value in (("a", a), ("b", b)):
        if not hasattr(value, "shape"):
            value = np.asarray(value)
        operands[name] = value
        shape = tuple(value.shape)
        if len(shape) != 2:
            raise OperandError(f"operand {name!r} must be a 2-D matrix, not of shape {shape}")
        shapes[name] = shape
    if shapes["a"][1] != shapes["b"][0]:
        raise OperandError(f"the shapes do not chain: a is {shapes['a']} and b is "
                           f"{shapes['b']}, but a.shape[1] must equal b.shape[0]")
    a = to_int8("a", operands["a"], shapes["a"])
    b = to_int8("b", operands["b"], shapes["b"])
    (m, k), n = shapes["a"], shapes["b"][1]
    for name, value in (("m", m), ("k", k), ("n", n)):
        if value < 1:
            raise OperandError(f"GEMM dimension {name} must be at least 1, not {value} "
                               f"(a is {shapes['a']}, b is {shapes['b']})")
    needs_r = getattr(epilogue, "op", None) == isa.EpOp.LAYERNORM
    if needs_r and r is None:
        raise OperandError(f"the {type(epilogue).__name__} epilogue needs the residual r, of "
                           f"shape {(m, n)}")
    if not needs_r and r is not None:
        raise OperandError("a residual r is only taken with the LayerNorm epilogue")
    program = compile_gemm(device.cfg, m, k, n, epilogue=epilogue)
    inputs = {"a": a, "b": b}
    if needs_r:
        inputs["r"] = to_int8("r", r if hasattr(r, "shape") else np.asarray(r), (m, n))
    return device.run(program, **inputs)
