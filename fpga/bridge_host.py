"""The host side of the ULX3S UART bridge's byte protocol (:mod:`bertaccel.fpga.bridge`)."""

from ..hw import isa
from ..hw.isa import INSTR_WIDTH
from .bridge import Command, Reply

__all__ = ["BridgeHost", "BridgeError"]


class BridgeError(RuntimeError):
    """The board sent something the protocol does not allow."""


class BridgeHost:
    """The host side of the protocol, without I/O: it says what to send and digests what comes
    back, so a serial port, a simulation or a test can drive it the same way.

    ::

        host = BridgeHost(cfg, rx_depth)          # rx_depth from the INFO reply
        host.queue_program(program.words(), program.instrs, data_beats)
        while not host.finished(program.n_out_beats):
            port.write(host.sendable())
            host.receive(port.read(port.in_waiting or 1))
        out_beats = host.result_tensor()

    Parameters
    ----------
    cfg : AccelConfig
    rx_depth : int
        The board's receive FIFO depth: at most this many bytes are ever unacknowledged.

    Members
    -------
    results : list of list of int
        Result rows received, each ``cols`` int32 values.
    statuses : list of int
        STATUS bytes received.
    info : tuple of int or None
        ``(rows, cols, lanes, log2 rx_depth)`` from the last INFO reply.
    """

    def __init__(self, cfg, rx_depth):
        self.cfg = cfg
        self.rx_depth = rx_depth
        self.results = []
        self.statuses = []
        self.info = None
        self._queue = []           # commands not yet sent, each (bytes, reply it expects)
        self._unacked = []         # sent, awaiting their reply: byte counts
        self._buffer = bytearray()

    # -- what to send ---------------------------------------------------------------------------

    def instr(self, word):
        """Queue one instruction word (an int of :data:`~bertaccel.hw.isa.INSTR_WIDTH` bits)."""
        self._queue.append(bytes([Command.INSTR.value]) + int(word).to_bytes(INSTR_WIDTH // 8,
                                                                          "little"))

    def data(self, beat):
        """Queue one data beat: ``cfg.lanes`` int8 values."""
        if len(beat) != self.cfg.lanes:
            raise ValueError(f"a data beat has {self.cfg.lanes} lanes, not {len(beat)}")
        self._queue.append(bytes([Command.DATA.value]) + bytes(int(v) & 0xFF for v in beat))

    def status(self):
        """Queue a STATUS request."""
        self._queue.append(bytes([Command.STATUS.value]))

    def request_info(self):
        """Queue an INFO request."""
        self._queue.append(bytes([Command.INFO.value]))

    def queue_program(self, words, instrs, data_beats):
        """Queue a program: each instruction, and after each LOAD its data beats, in program
        order (the order that cannot deadlock; see the module docstring).

        Parameters
        ----------
        words : sequence of int
            The encoded instructions (``Program.words()``).
        instrs : sequence
            The instruction objects (``Program.instrs``), for the LOAD counts.
        data_beats : sequence of sequence of int
            ``(n_data_beats, lanes)`` int8 values (``Program.pack(...)``).
        """
        beats = iter(data_beats)
        for word, instr in zip(words, instrs):
            self.instr(word)
            for _ in range(instr.count if isinstance(instr, isa.Load) else 0):
                self.data([int(v) for v in next(beats)])
        if next(beats, None) is not None:
            raise ValueError("more data beats than the program's LOADs take")

    def sendable(self):
        """The bytes that may be sent now without overrunning the board's receive FIFO."""
        out = bytearray()
        in_flight = sum(self._unacked)
        while self._queue and in_flight + len(self._queue[0]) <= self.rx_depth:
            command = self._queue.pop(0)
            out += command
            in_flight += len(command)
            self._unacked.append(len(command))
        return bytes(out)

    @property
    def pending(self):
        """Commands queued or sent but not yet answered."""
        return len(self._queue) + len(self._unacked)

    # -- what comes back ------------------------------------------------------------------------

    def _frame_length(self, header):
        cols = self.cfg.cols
        return {Reply.INSTR_ACK.value: 1, Reply.DATA_ACK.value: 1, Reply.STATUS.value: 2,
                Reply.INFO.value: 5, Reply.RESULT.value: 1 + 4 * cols, Reply.BAD.value: 2,
                }.get(header)

    def receive(self, data):
        """Digest bytes from the board; return the number of complete frames they finished."""
        self._buffer += data
        frames = 0
        while self._buffer:
            length = self._frame_length(self._buffer[0])
            if length is None:
                raise BridgeError(f"unexpected byte {self._buffer[0]:#04x} from the board")
            if len(self._buffer) < length:
                break
            frame, self._buffer = bytes(self._buffer[:length]), self._buffer[length:]
            frames += 1
            header = Reply(frame[0])
            if header == Reply.RESULT:
                self.results.append([int.from_bytes(frame[1 + 4 * j:5 + 4 * j], "little",
                                                    signed=True)
                                     for j in range(self.cfg.cols)])
                continue
            if not self._unacked:
                raise BridgeError(f"a {header.name} reply with no command outstanding")
            self._unacked.pop(0)
            if header == Reply.STATUS:
                self.statuses.append(frame[1])
            elif header == Reply.INFO:
                self.info = tuple(frame[1:5])
            elif header == Reply.BAD:
                raise BridgeError(f"the board did not understand command byte {frame[1]:#04x}")
        return frames

    def finished(self, n_results):
        """Every command answered and ``n_results`` result rows received."""
        return not self.pending and len(self.results) >= n_results
