"""Mutation testing of the 2x2 core: yosys ``mutate`` mutants, each run on the RTL as a Ray task.

::

    python bench/mutation.py [--json] [--mutants 300] [--seed 1] [--workers 2] [--only 5,17]

About ``--mutants`` mutants are sampled over every module of the core (at least
``--min-per-module`` each) and applied into one Verilated harness whose ``mutsel`` input picks
one (:mod:`bertaccel.sim.mutate`); every mutant runs the fixed selection of programs, free and
stalled, and is killed, timed out or survives (:mod:`bertaccel.cluster.mutation`). Survivors
that no program can observe are listed in :data:`EQUIVALENT` with the reason; the kill rate is
(killed + timed out) / (mutants - equivalent). Writes ``bench/results/mutation.json`` (every
mutant's row, the machine); ``--only`` reruns some mutants and writes nothing.
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from bertaccel.cluster.connect import connect  # noqa: E402
from bertaccel.cluster.mutation import format_mutation, mutation_run, plan_mutants  # noqa: E402
from bertaccel.hw.config import PRESETS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "mutation.json"

#: Survivors that no program can tell apart from the design and that yosys cannot prove so
#: (their module's inputs are not free where it sits), by
#: :func:`bertaccel.cluster.mutation.mutant_id`, with the reason. A generator change renames
#: cells: a survivor whose name is not here is a test gap until examined.
EQUIVALENT = {
    # -- bits no reader takes ---------------------------------------------------------------
    "load:$77.Q[3]:cnot1^14":
        "the LOAD address's bit 3 flips only while its bit 14 is set: a LOAD the load unit "
        "runs has addr + count <= spad_depth (1,024), so bit 14 is 0 (an illegal LOAD that "
        "slips in before the fault only changes rows no later program reads unwritten)",
    "load:$79.D[15]:const1":
        "pmem_addr's bit 15 reaches only itself (+1 carries upward) and the 8-bit PMEM "
        "write address takes bits 0-7",
    "store:$218.Y[12]:const1":
        "aux_addr + 1's bit 12 goes to aux1 and aux_ptr, which only add (carries go upward) "
        "and address the 1,024-row scratchpad with bits 0-9",
    "store:$312.D[13]:cnot0^8":
        "the STORE's stride bit 13 enters only acc_ptr + stride, whose bits 0-7 alone "
        "address the 256-row accumulator",
    "store:$201.A[14]:const1":
        "acc_ptr's bit 14 enters only acc_ptr + stride (carries go upward); the accumulator "
        "address is bits 0-7",
    "execute.preload:$50.Y[12]:const1":
        "p_b_addr + 1's bit 12: p_b_addr is only incremented and read through the "
        "scratchpad's 10-bit address (hw/execute/read.py row_read)",
    "execute.stream:$44.Y[13]:inv":
        "s_a_addr + 1's bit 13: s_a_addr is only incremented and read through the "
        "scratchpad's 10-bit address",
    "bertaccel_harness.core:execute.port$6349$0[129]:cnot1^126":
        "bit 127 of the execute unit's instruction: a MATMUL's fields end at bit 73 and the "
        "preload stage reads only them and the flags",
    "bertaccel_harness.core:controller.r_data$10[124]:const1":
        "bit 122 of the execute unit's instruction, past a MATMUL's last field (bit 73)",
    "controller.exec_queue:$476.Y[12]:cnot0^16":
        "bit 74 of the MATMUL at the execute queue's head, past its last field (bit 73)",
    "controller:store_queue.port$6113$0[113]:cnot1^46":
        "param_addr's bit 15 in the store queue: it reaches only pm_ptr, which the 8-bit PMEM "
        "address reads in bits 0-7 (and a SET's entry has no field there)",
    "controller.checker:$procmux$2290.A[85]:cnot0^101":
        "bit 85 of the checker's held instruction is a STORE's dest_addr, which no rule of "
        "hw/legal.py reads (nor the SET and token state updates)",
    "controller.store_queue:$578.A[3]:cnot0^1":
        "bit 3 of count - 1 in a store-queue copy: the 3-bit count register keeps bits 0-2",
    "store.epilogue.intake.queue:$1134.Y[3]:const1":
        "bit 3 of count + 1 in an intake-queue copy: the 3-bit count register keeps bits 0-2",
    "store.epilogue.exponent:$1187.B[5]:const1":
        "ties bit 5 of the constant 63 (Mux(i_dm > 63, 63, i_dm)) to 1, which it is",
    "store.epilogue.stats:$54.B[1]:const0":
        "bit 1 of lane 1's v2, which is v * v (hw/epilogue/front.py): a square is 0 or 1 "
        "modulo 4, so bit 1 is always 0",
    "store.epilogue.intake:$351.Q[209]:cnot0^60":
        "bit 209 of the intake's stage-IN beat is its op, which no stage reads: the front "
        "takes each lane's op from s0_op and the tags from s0_ctl (Stages copy=False), and "
        "of the beat only acc, pm and res",
    "store.epilogue.exponent:$2240.A[1]:cnot1^0":
        "an OR of two terms whose second flips only while the first is 1: "
        "a | (b ^ a) is a | b",
    "store.epilogue.back:$252.A[28]:cnot0^1":
        "bit 28 of q in LayerNorm's y = q + beta reaches only y's bits 28 and up: the output "
        "takes y[8:16], and the saturation flags come from sums of q of their own",
    "store.epilogue.finalize:$1930.D[79]:cnot0^14":
        "bit 79 of the S1**2 sum, which reaches only bits 79 and up of N*S2 - S1**2: D keeps "
        "bits 0-63",
    "store.epilogue.finalize:$1874.Y[74]:inv":
        "bit 74 of the S1 * rsq sum, of which the slot's sr keeps bits 0-45",
    "store.epilogue.front:$249.Y[50]:cnot0^46":
        "bit 50 of p2lo + (p2hi << 16), of which the PSUM register b keeps bits 0-48",
    # -- an instruction queue's copy of its control registers for bits no unit reads --------
    "controller.exec_queue:$866.B[1]:const1":
        "consume pointer of the execute queue's fifth chunk (entry bits 128-129: instruction "
        "bits 126-127), which no MATMUL field reaches",
    "controller.exec_queue:$861.B[1]:inv":
        "produce_ahead of the execute queue's fifth chunk (instruction bits 126-127)",
    "controller.exec_queue:$839.Y[0]:const0":
        "the move of the execute queue's fifth chunk (instruction bits 126-127)",
    "controller.exec_queue:$793.B[0]:const0":
        "the fill target of the execute queue's fourth chunk (instruction bits 94-125, past "
        "a MATMUL's fields)",
    "controller.load_queue:$691.B[0]:const1":
        "the move of the load queue's third chunk (instruction bits 62-93, past a LOAD's "
        "last field, bit 41)",
    "controller.load_queue:$765.Y[0]:inv":
        "the room of the load queue's fourth chunk (instruction bits 94-125), past a LOAD's "
        "fields; its room drives only that chunk's memory",
    "controller.load_queue:$754.A[2]:cnot0^1":
        "the stored flag of the load queue's fourth chunk (instruction bits 94-125)",
    "controller.load_queue:$786.Y[0]:inv":
        "the fill of the load queue's fourth chunk (instruction bits 94-125)",
    "controller.load_queue:$993.Q[2]:const0":
        "the count of the load queue's fifth chunk (instruction bits 126-127)",
    "controller.load_queue:$937.Q[6]:cnot1^18":
        "a slot bit among the queue's fast bits (0-9): r_data takes those from head_bits, so "
        "the slot's copy has no reader",
    "controller.exec_queue:$935.Q[4]:cnot1^39":
        "a slot bit among the queue's fast bits (0-9), which r_data takes from head_bits",
    "controller.store_queue:$474.B[7]:inv":
        "the head multiplexer's bit 7, among the store queue's fast bits (0-12), which "
        "r_data takes from head_bits",
    "controller.load_queue:$895.A[16]:inv":
        "head_bits' bit 6 is a LOAD's pop_prev flag, which the load unit never reads (and "
        "the checker makes 0)",
    "controller.load_queue:$473.A[2]:const0":
        "bit 2 of the load queue's waiting count in its level, read only as level != 0: "
        "with 4 or more waiting the head is valid (a head is empty only with at most one "
        "entry behind it), so level stays nonzero",
    # -- token channel outputs no unit reads -------------------------------------------------
    "bertaccel_harness.core:e2s.producer__room[0]:const0":
        "execute->store room: the execute unit decides from the pop count "
        "(store_owed != popped, hw/execute/unit.py) and reads no room of that channel",
    "e2s:$procmux$53.A[0]:const0":
        "the execute->store channel's room register, which no unit reads",
    "e2s:$16.Y[1]:cnot1^5":
        "the execute->store count's bit 1, flipped while bit 5 is set: the room flags it "
        "makes are unread, and avail's count != 1 holds either way with bit 5 set",
    "l2e:$35.Q[0]:const0":
        "the load->execute channel's room2, which the load unit does not read (it pushes "
        "once per LOAD and reads room)",
    "bertaccel_harness.core:e2l.popped[6]:const0":
        "the execute->load pop count, which the execute unit does not read (it reads room "
        "and room2)",
    # -- the harness's view of o_wait -------------------------------------------------------
    "bertaccel_harness.core:$44.Y[0]:const1":
        "o_wait.room becomes o_data.valid: it differs only in a cycle in which a beat leaves, "
        "and the harness keeps o_wait of cycles without progress (the watchdog) and of the "
        "idle end of a run, when no beat is on offer; the AXI shell's status register would "
        "show it, this harness cannot",
}

#: The test gap of a survivor that is neither proved nor listed equivalent, by where it is:
#: ``(test, description)``; the first that matches the mutant's module and source wins.
GAPS = (
    (lambda module, src: ".epilogue" in module and "queue" not in src
     and "out_fifo" not in module,
     "a bit of the epilogue's arithmetic or tables that only values near a range limit "
     "reach (rounding bits of the second-pass products, LayerNorm variances D at one "
     "place of their top bit, exponentials a given distance below a row's largest, the "
     "exponent sum's top bits) and the edge, flat and step GEMMs do not hit"),
    (lambda module, src: src.startswith(("hw/queue.py", "amaranth/lib/memory.py"))
     or "queue." in module or "slot" in src,
     "a bit of a copy of an instruction queue's or the epilogue FIFO's control registers "
     "(the FIFO's far copy is read only for the credit return): a fill and drain pattern "
     "under backpressure that the stall settings do not make"),
    (lambda module, src: ".checker" in module,
     "a bit of the instruction checker's range sums, held instruction or program counter "
     "that no checker program reaches"),
    (lambda module, src: module.rsplit(".", 1)[-1] in ("l2e", "e2l", "e2s", "s2e"),
     "a token channel's room or count bit at a count no program reaches"),
    (lambda module, src: True,
     "an instruction field or control bit of a unit at a value or timing no program makes "
     "(token counts at a given value, high fields of illegal instructions)"),
)


def gap(row):
    """The test gap :data:`GAPS` names for the survivor ``row``."""
    for test, text in GAPS:
        if test(row["module"], row["src"] or ""):
            return text
    return "not examined"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--config", default="2x2", choices=sorted(PRESETS),
                        help="preset to mutate (default 2x2)")
    parser.add_argument("--mutants", type=int, default=300, metavar="N",
                        help="mutants of yosys's even sampling (default 300)")
    parser.add_argument("--min-per-module", type=int, default=3, metavar="K",
                        help="at least K mutants in every module (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="yosys's sampling seed (default 1)")
    parser.add_argument("--workers", type=int, default=None, metavar="W",
                        help="embedded Ray's CPUs (default: all); $RAY_ADDRESS joins a cluster")
    parser.add_argument("--only", default=None, metavar="I,J",
                        help="run only these mutant indices; nothing is written")
    parser.add_argument("--build-root", default=str(ROOT / "build" / "sim"),
                        help="build folder root (default build/sim)")
    args = parser.parse_args(argv)
    if args.mutants < 1 or args.min_per_module < 0:
        parser.error("--mutants must be at least 1 and --min-per-module at least 0")
    indices = None
    if args.only:
        try:
            indices = [int(word) for word in args.only.split(",")]
        except ValueError:
            parser.error(f"--only takes indices separated by commas, not {args.only!r}")

    def log(line):
        print(line, file=sys.stderr, flush=True)

    cfg = PRESETS[args.config]
    plan = plan_mutants(cfg, count=args.mutants, seed=args.seed,
                        min_per_module=args.min_per_module)
    log(f"{len(plan.mutants)} mutants of {cfg.name} in {plan.seconds:.0f} s ({plan.key})")
    if indices is not None and not set(indices) <= {m.index for m in plan.mutants}:
        parser.error(f"--only: the mutants are 1 to {len(plan.mutants)}")
    with connect(workers=args.workers) as where:
        report = mutation_run(plan, build_root=args.build_root, indices=indices,
                              equivalent=EQUIVALENT, gaps=gap, log=log)
    # A listed mutant that a program detects has a wrong reason: it is counted as detected.
    report["listed_equivalent_detected"] = [
        row["id"] for row in report["rows"]
        if row["id"] in EQUIVALENT and row["status"] in ("killed", "timed_out")]
    for name in report["listed_equivalent_detected"]:
        log(f"listed equivalent but detected (its reason is wrong): {name}")
    report["cluster"] = where
    report["workers"] = where["cpus"]
    if indices is None:
        record(report, RESULTS, __file__, argv)
    print(json.dumps(report, indent=2) if args.json else format_mutation(report))


if __name__ == "__main__":
    main()
