"""The units of the cycle model: the token channels, the load, execute and store units, and
the ledger they write, each a step per instruction kind (see :mod:`bertaccel.sw.cycles`)."""

from operator import itemgetter

from ...hw import isa
from .report import BREAKDOWN, EPILOGUE_CLASS

__all__ = ["FAR_PAST", "WHEN", "Channel", "Ledger", "LoadUnit", "ExecuteUnit", "StoreUnit"]

#: A cycle before any run: "no constraint".
FAR_PAST = -(1 << 40)


class Channel:
    """One token channel (hw/controller.py ``TokenChannel``) as the model sees it: the cycle
    from which each push is counted, the instruction that made it, and the cycle of each pop.
    The k-th pop takes the k-th push; the k-th push needs room, which pop ``k - TOKEN_MAX``
    makes."""

    __slots__ = ("name", "delay", "visible", "producer", "pops")

    def __init__(self, name, delay):
        self.name, self.delay = name, delay
        self.visible = []
        self.producer = []
        self.pops = []

    def next_token(self, number, instr):
        """``(cycle, producer)`` of the push that the next pop takes: the pop waits until that
        cycle. :class:`~bertaccel.sw.program.ProgramError` if no earlier instruction pushed
        it."""
        j = len(self.pops)
        if j >= len(self.visible):
            raise _illegal(number, instr, self.name, "pops")
        return self.visible[j], self.producer[j]

    def room(self, number, instr):
        """The first cycle in which the next push finds room (``FAR_PAST`` while the channel
        holds fewer than ``isa.TOKEN_MAX``): the cycle after pop ``j - TOKEN_MAX``."""
        k = len(self.visible) - isa.TOKEN_MAX
        if k < 0:
            return FAR_PAST
        if k >= len(self.pops):
            raise _illegal(number, instr, self.name, "pushes past isa.TOKEN_MAX into")
        return self.pops[k] + self.delay

    def pop(self, cycle):
        self.pops.append(cycle)

    def push(self, cycle, number):
        """Instruction ``number`` pushes in ``cycle``."""
        self.visible.append(cycle + self.delay)
        self.producer.append(number)

    def snapshot(self, floor):
        """What later instructions can still see, in cycles after ``floor`` (see
        :meth:`CycleStepper.state`): the pending pushes, and the pops later than ``floor`` of
        those that the room of a later push reads (the last ``TOKEN_MAX`` but the pending)."""
        pops, visible = self.pops, self.visible
        j = len(pops)
        pending = tuple(t - floor if t > floor else 0 for t in visible[j:])
        lowest = max(len(visible) - isa.TOKEN_MAX, 0)
        while j > lowest and pops[j - 1] > floor:     # pops never go back in time
            j -= 1
        return pending, tuple(t - floor for t in pops[j:])

    def resume(self, state, floor):
        """Take the state :meth:`snapshot` gave, shifted to ``floor``: ``TOKEN_MAX`` pops
        ending with the recent ones (the others are no later than ``floor``), then the
        pending pushes, so that the next pop and the room of every later push read what they
        read before."""
        pending, recent = state
        keep = isa.TOKEN_MAX
        self.pops = [floor] * (keep - len(recent)) + [floor + t for t in recent]
        self.visible = [floor] * keep + [floor + t for t in pending]
        self.producer = [-1] * len(self.visible)


def _illegal(number, instr, channel, what):
    from ..program import ProgramError
    return ProgramError(f"instruction {number} ({instr.opcode.name}) {what} channel {channel}, "
                        f"which no earlier instruction makes possible: the program is not legal "
                        f"(see Program.validate)")


class Ledger:
    """What a run records: per instruction (lists indexed by instruction number), the cycles by
    class, the stalls, the counts and the nonlinear STOREs, in program order."""

    __slots__ = ("dispatch", "start", "end", "stream", "charged", "totals", "stalls", "counts",
                 "nonlinear")

    def __init__(self, n):
        self.dispatch = [0] * n
        self.start = [0] * n
        self.end = [0] * n
        self.stream = [-1] * n
        self.charged = [0] * n
        self.totals = dict.fromkeys(BREAKDOWN, 0)
        self.stalls = {"dispatch_blocked": 0, "load_on_e2l": 0, "store_on_e2s": 0,
                       "exec_on_l2e": 0, "exec_on_s2e": 0, "set_on_drain": 0}
        self.counts = {"instructions": n, "matmul_rows": 0, "load_beats": 0, "store_reads": 0,
                       "epilogue_beats": 0}
        self.nonlinear = []


