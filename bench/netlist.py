"""The core's ECP5 netlist against its RTL: a GEMM and one all-MiniLM-L6-v2 encoder layer on
both, in the same harness, compared bit for bit and cycle for cycle (sim/netlist.py).

::

    python bench/netlist.py [--config 8x8] [--size 256] [--seq 32] [--json]

Builds the gate-level simulator (yosys ``synth_ecp5`` of the core, then Verilator: minutes on a
2x2, far longer on an 8x8; cached) and the RTL's, runs a ``size``-cubed GEMM and the first
encoder layer of MiniLM on a real sentence of ``seq`` tokens on both, and writes
``bench/results/netlist_<config>.json``: the netlist's cells, each build's seconds, the cycles,
the simulators' speeds, the machine, and whether everything is equal.
"""

import argparse
import json
import os
import pathlib
import sys
import time
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from bertaccel.golden import bert_ref, kernels, sentences  # noqa: E402
from bertaccel.hw.config import ConfigError, load_config  # noqa: E402
from bertaccel.sw import compile_gemm  # noqa: E402
from bertaccel.sw.bert import (BertError, Runner, compile_bert, layer_programs,  # noqa: E402
                               run_layer)
from bertaccel.sw.devices.rtl import RtlDevice  # noqa: E402
from _record import record  # noqa: E402  (bench/ is on sys.path)

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def _started(device, log, what):
    begin = time.perf_counter()
    log(f"building (if needed) and starting the {what} simulator")
    device.start()
    return time.perf_counter() - begin


def _gemm(devices, cfg, size):
    gen = torch.Generator().manual_seed(0)
    program = compile_gemm(cfg, size, size, size)
    a = torch.randint(-128, 128, (size, size), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (size, size), generator=gen, dtype=torch.int8)
    runs = {name: device.run(program, a=a, b=b) for name, device in devices.items()}
    net, rtl = runs["netlist"], runs["rtl"]
    return {"shape": [size] * 3, "cycles": {name: run.cycles for name, run in runs.items()},
            "bit_exact": bool(torch.equal(net.outputs["c"], rtl.outputs["c"])),
            "sim_cycles_per_s": {name: run.stats["sim_cycles_per_s"]
                                 for name, run in runs.items()}}


def _layer(devices, cfg, seq):
    tokenizer, model = bert_ref.load()
    try:
        bert = compile_bert(model, cfg, tokenizer=tokenizer, name="all-MiniLM-L6-v2")
    except BertError as error:                       # MiniLM needs a 4x4 or larger
        return {"model": "all-MiniLM-L6-v2", "refused": str(error)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")               # truncated to seq tokens, on purpose
        batch = bert.encode(sentences.evaluation_sentences(1), max_length=seq)
    mask = batch["attention_mask"].bool()
    x = bert.embed_input(batch["input_ids"], batch["token_type_ids"])
    programs = layer_programs(bert, 0, mask)
    out, cycles, wall = {}, {}, {}
    for name, device in devices.items():
        runner = Runner(device)
        begin = time.perf_counter()
        out[name] = run_layer(device, bert, 0, x, mask, programs=programs, runner=runner)
        wall[name], cycles[name] = time.perf_counter() - begin, runner.cycles
    return {"model": "all-MiniLM-L6-v2", "layer": 0, "seq": int(mask.shape[1]),
            "cycles": cycles, "bit_exact": bool(torch.equal(out["netlist"], out["rtl"])),
            "wall_s": wall}


def measure(cfg, *, size, seq, build_root, log):
    netlist = RtlDevice(cfg, build_root=build_root, netlist=True)
    rtl = RtlDevice(cfg, build_root=build_root)
    with netlist, rtl:
        start = {"netlist": _started(netlist, log, "netlist"), "rtl": _started(rtl, log, "RTL")}
        devices = {"netlist": netlist, "rtl": rtl}
        gemm = _gemm(devices, cfg, size)
        log(f"GEMM {size}^3: bit-exact {gemm['bit_exact']}, cycles {gemm['cycles']}")
        layer = _layer(devices, cfg, seq)
        log(f"MiniLM layer 1: {layer.get('refused') or layer}")
    runs = [gemm] + ([] if "refused" in layer else [layer])
    equal = all(run["bit_exact"] and len(set(run["cycles"].values())) == 1 for run in runs)
    built = {"netlist": netlist.last_build_seconds(), "rtl": rtl.last_build_seconds()}
    return {"config": cfg.label, "tag": cfg.tag, "machine": kernels.describe(),
            "build_s": built, "start_s": start, "gemm": gemm, "layer": layer, "equal": equal}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
    parser.add_argument("--size", type=int, default=256, help="the GEMM's M = K = N (256)")
    parser.add_argument("--seq", type=int, default=32, help="the layer's tokens (32)")
    parser.add_argument("--json", action="store_true", help="print the JSON")
    parser.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)
    parser.add_argument("-o", "--output", type=pathlib.Path)
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as error:
        parser.error(str(error))
    if not 1 <= args.size <= 4096 or not 2 <= args.seq <= 256:
        parser.error("--size must be from 1 to 4096 and --seq from 2 to 256")
    output = args.output or RESULTS / f"netlist_{cfg.name}.json"
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": output}, folders={"the build folder": args.build_root})
    torch.set_num_threads(1)
    log = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    report = measure(cfg, size=args.size, seq=args.seq, build_root=args.build_root, log=log)
    record(report, output, __file__, argv)
    print(json.dumps(report, indent=2) if args.json else
          f"{cfg.label} netlist == RTL: {report['equal']} ({output})")
    return 0 if report["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
