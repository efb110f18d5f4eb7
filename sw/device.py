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

from ..hw import isa
from ..hw.config import AccelConfig
from .program import OperandError, Program, to_int8
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

    Members
    -------
    spad_a : torch.Tensor
        ``(spad_depth, rows)`` ``torch.int8``, scratchpad A.
    spad_b : torch.Tensor
        ``(spad_depth, cols)`` ``torch.int8``, scratchpad B.
    acc : torch.Tensor
        ``(acc_depth, cols)`` ``torch.int32``, the accumulator.

    Notes
    -----
    Like the hardware, the memories start at zero and keep their contents from one run to the
    next; :meth:`reset` clears them.
    """

    _PRIORITIES = {"load-first": ("load", "exec", "store"), "store-last": ("exec", "load", "store")}

    def __init__(self, cfg, *, interleave=None):
        super().__init__(cfg)
        if not (interleave is None or interleave in self._PRIORITIES
                or (isinstance(interleave, int) and not isinstance(interleave, bool))):
            raise ValueError(f"interleave must be None, an int seed, or one of "
                             f"{', '.join(map(repr, self._PRIORITIES))}, not {interleave!r}")
        self.interleave = interleave
        self.spad_a = torch.zeros((cfg.spad_depth, cfg.rows), dtype=torch.int8)
        self.spad_b = torch.zeros((cfg.spad_depth, cfg.cols), dtype=torch.int8)
        self.acc = torch.zeros((cfg.acc_depth, cfg.cols), dtype=torch.int32)

    def reset(self):
        """Clear the scratchpads and the accumulator to zero, as at power-up."""
        self.spad_a.zero_()
        self.spad_b.zero_()
        self.acc.zero_()

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
                else:
                    spad_b[instr.addr:instr.addr + count] = beats[:, :cols]
            elif kind is isa.Store:
                if instr.count:
                    if instr.op != isa.EpOp.RAW:
                        raise DeviceError(f"instruction {number} (STORE): epilogue "
                                          f"{instr.op.name} is not implemented yet")
                    # Beat (m, s) is acc[acc_addr + s*stride + m]; beats leave row by row.
                    # index_select copies: later MATMULs overwrite these accumulator rows.
                    m = torch.arange(instr.rows).unsqueeze(1)
                    s = torch.arange(instr.strips).unsqueeze(0)
                    index = (instr.acc_addr + s * instr.stride + m).reshape(-1)
                    stored.append(acc.index_select(0, index))
            elif kind is isa.Set:
                pass  # the epilogue parameters matter only to non-RAW STOREs
            else:
                raise DeviceError(f"instruction {number} is not an ISA instruction: {instr!r}")
        if pos != n_beats:
            raise DeviceError(f"the program consumed {pos} data beats, but the stream has "
                              f"{n_beats}: {n_beats - pos} left over")
        out = torch.cat(stored) if stored else torch.zeros((0, cols), dtype=torch.int32)
        return out, {"instructions": len(program.instrs), "data_beats": n_beats,
                     "out_beats": out.shape[0], "macs": n_macs}


def gemm(device, a, b):
    """``a @ b`` on ``device``: check the operands, compile with :func:`compile_gemm`, run.

    Parameters
    ----------
    device : Device
        The device to run on; the program is compiled for ``device.cfg``.
    a : torch.Tensor or numpy.ndarray
        ``(m, k)`` int8-valued matrix.
    b : torch.Tensor or numpy.ndarray
        ``(k, n)`` int8-valued matrix.

    Returns
    -------
    RunResult
        ``outputs["c"]`` is the ``(m, n)`` ``torch.int32`` product.

    Raises
    ------
    OperandError
        If an operand is not 2-D or not int8-valued, or the shapes do not chain.
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
    program = compile_gemm(device.cfg, m, k, n)
    return device.run(program, a=a, b=b)