#: The sort key of (cycle, ...) tuples.
WHEN = itemgetter(0)


class _Unit:
    """What the three units share: the ledger's lists and dicts (held directly: the steps are
    the model's hot path, so they also write ``if a > b: b = a`` rather than max()), and, for
    the harness run in progress, ``end`` (the unit's last busy cycle) and ``last`` (the
    instruction that had it); for the whole program, the busy intervals ``busy_lo`` and
    ``busy_hi`` (inclusive)."""

    __slots__ = ("starts", "ends", "charged", "totals", "stalls", "counts", "end", "last",
                 "busy_lo", "busy_hi")

    def __init__(self, ledger):
        self.starts, self.ends, self.charged = ledger.start, ledger.end, ledger.charged
        self.totals, self.stalls, self.counts = ledger.totals, ledger.stalls, ledger.counts
        self.busy_lo, self.busy_hi = [], []

    def begin(self, origin):
        """Start a harness run in cycle ``origin``: the unit is empty."""
        self.end = origin - 1
        self.last = -1

    def snapshot(self, floor):
        """The cycles that decide later instructions' times, after ``floor``, clamped at 0
        (see :meth:`CycleStepper.state`)."""
        return tuple(t - floor if t > floor else 0 for t in self._cycles())

    def resume(self, state, floor):
        """Take the state :meth:`snapshot` gave, shifted to ``floor``."""
        self._set_cycles([floor + t for t in state])
        self.last = -1
        self.busy_lo.clear()
        self.busy_hi.clear()

    def _accept(self, i, ins, t, source, pop, sink, push, stall):
        """The accept of instruction ``i``, no earlier than ``t``: after the token it pops from
        ``source`` (the wait counted as ``stall``) and once its push into ``sink`` has room;
        makes the pop."""
        if pop:
            at, _ = source.next_token(i, ins)
            if at > t:
                self.stalls[stall] += at - t
                t = at
        if push:
            room = sink.room(i, ins)
            if room > t:
                t = room
        if pop:
            source.pop(t)
        return t


class LoadUnit(_Unit):
    """The load unit (hw/load.py): one beat a cycle after the accept, the push with the last."""

    __slots__ = ("e2l", "l2e", "free")

    def __init__(self, ledger, channels):
        super().__init__(ledger)
        self.e2l, self.l2e = channels["e2l"], channels["l2e"]

    def begin(self, origin):
        super().begin(origin)
        self.free = origin

    def _cycles(self):
        return self.free, self.end

    def _set_cycles(self, cycles):
        self.free, self.end = cycles

    def step(self, i, ins, avail):
        """Run LOAD ``i``, at the head of its queue from cycle ``avail``; return its accept."""
        a = avail if avail > self.free else self.free
        push = ins.push_next
        a = self._accept(i, ins, a, self.e2l, ins.pop_next, self.l2e, push, "load_on_e2l")
        count = ins.count
        last = a + count
        if push:
            self.l2e.push(last, i)
        self.free = last + 1
        self.starts[i] = a
        self.ends[i] = last
        if count:
            self.busy_lo.append(a + 1)
            self.busy_hi.append(last)
            self.counts["load_beats"] += count
        if last > self.end:
            self.end = last
        self.last = i
        return a


