"""The cycle model: how many clock cycles a program takes on the RTL, and where they go.

:class:`CycleModel` times a :class:`~bertaccel.sw.program.Program` the way the gateware runs it
in the simulation harness (:class:`bertaccel.hw.harness.SimHarness`) with free-running streams
(no idle cycles on the sources, no backpressure on the sink)::

    report = CycleModel(cfg).run(program)
    report.cycles                  # what SimHarness.cycles reads at ``done``
    report.breakdown               # {"compute": .., "preload": .., "load_wait": .., ...}
    report.start, report.end       # per instruction, in cycles after ``start``

:class:`CycleStepper` runs the same units on a program piece by piece and reads their state
between two pieces, normalised: what :mod:`bertaccel.sw.timing` builds its exact shortcuts on.

It works instruction by instruction, not cycle by cycle: every unit is in-order and every
constraint between units is "not before cycle X", so each time is a ``max`` of earlier times (a
max-plus recurrence evaluated in program order; a legal program never pops a token that a later
instruction in program order pushes). Each unit is a small class with a step per instruction
kind (:mod:`.units`); the token channels between them are :class:`.units.Channel`. Only the store
unit's beats need a short loop, and only where they do not flow one a cycle (see
:meth:`.units.StoreUnit._beats`): some 500 000 instructions a second.

The timing rules, with the gateware that makes them
----------------------------------------------------
Cycle 0 is the first cycle after the clock edge that samples ``start``. Every latency named
below is a field of :class:`bertaccel.hw.latencies.Latencies` (``lat``), which reads it from
the unit that has it; the model restates none.

* Harness (hw/harness.py): each source reads its file in cycle 0, so instruction word 0 (and
  data beat 0) is on offer from cycle ``lat.first_word`` (1), and the next word one cycle
  after a word is taken. ``cycles`` counts every edge while running, including the one that
  raises ``done``; ``done`` rises at the first cycle where every instruction was taken and
  ``o_busy`` is low. So a run takes ``last busy cycle + lat.done`` cycles (2).
* Dispatch (hw/controller.py): one instruction a cycle, in program order, into one queue of
  ``cfg.queue_depth`` per unit (``hw/queue.Queue``, which has the timing of
  ``amaranth.lib.fifo.SyncFIFOBuffered``). A queue shows an entry written in cycle W at its
  output in cycle W + ``lat.queue`` (2; one cycle later than the head after a pop, which is
  there the next cycle), and takes a write in cycle W only while fewer than
  ``queue_depth - 1`` entries wait behind its head: the k-th entry of a queue waits until entry
  ``k - queue_depth + 1`` has reached the head. A stalled instruction stalls every instruction
  behind it.
* Tokens (TokenChannel): a counter, so the k-th pop of a channel waits until ``lat.token`` (1)
  cycles after the k-th push. A push that would take a channel past ``isa.TOKEN_MAX`` waits
  for a pop.
* LOAD (hw/load.py): accepted in cycle a, it takes beat j in cycle ``a + 1 + j`` (the source is
  always ready) and pushes with the last one; the next LOAD is accepted in
  ``a + count + 1``. A LOAD of count 0 pushes in cycle a.
* MATMUL (hw/execute/): two stages. *Preload* accepts when it is empty (or hands over in
  that cycle) and the tokens are there. It reads ``rows`` weight rows in the ``rows`` cycles
  after the accept and may hand over to the *stream* stage in the cycle of the last read
  (``lat.preload`` cycles after the accept), when the stream stage is on its last row (or idle; the stage must be idle when the MATMUL's first
  row accumulates onto the row that last row writes). The stream stage reads one operand row a
  cycle (a MATMUL of m_len 0 takes one idle slot). Weight banks never wait to drain: the mesh
  writes each weight row right behind the last operand row that used the old one (the weight
  wave of hw/mesh.py), and a preload starts no earlier than the last operand row of the MATMUL
  two back, which used the same bank. So back-to-back MATMULs of ``m`` rows cost
  ``max(m, rows)`` cycles each in steady state. The execute->load push comes with the last row's
  issue, the execute->store push ``lat.acc_drain`` cycles later and the
  last accumulator write a cycle after that (the operand's registered read address, the
  scratchpad read and its data registers, the mesh, then the sum's write-data registers).
* STORE and SET (hw/store.py, hw/epilogue/unit.py): a STORE is accepted when the unit is idle or on
  the last read of the STORE before it (an empty STORE: idle), and reads one beat a cycle from
  the next cycle on; a read is at the head of the epilogue's beat queue
  (``lat.fifo_depth`` deep) ``lat.store_read`` cycles later and is only issued
  while the queue has room for it.
  The epilogue takes one beat a cycle from the queue, or one every ``lat.epilogue.ratio``
  cycles when it is narrower than a beat; a beat leaves on ``o_data`` ``lat.epilogue.latency``
  cycles after that. SOFTMAX and LAYERNORM read every row twice in the
  interleaved order, and the epilogue holds back a row's first second-pass beat until
  ``lat.gaps[op]`` cycles after its last first-pass beat was taken. The store->execute
  push comes with the last read. A SET waits until the store unit and the epilogue are empty.

``verif/system/test_cycles.py`` checks the whole against the Verilated RTL, and
``verif/block/test_core_cycles.py`` against the core in the Amaranth simulator (quick tier).

Where the cycles go
-------------------
The execute unit's stream stage is the machine's critical resource, so the run is cut along its
timeline. Every cycle is in exactly one class of :attr:`CycleReport.breakdown`:

``compute``
    the stream stage feeds an operand row into the mesh (one cycle per row of every MATMUL);
``zero_slots``
    the one-cycle slot of a MATMUL with ``m_len == 0`` (program barriers);
``preload``
    the stream stage waits for the weight preload of the next MATMUL (``rows`` cycles a MATMUL
    in steady state, so only MATMULs of fewer than ``rows`` rows leave bubbles);
``load_wait``
    the next MATMUL waits for a load->execute token: loads not hidden behind compute (and, after
    the last MATMUL, a load unit that finishes last);
``store_wait``
    the next MATMUL waits for a store->execute token: the store unit (and its epilogue) has not
    yet drained the accumulator half it needs;
``dispatch``
    the next MATMUL has not reached the head of its queue: dispatch is in order and stalls
    behind a full queue (and the first instruction needs a few cycles to arrive);
``acc_hazard``
    the cycle a MATMUL waits when its first row accumulates onto the row the MATMUL before it
    streamed last, in the cycle before (back-to-back MATMULs of one row into one row: the
    execute unit does not forward a sum that close);
``mesh_drain``
    after the last operand row, until the execute unit's last accumulator write;
``store_drain``
    after that, until the store unit and the epilogue are empty, plus the cycle that raises
    ``done``: the drain of the last STOREs that compute does not hide.

A gap before a MATMUL is cut in layers: first the preload it cannot avoid, then each later
constraint (dispatch, load token, store token, token room) for the cycles by which it pushes the
hand-over further out. :attr:`CycleReport.overlap` adds how much of the load unit's and the store
unit's busy time overlapped operand streaming (hidden by double buffering), and
:attr:`CycleReport.by_class` gives the same cycles by :data:`bertaccel.analysis.profile.OP_CLASSES`
when the caller labels program regions.
"""
from .model import CycleModel, CycleStepper, model_cycles
from .report import (BREAKDOWN, EPILOGUE_CLASS, OP_CLASSES, STAGE_CLASSES, TIMED_FIELDS,
                     CycleReport, timing_view)

__all__ = ["CycleModel", "CycleReport", "CycleStepper", "TIMED_FIELDS", "timing_view",
           "BREAKDOWN", "OP_CLASSES", "EPILOGUE_CLASS", "STAGE_CLASSES", "model_cycles"]
