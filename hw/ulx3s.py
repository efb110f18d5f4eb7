"""The core on a ULX3S board, reached through a UART bridge.

The ULX3S's FTDI chip gives the host a serial port to the FPGA. :class:`UartBridge` turns that
byte stream into the core's three streams, and :class:`ULX3STop` puts it on the board::

    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    ULX3S_85F_Platform().build(ULX3STop(preset("8x8")), do_program=False)   # bench/ulx3s.py

The protocol is a byte protocol, written once here for the gateware and for the host
(:class:`Command`, :class:`Reply`, :class:`BridgeHost`):

========================  ==========================================================================
host -> board             board -> host
========================  ==========================================================================
``INSTR`` + 16 bytes      ``INSTR_ACK`` once the instruction word (least significant byte first)
                          was accepted by the core
``DATA`` + lanes bytes    ``DATA_ACK`` once the data beat (lane 0 first) was accepted by the core
``STATUS``                ``STATUS`` + 1 byte: bit 0 busy, bit 1 error (illegal instruction),
                          bit 2 a byte was lost (receive FIFO overrun), bit 3 framing error
``INFO``                  ``INFO`` + 4 bytes: rows, cols, lanes, log2 of the receive FIFO depth
any other byte            ``BAD`` + that byte
\\-                        ``RESULT`` + cols x 4 bytes: a result row (lane 0 first, each int32
                          least significant byte first), sent as soon as the core produces it
========================  ==========================================================================

Commands are executed one at a time, in order; a command waits until the core takes its word, so
its reply also says that its bytes have left the receive FIFO. The host keeps at most the FIFO's
depth of bytes unacknowledged (the ULX3S's FTDI link has no flow control towards the host), and
sends each LOAD instruction followed by its data beats, in program order: then every word it sends
is one that a core executing the program in order will take, and since results leave unasked,
the stream cannot deadlock (this is the order :class:`BridgeHost` uses).
"""

import math

from amaranth import Cat, ClockDomain, ClockSignal, Const, Module, ResetSignal, Signal
from amaranth.lib import enum, fifo, io, stream, wiring
from amaranth.lib.wiring import In, Out

from .core import BertAccelCore
from . import isa
from .isa import INSTR_WIDTH

__all__ = [
    "Command", "Reply", "UartRx", "UartTx", "UartBridge", "ULX3STop", "BridgeHost",
    "BridgeError",
]


class Command(enum.Enum, shape=8):
    """Command bytes, host to board."""
    INSTR = 0x01
    DATA = 0x02
    STATUS = 0x03
    INFO = 0x04


class Reply(enum.Enum, shape=8):
    """Frame header bytes, board to host."""
    INSTR_ACK = 0x81
    DATA_ACK = 0x82
    STATUS = 0x83
    INFO = 0x84
    RESULT = 0x85
    BAD = 0xFF


# -- UART -----------------------------------------------------------------------------------------