class ExecuteUnit(_Unit):
    """The execute unit (hw/execute/): the preload stage, then the stream stage, whose
    timeline :attr:`CycleReport.breakdown` cuts. ``last`` is also the last MATMUL."""

    __slots__ = ("streams", "l2e", "e2l", "e2s", "s2e", "queue", "preload", "lat_acc", "acc_mask",
                 "p_free", "s_end", "s_last_row", "rows", "slots")

    def __init__(self, ledger, channels, cfg, lat):
        super().__init__(ledger)
        self.streams = ledger.stream
        self.l2e, self.e2l = channels["l2e"], channels["e2l"]
        self.e2s, self.s2e = channels["e2s"], channels["s2e"]
        self.queue, self.preload, self.lat_acc = lat.queue, lat.preload, lat.acc_drain
        self.acc_mask = (1 << cfg.acc_addr_width) - 1
        # Operand rows streamed and zero-length slots, over the program: the ledger's
        # "compute", "matmul_rows" and "zero_slots" (see close()).
        self.rows = self.slots = 0

    def close(self):
        """Enter the rows and slots counted in the ledger, after the last run."""
        self.totals["compute"] += self.rows
        self.totals["zero_slots"] += self.slots
        self.counts["matmul_rows"] += self.rows

    def begin(self, origin):
        super().begin(origin)
        self.p_free = origin             # the preload stage may accept from here
        self.s_end = origin - 1          # last stream cycle so far
        self.s_last_row = -1             # the accumulator row it wrote (-1: none)

    def _cycles(self):
        return self.p_free, self.s_end, self.end

    def _set_cycles(self, cycles):
        self.p_free, self.s_end, self.end = cycles

    def snapshot(self, floor):
        # A later MATMUL hands over no earlier than floor + queue + preload; only a
        # hand-over in cycle s_end reads the row that the last one wrote (acc_hazard).
        close = self.s_end >= floor + self.queue + self.preload
        return super().snapshot(floor) + (self.s_last_row if close else -1,)

    def resume(self, state, floor):
        super().resume(state[:-1], floor)
        self.s_last_row = state[-1]

    def step(self, i, ins, avail):
        """Run MATMUL ``i``, at the head of its queue from cycle ``avail``; return its accept."""
        p_free = self.p_free
        t = avail if avail > p_free else p_free
        l2e_at = s2e_at = FAR_PAST
        l2e_by = s2e_by = -1
        pop_prev, pop_next = ins.pop_prev, ins.pop_next
        if pop_prev:
            l2e_at, l2e_by = self.l2e.next_token(i, ins)
            if l2e_at > t:
                t = l2e_at
        if pop_next:
            s2e_at, s2e_by = self.s2e.next_token(i, ins)
            if s2e_at > t:
                t = s2e_at
        if pop_prev:
            self.l2e.pop(t)
            if l2e_at >= t and l2e_at > s2e_at:
                self.stalls["exec_on_l2e"] += l2e_at - max(avail, p_free, s2e_at)
        if pop_next:
            self.s2e.pop(t)
            if s2e_at >= t and s2e_at > l2e_at:
                self.stalls["exec_on_s2e"] += s2e_at - max(avail, p_free, l2e_at)
        # The hand-over to the stream stage: after the preload, after the last stream cycle,
        # and once the pushes find room.
        h = t + self.preload
        s_end = self.s_end
        if s_end > h:
            h = s_end
        push_prev, push_next = ins.push_prev, ins.push_next
        room_at = FAR_PAST
        if push_prev:
            room_at = self.e2l.room(i, ins)
        if push_next:
            room = self.e2s.room(i, ins)
            if room > room_at:
                room_at = room
        if room_at > h:
            h = room_at
        if h > s_end:
            self._charge_gap(i, h, avail, l2e_at, l2e_by, s2e_at, s2e_by, room_at)
        m_len = ins.m_len
        acc_mask = self.acc_mask
        # The hand-over waits a cycle rather than stream a row right behind the row it
        # accumulates onto (hw/execute/ `clash`); then there was no gap.
        if (h == s_end and m_len > 0 and ins.accumulate
                and ins.acc_addr & acc_mask == self.s_last_row):
            self.totals["acc_hazard"] += 1
            self.charged[i] += 1
            h += 1
        if m_len > 0:
            length = m_len
            self.rows += length
        else:
            length = 1
            self.slots += 1
        e = h + length
        self.charged[i] += length
        self.starts[i] = t
        self.streams[i] = h + 1
        self.p_free = h
        self.s_end = e
        self.s_last_row = (ins.acc_addr + m_len - 1) & acc_mask if m_len > 0 else -1
        lat_acc = self.lat_acc
        if push_prev:
            self.e2l.push(e, i)
        if push_next:
            self.e2s.push(e + lat_acc, i)
        busy = e + lat_acc if (m_len > 0 or push_next) else e
        self.ends[i] = busy
        if busy > self.end:
            self.end = busy
        self.last = i
        if m_len > 0:
            self.busy_lo.append(h + 1)
            self.busy_hi.append(e)
        return t

    def _charge_gap(self, i, h, avail, l2e_at, l2e_by, s2e_at, s2e_by, room_at):
        """Cut the gap before MATMUL ``i``'s hand-over in cycle ``h`` into layers: first the
        preload it cannot avoid, then each later constraint for the cycles by which it pushes
        the hand-over further out."""
        totals, charged = self.totals, self.charged
        preload = self.preload
        cursor = self.s_end
        base = self.p_free + preload
        if base > cursor:
            step = min(base, h) - cursor
            totals["preload"] += step
            charged[i] += step
            cursor += step
        layers = [(avail + preload, "dispatch", i),
                  (l2e_at + preload, "load_wait", l2e_by),
                  (s2e_at + preload, "store_wait", s2e_by),
                  (room_at, "store_wait", i)]
        layers.sort(key=WHEN)
        for when, what, who in layers:
            if when > cursor:
                step = min(when, h) - cursor
                totals[what] += step
                charged[who if who >= 0 else i] += step
                cursor += step
        if cursor < h:                   # not reached: cannot happen; keep the sum exact
            totals["preload"] += h - cursor
            charged[i] += h - cursor


