"""The core and its UART bridge on a ULX3S board (ECP5, FTDI serial link).

::

    from amaranth_boards.ulx3s import ULX3S_85F_Platform
    ULX3S_85F_Platform().build(ULX3STop(preset("8x8")), do_program=False)   # bench/ulx3s.py
"""


from amaranth import ClockDomain, ClockSignal, Module, ResetSignal, Signal
from amaranth.lib import io, wiring

from .bridge import UartBridge

__all__ = ["ULX3STop"]


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