class UartRx(wiring.Component):
    """An 8N1 UART receiver.

    The line is synchronised through two flip-flops, a start bit is confirmed at its middle, and
    each data bit is sampled at its middle, ``divisor`` clocks apart. A byte whose stop bit is
    low is dropped and pulses ``o_frame_error``.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit, at least 4.

    Members
    -------
    i_rx : In(1)
        The line, idle high.
    o_data : Out(stream.Signature(8))
        One beat per byte, valid for one cycle: a byte the consumer does not take is lost (and
        ``o_overrun`` pulses).
    o_frame_error, o_overrun : Out(1)
    """

    i_rx: In(1, init=1)
    o_data: Out(stream.Signature(8))
    o_frame_error: Out(1)
    o_overrun: Out(1)

    def __init__(self, divisor):
        if not isinstance(divisor, int) or divisor < 4:
            raise ValueError(f"divisor must be an integer of at least 4, not {divisor!r}")
        self._divisor = divisor
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        divisor = self._divisor
        sync = Signal(2, init=0b11)
        m.d.sync += sync.eq(Cat(self.i_rx, sync[0]))
        line = sync[1]

        timer = Signal(range(divisor))
        bits = Signal(range(10))
        shift = Signal(8)
        m.d.comb += [self.o_data.payload.eq(shift)]

        with m.FSM(name="uart_rx"):
            with m.State("Idle"):
                with m.If(~line):
                    m.d.sync += timer.eq(divisor // 2 - 1)
                    m.next = "Start"
            with m.State("Start"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Elif(line):          # a glitch, not a start bit
                    m.next = "Idle"
                with m.Else():
                    m.d.sync += [timer.eq(divisor - 1), bits.eq(0)]
                    m.next = "Data"
            with m.State("Data"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [timer.eq(divisor - 1), shift.eq(Cat(shift[1:], line)),
                                 bits.eq(bits + 1)]
                    with m.If(bits == 7):
                        m.next = "Stop"
            with m.State("Stop"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    with m.If(line):
                        m.d.comb += [self.o_data.valid.eq(1),
                                     self.o_overrun.eq(~self.o_data.ready)]
                    with m.Else():
                        m.d.comb += self.o_frame_error.eq(1)
                    m.next = "Idle"
        return m


class UartTx(wiring.Component):
    """An 8N1 UART transmitter.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit.

    Members
    -------
    i_data : In(stream.Signature(8))
        Taken when the previous byte's stop bit has been sent.
    o_tx : Out(1)
        The line, idle high.
    """

    i_data: In(stream.Signature(8))
    o_tx: Out(1, init=1)

    def __init__(self, divisor):
        if not isinstance(divisor, int) or divisor < 1:
            raise ValueError(f"divisor must be a positive integer, not {divisor!r}")
        self._divisor = divisor
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self._divisor))
        frame = Signal(10, init=0x3FF)     # stop, 8 data bits, start: sent from bit 0
        left = Signal(range(11))
        m.d.comb += self.o_tx.eq(frame[0])
        with m.If(left == 0):
            m.d.comb += self.i_data.ready.eq(1)
            with m.If(self.i_data.valid):
                m.d.sync += [frame.eq(Cat(Const(0, 1), self.i_data.payload, Const(1, 1))),
                             left.eq(10), timer.eq(self._divisor - 1)]
        with m.Elif(timer != 0):
            m.d.sync += timer.eq(timer - 1)
        with m.Else():
            m.d.sync += [frame.eq(Cat(frame[1:], Const(1, 1))), left.eq(left - 1),
                         timer.eq(self._divisor - 1)]
        return m


# -- the bridge -----------------------------------------------------------------------------------

class UartBridge(wiring.Component):
    """:class:`~bertaccel.hw.core.BertAccelCore` behind a UART (the protocol in the module
    docstring).

    Received bytes go through a FIFO (``rx_depth`` bytes, block RAM) to a command parser that
    collects a word and holds it on the core's ``i_instr`` or ``i_data`` until the core takes it,
    then queues the acknowledgement. A transmitter sends the replies, and every result row the
    core produces, as whole frames; replies go first when both wait.

    Parameters
    ----------
    cfg : AccelConfig
    divisor : int
        Clock cycles per UART bit (25 MHz / 115200 baud: 217).
    rx_depth : int
        Receive FIFO depth in bytes, a power of two of at least 32.

    Members
    -------
    rx : In(1)
        From the host (idle high).
    tx : Out(1)
        To the host.
    o_busy, o_error : Out(1)
        The core's status.
    o_overrun : Out(1)
        Sticky: a received byte was lost because the receive FIFO was full (the host sent more
        than the FIFO holds while the core stalled the parser).
    o_rx_active, o_tx_active : Out(1)
        A byte is being received, sent (for LEDs).
    """

    def __init__(self, cfg, *, divisor, rx_depth=2048):
        if not (isinstance(rx_depth, int) and rx_depth >= 32 and rx_depth & (rx_depth - 1) == 0):
            raise ValueError(f"rx_depth must be a power of two of at least 32, not {rx_depth!r}")
        self.cfg = cfg
        self.divisor = divisor
        self.rx_depth = rx_depth
        super().__init__({
            "rx": In(1, init=1),
            "tx": Out(1, init=1),
            "o_busy": Out(1),
            "o_error": Out(1),
            "o_overrun": Out(1),
            "o_rx_active": Out(1),
            "o_tx_active": Out(1),
        })

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        m.submodules.core = core = BertAccelCore(cfg)
        m.submodules.uart_rx = uart_rx = UartRx(self.divisor)
        m.submodules.uart_tx = uart_tx = UartTx(self.divisor)
        m.submodules.rx_fifo = rx_fifo = fifo.SyncFIFOBuffered(width=8, depth=self.rx_depth)

        m.d.comb += [
            uart_rx.i_rx.eq(self.rx),
            self.tx.eq(uart_tx.o_tx),
            rx_fifo.w_data.eq(uart_rx.o_data.payload),
            rx_fifo.w_en.eq(uart_rx.o_data.valid),
            uart_rx.o_data.ready.eq(rx_fifo.w_rdy),
            self.o_busy.eq(core.o_busy),
            self.o_error.eq(core.o_error),
            self.o_rx_active.eq(~self.rx),
            self.o_tx_active.eq(~uart_tx.o_tx),
        ]
        overrun = Signal()
        frame_error = Signal()
        with m.If(uart_rx.o_overrun):
            m.d.sync += overrun.eq(1)
        with m.If(uart_rx.o_frame_error):
            m.d.sync += frame_error.eq(1)
        m.d.comb += self.o_overrun.eq(overrun)

        # -- command parser: byte -> word -> core stream -> reply ---------------------------
        data_bytes = cfg.lanes * cfg.in_width // 8
        word = Signal(max(INSTR_WIDTH, cfg.lanes * cfg.in_width))
        index = Signal(range(len(word) // 8))       # the byte of `word` the next byte fills
        last = Signal.like(index)
        command = Signal(8)
        reply = Signal(Reply, init=Reply.INSTR_ACK)     # the frame the parser waits to send
        reply_arg = Signal(8)
        reply_valid = Signal()
        reply_taken = Signal()

        byte = rx_fifo.r_data
        m.d.comb += [
            core.i_instr.payload.eq(word[:INSTR_WIDTH]),
            core.i_data.payload.eq(word[:cfg.lanes * cfg.in_width]),
        ]
        with m.FSM(name="parser"):
            with m.State("Command"):
                m.d.comb += rx_fifo.r_en.eq(1)
                with m.If(rx_fifo.r_rdy):
                    m.d.sync += [command.eq(byte), index.eq(0)]
                    with m.Switch(byte):
                        with m.Case(Command.INSTR):
                            m.d.sync += last.eq(INSTR_WIDTH // 8 - 1)
                            m.next = "Collect"
                        with m.Case(Command.DATA):
                            m.d.sync += last.eq(data_bytes - 1)
                            m.next = "Collect"
                        with m.Case(Command.STATUS):
                            m.d.sync += [reply.eq(Reply.STATUS), reply_valid.eq(1)]
                            m.next = "Reply"
                        with m.Case(Command.INFO):
                            m.d.sync += [reply.eq(Reply.INFO), reply_valid.eq(1)]
                            m.next = "Reply"
                        with m.Default():
                            m.d.sync += [reply.eq(Reply.BAD), reply_arg.eq(byte),
                                         reply_valid.eq(1)]
                            m.next = "Reply"
            with m.State("Collect"):
                # Least significant byte first, each into its place in the word.
                m.d.comb += rx_fifo.r_en.eq(1)
                with m.If(rx_fifo.r_rdy):
                    m.d.sync += [word.word_select(index, 8).eq(byte), index.eq(index + 1)]
                    with m.If(index == last):
                        m.next = "Push"
            with m.State("Push"):
                with m.If(command == Command.INSTR):
                    m.d.comb += core.i_instr.valid.eq(1)
                    with m.If(core.i_instr.ready):
                        m.d.sync += [reply.eq(Reply.INSTR_ACK), reply_valid.eq(1)]
                        m.next = "Reply"
                with m.Else():
                    m.d.comb += core.i_data.valid.eq(1)
                    with m.If(core.i_data.ready):
                        m.d.sync += [reply.eq(Reply.DATA_ACK), reply_valid.eq(1)]
                        m.next = "Reply"
            with m.State("Reply"):
                with m.If(reply_taken):
                    m.d.sync += reply_valid.eq(0)
                    m.next = "Command"

        # -- transmitter: whole frames, replies first ------------------------------------------
        result_bytes = cfg.cols * cfg.acc_width // 8
        frame = Signal(8 * (1 + max(result_bytes, 4)))
        left = Signal(range(2 + max(result_bytes, 4)))
        log2_depth = int(math.log2(self.rx_depth))
        status = Cat(core.o_busy, core.o_error, overrun, frame_error)
        m.d.comb += [uart_tx.i_data.payload.eq(frame[:8]), uart_tx.i_data.valid.eq(left != 0)]
        with m.If(left != 0):
            with m.If(uart_tx.i_data.ready):
                m.d.sync += [frame.eq(frame[8:]), left.eq(left - 1)]
        with m.Elif(reply_valid):
            m.d.comb += reply_taken.eq(1)
            with m.Switch(reply):
                with m.Case(Reply.STATUS):
                    m.d.sync += [frame.eq(Cat(Const(Reply.STATUS.value, 8), status)), left.eq(2)]
                with m.Case(Reply.INFO):
                    m.d.sync += [frame.eq(Cat(Const(Reply.INFO.value, 8), Const(cfg.rows, 8),
                                              Const(cfg.cols, 8), Const(cfg.lanes, 8),
                                              Const(log2_depth, 8))),
                                 left.eq(5)]
                with m.Case(Reply.BAD):
                    m.d.sync += [frame.eq(Cat(Const(Reply.BAD.value, 8), reply_arg)), left.eq(2)]
                with m.Default():
                    m.d.sync += [frame.eq(reply), left.eq(1)]
        with m.Elif(core.o_data.valid):
            m.d.comb += core.o_data.ready.eq(1)
            m.d.sync += [frame.eq(Cat(Const(Reply.RESULT.value, 8), core.o_data.payload)),
                         left.eq(1 + result_bytes)]
        return m


class ULX3STop(wiring.Component):
    """The UART bridge on a ULX3S board (any of its FPGAs), at the board's 25 MHz clock.

    The FTDI serial port carries the protocol (``baud``, 8N1). LEDs 0-4 show busy, error,
    receive and transmit activity (stretched so they are visible) and a receive overrun; LED 7
    blinks at about 1.5 Hz to show the design runs.

    Parameters
    ----------
    cfg : AccelConfig
    baud : int
    rx_depth : int
        See :class:`UartBridge`.
    """

    def __init__(self, cfg, *, baud=115200, rx_depth=2048):
        self.cfg = cfg
        self.baud = baud
        self.rx_depth = rx_depth
        super().__init__({})

    #: Board-clock cycles the power-on reset holds the ``sync`` domain in reset.
    POWER_ON_RESET_CYCLES = 15

    def elaborate(self, platform):
        m = Module()
        # The sync domain, with a reset. amaranth-boards' default domain for the board is
        # reset-less (the FPGA's global set/reset initialises every register at start-up), and
        # yosys 0.70's abc9 fails an assertion on this design when its domain is reset-less
        # (docs/fpga.md), which left only the classic LUT mapper, whose netlists routed badly.
        # A counter in a reset-less domain, which starts at zero, holds the reset for the first
        # cycles of the board clock.
        m.submodules.clk_buf = clk_buf = io.Buffer(
            "i", platform.request(platform.default_clk, dir="-"))
        m.domains.por = ClockDomain("por", reset_less=True)
        m.domains.sync = ClockDomain("sync")
        por_count = Signal(range(self.POWER_ON_RESET_CYCLES + 1))
        with m.If(por_count != self.POWER_ON_RESET_CYCLES):
            m.d.por += por_count.eq(por_count + 1)
        m.d.comb += [
            ClockSignal("por").eq(clk_buf.i),
            ClockSignal("sync").eq(clk_buf.i),
            ResetSignal("sync").eq(por_count != self.POWER_ON_RESET_CYCLES),
        ]
        clk_hz = platform.default_clk_frequency
        divisor = round(clk_hz / self.baud)
        if abs(clk_hz / divisor - self.baud) > 0.02 * self.baud:
            raise ValueError(f"{self.baud} baud is not within 2 % of {clk_hz / 1e6:g} MHz / "
                             f"{divisor}")
        m.submodules.bridge = bridge = UartBridge(self.cfg, divisor=divisor,
                                                  rx_depth=self.rx_depth)
        uart = platform.request("uart", 0)
        m.d.comb += [bridge.rx.eq(uart.rx.i), uart.tx.o.eq(bridge.tx)]

        leds = [platform.request("led", i) for i in range(8)]
        activity = []
        for name, source in (("rx", bridge.o_rx_active), ("tx", bridge.o_tx_active)):
            # ~40 ms at 25 MHz: every byte lights its LED visibly.
            count = Signal(20, name=f"{name}_led_count")
            with m.If(source):
                m.d.sync += count.eq(-1)
            with m.Elif(count != 0):
                m.d.sync += count.eq(count - 1)
            activity.append(count != 0)
        heartbeat = Signal(24)
        m.d.sync += heartbeat.eq(heartbeat + 1)
        m.d.comb += [
            leds[0].o.eq(bridge.o_busy),
            leds[1].o.eq(bridge.o_error),
            leds[2].o.eq(activity[0]),
            leds[3].o.eq(activity[1]),
            leds[4].o.eq(bridge.o_overrun),
            leds[7].o.eq(heartbeat[-1]),
        ]
        return m


# -- the host side --------------------------------------------------------------------------------

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
