"""The device protocol: what every backend implements, and what a run returns.

A device is made for one :class:`~bertaccel.hw.config.AccelConfig` and runs compiled
:class:`~bertaccel.sw.program.Program` objects::

    with SoftwareDevice(cfg) as device:
        result = device.run(compile_gemm(cfg, m, k, n), a=a, b=b)
        c = result.outputs["c"]

:meth:`Device.run` validates the program, packs the inputs into the data stream, hands the
instruction list and the stream to the backend's :meth:`Device._execute`, and unpacks the output
stream. Backends differ only in ``_execute``. :meth:`Device.execute` runs a program on a packed
stream without validating it, as the hardware would: an illegal program ends in
:class:`IllegalProgram`, which names the instruction and the rule of :mod:`bertaccel.hw.legal`
it breaks, the same on every backend.
"""

import time
from dataclasses import dataclass, field

from ...hw import legal
from ...hw.config import AccelConfig
from ..illegal import explain
from ..program import Program

__all__ = ["Device", "DeviceError", "IllegalProgram", "RunResult", "start_announced"]


class DeviceError(RuntimeError):
    """A device could not run a program (a stream ran short, the backend failed)."""


class IllegalProgram(DeviceError):
    """An instruction broke a rule of :mod:`bertaccel.hw.legal`; nothing from it on ran.

    Members
    -------
    fault : bertaccel.hw.legal.Fault
    index : int
        The instruction's index in the program.
    cycles : int or None
        Clock cycles the faulted run took until the core was idle, where the device counts
        them.
    """

    def __init__(self, program, fault, index, *, where=None, cycles=None):
        words = program.words()
        instr = program.instrs[index] if index < len(program.instrs) else None
        state = legal.state_at(words, index) if instr is not None else None
        text = explain(program.cfg, fault, index, instr, state)
        super().__init__(f"{where}: {text}" if where else text)
        self.fault, self.index, self.cycles = fault, index, cycles


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

    #: Whether the backend's hardware checks each instruction itself; where it does not,
    #: :meth:`execute` checks the program with :func:`bertaccel.hw.legal.first_fault`.
    checks_instructions = False

    def execute(self, program, data_beats):
        """Run ``program`` on the packed ``data_beats`` without :meth:`Program.validate`, as
        the hardware would: the instruction-level interface, for programs that may be illegal.

        Returns
        -------
        out_beats, stats
            As :meth:`_execute` returns them.

        Raises
        ------
        IllegalProgram
            Naming the first instruction that breaks a rule of :mod:`bertaccel.hw.legal` (the
            same one on every backend).
        DeviceError
            If the stream does not fit the program, or the backend fails.
        """
        if not isinstance(program, Program):
            raise TypeError(f"program must be a Program, not {type(program).__name__}")
        if not self.checks_instructions:
            fault, index, _ = legal.first_fault(self.cfg, program.words())
            if fault is not legal.Fault.NONE:
                raise IllegalProgram(program, fault, index)
        return self._execute(program, data_beats)

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


def start_announced(device, log=None):
    """Start ``device`` now if it starts at all (the RTL device builds its simulator on first
    use: minutes, then cached), ``log(text)`` announcing the build before it begins, with how
    long the last build of it took on this machine (``device.last_build_seconds()``), and saying
    after it how long it took; return the device."""
    start = getattr(device, "start", None)
    if start is None:
        return device
    if log:
        seconds = getattr(device, "last_build_seconds", lambda: None)()
        measured = ("not built on this machine before: minutes, timed" if seconds is None
                    else f"its last build here took {seconds:.0f} s")
        log(f"building the RTL simulator for {device.cfg.label} unless it is built ({measured}; "
            f"cached after) and starting it")
    start()
    build = getattr(device, "build", None)
    if log and build is not None:
        log(f"the RTL simulator was built in {build.seconds:.0f} s" if build.rebuilt
            else f"the RTL simulator was found built in {build.build_dir}")
    return device