class StoreUnit(_Unit):
    """The store unit and the epilogue (hw/store.py, hw/epilogue/unit.py): STOREs and SETs."""

    __slots__ = ("nonlinear", "e2s", "s2e", "ratio", "read", "fifo_depth", "ep_latency", "gaps",
                 "free", "idle", "quiet", "beats")

    def __init__(self, ledger, channels, lat):
        super().__init__(ledger)
        self.nonlinear = ledger.nonlinear
        self.e2s, self.s2e = channels["e2s"], channels["s2e"]
        self.ratio, self.ep_latency = lat.epilogue.ratio, lat.epilogue.latency
        self.read, self.fifo_depth, self.gaps = lat.store_read, lat.fifo_depth, lat.gaps

    def begin(self, origin):
        super().begin(origin)
        self.free = origin               # a nonempty STORE may be accepted from here
        self.idle = origin               # an empty STORE from here
        self.quiet = origin              # a SET from here (unit and epilogue empty)
        # The reads (shared by every STORE): the last read issued, and the cycles the
        # epilogue took the last FIFO_DEPTH beats, oldest first.
        self.beats = [origin - 1, [FAR_PAST] * self.fifo_depth]

    def _cycles(self):
        return (self.free, self.idle, self.quiet, self.end, self.beats[0], *self.beats[1])

    def _set_cycles(self, cycles):
        self.free, self.idle, self.quiet, self.end, last_issue = cycles[:5]
        self.beats = [last_issue, list(cycles[5:])]

    def store(self, i, ins, avail):
        """Run STORE ``i``, at the head of its queue from cycle ``avail``; return its accept."""
        n_rows, strips = ins.rows, ins.strips
        nonempty = n_rows > 0 and strips > 0
        push = ins.push_prev
        t = avail
        free = self.free if nonempty else self.idle
        if free > t:
            t = free
        t = self._accept(i, ins, t, self.e2s, ins.pop_prev, self.s2e, push, "store_on_e2s")
        self.starts[i] = t
        op = ins.op
        nonlinear = op in EPILOGUE_CLASS
        if nonlinear:
            self.nonlinear.append(i)
        if nonempty:
            two_pass = isa.is_two_pass(op)
            first_issue, last_issue, last_accept = self._reads(
                t + 1, n_rows, strips, two_pass, self.gaps.get(op, 1))
            beats = (2 if two_pass else 1) * n_rows * strips
            self.counts["store_reads"] += beats
            if nonlinear:
                self.counts["epilogue_beats"] += beats
            busy = last_accept + self.ep_latency
            self.free = last_issue
            self.idle = last_issue + 1
            if busy + 1 > self.quiet:
                self.quiet = busy + 1
            push_at = last_issue
            self.busy_lo.append(first_issue)
            self.busy_hi.append(last_issue)
        else:
            busy = t
            push_at = t
        if push:
            self.s2e.push(push_at, i)
        self.ends[i] = busy
        if busy > self.end:
            self.end = busy
            self.last = i
        return t

    def set(self, i, ins, avail):
        """Run SET ``i``: once the unit and the epilogue are empty. Returns its accept."""
        t = avail
        if self.quiet > t:
            self.stalls["set_on_drain"] += self.quiet - t
            t = self.quiet
        if self.idle > t:
            t = self.idle
        self.starts[i] = self.ends[i] = t
        if t > self.end:
            self.end = t
            self.last = i
        return t

    def _reads(self, issue_min, n_rows, strips, two_pass, gap):
        """Issue the reads of one STORE and let the epilogue take them; returns
        ``(first_issue, last_issue, last_accept)``."""
        run = self._beats
        if not two_pass:
            return run(n_rows * strips, issue_min, FAR_PAST)
        if n_rows >= 2 and (strips + 1) * self.ratio >= gap:
            # In the interleaved order a row's second pass starts at least strips + 1 beats
            # after its first pass ended, and beats are taken no faster than one every ep_ratio
            # cycles: the statistics are always ready, so the reads flow like a single-pass
            # STORE's.
            return run(2 * n_rows * strips, issue_min, FAR_PAST)
        # P1(0), [P1(r), P2(r-1)] for r in 1..R-1, P2(R-1): each row pass is a run of strips
        # beats; a second pass waits for its row's statistics.
        p1_end = [0] * n_rows
        first_issue, _, p1_end[0] = run(strips, issue_min, FAR_PAST)
        for r in range(1, n_rows):
            _, _, p1_end[r] = run(strips, FAR_PAST, FAR_PAST)
            run(strips, FAR_PAST, p1_end[r - 1] + gap)
        _, last_issue, last_accept = run(strips, FAR_PAST, p1_end[n_rows - 1] + gap)
        return first_issue, last_issue, last_accept

    def _beats(self, count, issue_min, accept_min):
        """``count`` beats through the beat queue into the epilogue: the first read no earlier
        than ``issue_min``, the first accept no earlier than ``accept_min``. Returns
        ``(first_issue, last_issue, last_accept)`` and advances :attr:`beats`.

        A read issues one cycle after the one before, and only while fewer than ``FIFO_DEPTH``
        beats are read but not yet taken; the epilogue takes a beat ``store_read``
        cycles after its read at the earliest and ``ep_ratio`` cycles after the one before.
        Once the last ``FIFO_DEPTH`` accepts are that far apart and the reads wait for room
        (or, at one beat a cycle, keep pace), both advance ``ep_ratio`` a beat, so the rest is
        jumped over.
        """
        state = self.beats
        last_issue, acc = state
        depth = len(acc)
        ratio, read = self.ratio, self.read
        first_issue = None
        done = 0
        while done < count:
            issue = last_issue + 1
            if acc[0] + 1 > issue:
                issue = acc[0] + 1
            accept = issue + read
            if acc[-1] + ratio > accept:
                accept = acc[-1] + ratio
            if done == 0:
                if issue < issue_min:
                    issue = issue_min
                    if issue + read > accept:
                        accept = issue + read
                if accept < accept_min:
                    accept = accept_min
                first_issue = issue
            acc = acc[1:] + [accept]
            last_issue = issue
            done += 1
            if ratio == 1:
                lag = accept - issue
                steady = acc[-1] - acc[0] == depth - 1 and read <= lag <= depth - 1
            else:
                # The next read waits for room (acc[0] >= issue), the next accept for the one
                # before (not for its read): from here every beat is ratio cycles after the last.
                steady = (acc[-1] - acc[0] == (depth - 1) * ratio and acc[0] >= issue
                          and acc[-1] + ratio >= acc[0] + 1 + read)
            if steady:
                left = count - done
                if left and ratio == 1:
                    last_issue += left
                elif left:
                    # beat t after this one is read a cycle after the accept depth beats
                    # before it
                    last_issue = acc[left - 1] + 1 if left <= depth else \
                        acc[-1] + (left - depth) * ratio + 1
                if left:
                    acc = [x + left * ratio for x in acc]
                break
        state[0], state[1] = last_issue, acc
        return first_issue, last_issue, acc[-1]
