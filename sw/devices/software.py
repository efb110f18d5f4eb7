"""The bit-exact software device: the instruction-level model of the machine."""

import random

import numpy as np
import torch

from ...golden.kernels import F32_ROWS
from ...hw import isa
from ..cycles import CycleModel
from ..epilogue import apply_registers
from .base import Device, DeviceError

__all__ = ["SoftwareDevice"]


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

    Members
    -------
    spad_a : torch.Tensor
        ``(spad_depth, rows)`` ``torch.int8``, scratchpad A (a copy, read only).
    spad_b : torch.Tensor
        ``(spad_depth, cols)`` ``torch.int8``, scratchpad B (a copy, read only).
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
    ``gmul, gshift, omul, oshift = MUL0, SHIFT0, MUL1, SHIFT1`` (``omul`` the low 16 bits of
    MUL1, which is 32 bits for LAYERNORM's ``rmul``), ``bias``; SOFTMAX ``mul, shift =
    MUL0, SHIFT0``, ``mask = bias``, ``row_len = ROW_LEN``, beats of ``cols`` columns; LAYERNORM
    ``xmul, vshift, rmul, gshift = MUL0, SHIFT0, MUL1, SHIFT1``, ``row_len = ROW_LEN``,
    ``eps_n2 = EPS``, ``bias``, ``gamma = int16(p1)``, ``beta = int16(p2)``. The results leave
    row by row (``m`` outer, ``s`` inner), int8 values in int32 lanes; SOFTMAX and LAYERNORM give
    0 in the columns at or past ``row_len``.
    """

    _PRIORITIES = {"load-first": ("load", "exec", "store"), "store-last": ("exec", "load", "store")}

    def __init__(self, cfg, *, interleave=None, cycle_model=True):
        super().__init__(cfg)
        if not (interleave is None or interleave in self._PRIORITIES
                or (isinstance(interleave, int) and not isinstance(interleave, bool))):
            raise ValueError(f"interleave must be None, an int seed, or one of "
                             f"{', '.join(map(repr, self._PRIORITIES))}, not {interleave!r}")
        self.interleave = interleave
        self.cycle_model = bool(cycle_model)
        self._cycles = None
        self.acc = torch.zeros((cfg.acc_depth, cfg.cols), dtype=torch.int32)
        self.pmem = torch.zeros((cfg.pmem_depth, cfg.cols * 8), dtype=torch.uint8)
        self.params = dict.fromkeys(isa.Param, 0)
        # The scratchpads hold their int8 values as floats, which the MATMULs multiply without a
        # conversion per instruction: a product sums `rows` int8 products, each at most 2**14,
        # which float32 adds exactly while rows <= F32_ROWS (golden/kernels.py), float64 beyond.
        exact = torch.float32 if cfg.rows <= F32_ROWS else torch.float64
        self._spad_a = torch.zeros((cfg.spad_depth, cfg.rows), dtype=exact)
        self._spad_b = torch.zeros((cfg.spad_depth, cfg.cols), dtype=exact)

    @property
    def spad_a(self):
        return self._spad_a.to(torch.int8)

    @property
    def spad_b(self):
        return self._spad_b.to(torch.int8)

    def reset(self):
        """Clear the memories and the parameter registers to zero, as at power-up."""
        self._spad_a.zero_()
        self._spad_b.zero_()
        self.acc.zero_()
        self.pmem.zero_()
        self.params = dict.fromkeys(isa.Param, 0)

    def pmem_fields(self, rows=None):
        """The PmemWord fields of PMEM rows ``rows`` (a slice or index tensor; all by default):
        ``(bias, p1, p2)``, each ``(n_rows, cols)`` ``torch.int64``; ``bias`` signed (int32),
        ``p1`` and ``p2`` unsigned 16-bit values."""
        data = self.pmem if rows is None else self.pmem[rows]
        words = np.ascontiguousarray(data.numpy()).view("<u8").astype(np.int64)
        fields = isa.pmem_unpack(torch.from_numpy(words.reshape(data.shape[0], self.cfg.cols)))
        return fields["bias"], fields["p1"], fields["p2"]

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
        spad_a, spad_b, acc = self._spad_a, self._spad_b, self.acc
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
                product = torch.matmul(a, w).to(torch.int32)
                if instr.shift:       # modulo 2**32, as the hardware's 32-bit shift
                    product = torch.bitwise_left_shift(product, isa.MATMUL_SHIFT)
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
                self.params[instr.index] = instr.value & ((1 << isa.PARAM_WIDTHS[instr.index]) - 1)
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
        report = self._cycles.run(program)
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
        residual = None
        if instr.op == isa.EpOp.LAYERNORM:
            # Row m of strip s is spad_b[aux_addr + s*rows + m].
            index = (instr.aux_addr + torch.arange(strips).unsqueeze(0) * rows
                     + torch.arange(rows).unsqueeze(1)).reshape(-1)
            residual = self._spad_b.index_select(0, index).to(torch.int8).reshape(
                rows, strips * cols)
        try:
            y = apply_registers(instr.op, x, regs=self.params, bias=bias, p1=p1, p2=p2,
                                residual=residual, lanes=cfg.ep_lanes)
        except (ValueError, RuntimeError) as error:
            raise DeviceError(f"instruction {number} (STORE {instr.op.name}): {error}") from None
        return y.reshape(rows * strips, cols)
