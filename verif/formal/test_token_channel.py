"""Formal proof of :class:`~bertaccel.hw.controller.TokenChannel`.

The units keep the channel's rules (a push only with ``room``, a pop only with ``avail``:
assumed here, and kept by each unit's accept logic); under them, with any pushes, pops and
resets in any cycles, the proof shows that credits are conserved (the count is the pushes less
the pops, held in a model beside it), never above ``TOKEN_MAX``; that a pop never passes a
push (``avail`` exactly when a pushed token is not yet popped, from the cycle after its push);
that ``room`` and ``room2`` say one and two more tokens fit; and that ``popped`` counts the
pops. k-induction, with the channel's own invariants (``hw/controller.py``, under ``FORMAL``).
"""

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover

from bertaccel.hw.controller import TokenChannel
from bertaccel.hw.formal import FORMAL
from bertaccel.hw.isa import TOKEN_MAX, TOKEN_WIDTH

from verif.tb.formal import check


class TokenChannelProperties(Elaboratable):
    def __init__(self):
        self.channel = TokenChannel()

    def elaborate(self, platform):
        m = Module()
        m.submodules.channel = channel = self.channel
        push, pop = AnySeq(1), AnySeq(1)
        m.d.comb += [channel.producer.push.eq(push), channel.consumer.pop.eq(pop),
                     Assume(~push | channel.producer.room),
                     Assume(~pop | channel.consumer.avail)]
        tokens = Signal(range(TOKEN_MAX + 1))
        pops = Signal(TOKEN_WIDTH)
        m.d.sync += [tokens.eq(tokens + push - pop), pops.eq(pops + pop)]
        m.d.comb += [
            Assert(channel.count == tokens),
            Assert(channel.consumer.avail == (tokens != 0)),
            Assert(channel.producer.room == (tokens < TOKEN_MAX)),
            Assert(channel.producer.room2 == (tokens < TOKEN_MAX - 1)),
            Assert(channel.producer.popped == pops),
            Cover(push & pop), Cover(pop & (tokens == 1)), Cover(tokens == 3),
        ]
        return m


def test_token_channel_conserves_credits(tmp_path):
    result = check(TokenChannelProperties(), name="token_channel", workdir=tmp_path, depth=3,
                   cover=6, platform=FORMAL)
    assert result.proven and result.covered, result.summary
