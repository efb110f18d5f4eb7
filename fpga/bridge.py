"""The core on a ULX3S board, reached through a UART bridge.

The ULX3S's FTDI chip gives the host a serial port to the FPGA. :class:`UartBridge` turns that
byte stream into the core's three streams (:mod:`.ulx3s` puts it on the board)::

    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    ULX3S_85F_Platform().build(ULX3STop(preset("8x8")), do_program=False)   # bench/ulx3s.py

The protocol is a byte protocol, written once here for the gateware and for the host
(:class:`Command`, :class:`Reply`; the host side is
:class:`bertaccel.fpga.bridge_host.BridgeHost`):

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

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import enum, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..hw.core import BertAccelCore
from ..hw.isa import INSTR_WIDTH

__all__ = ["Command", "Reply", "UartRx", "UartTx", "UartBridge"]


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

        reply, reply_arg, reply_valid, reply_taken = self._parser(m, core, rx_fifo)
        self._transmitter(m, core, uart_tx, Cat(core.o_busy, core.o_error, overrun, frame_error),
                          reply, reply_arg, reply_valid, reply_taken)
        return m

    def _parser(self, m, core, rx_fifo):
        """Read commands from ``rx_fifo`` and hand their words to ``core``; return the reply
        the parser waits to send, its argument byte, its ``valid`` and the transmitter's
        ``taken``."""
        cfg = self.cfg
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
        return reply, reply_arg, reply_valid, reply_taken

    def _transmitter(self, m, core, uart_tx, status, reply, reply_arg, reply_valid, reply_taken):
        """Send whole frames through ``uart_tx``: the parser's reply (``status``: the STATUS
        reply's flags) before a result row of ``core``."""
        cfg = self.cfg
        result_bytes = cfg.cols * cfg.acc_width // 8
        frame = Signal(8 * (1 + max(result_bytes, 4)))
        left = Signal(range(2 + max(result_bytes, 4)))
        log2_depth = int(math.log2(self.rx_depth))
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
