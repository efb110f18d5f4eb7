"""The full 6-layer all-MiniLM-L6-v2 on the RTL (Verilator), checked bit for bit.

Compiles the model for the config (8x8 by default), embeds real sentences padded or truncated to
``--seq`` tokens (32 by default) on the software device and on the RTL device, and compares every
stage of every layer bit for bit. Prints and writes ``bench/results/minilm_rtl.json``: wall time
(compile, software device, RTL), cycles, the ideal cycles (MACs / (rows x cols)), utilization,
latency at the config's clock, simulator speed, bit-exactness, and the embedding's cosine with
FP32 PyTorch::

    python bench/minilm_rtl.py [--config 8x8] [--seq 32] [--batch 1] [--json]

The first run builds the simulator (minutes; announced with the last build's time on this
machine). Offline (``HF_HUB_OFFLINE=1``).
"""

import argparse
import json
import os
import pathlib
import platform
import sys
import time
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from bertaccel.golden import bert_ref, sentences  # noqa: E402
from bertaccel.hw.config import ConfigError, load_config  # noqa: E402
from bertaccel.sw import SoftwareDevice  # noqa: E402
from bertaccel.sw.bert import TextProgress, compile_bert, run_bert  # noqa: E402
from bertaccel.sw.devices.rtl import RtlDevice  # noqa: E402
from _record import record  # noqa: E402  (bench/ is on sys.path)

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "minilm_rtl.json"


def pick_texts(tokenizer, seq, batch):
    """The first evaluation sentence of at least ``seq`` tokens, then the next ``batch - 1``
    sentences of fewer (so a batch above 1 has padding)."""
    texts = sentences.evaluation_sentences()
    lengths = [len(tokenizer(t)["input_ids"]) for t in texts]
    first = next(i for i, n in enumerate(lengths) if n >= seq)
    rest = [t for t, n in zip(texts, lengths) if n < seq][:batch - 1]
    return [texts[first]] + rest


def measure(cfg, *, seq=32, batch=1, build_root="build/sim", progress=None, log=print):
    start = time.perf_counter()
    tokenizer, model = bert_ref.load()
    bert = compile_bert(model, cfg, tokenizer=tokenizer, name="all-MiniLM-L6-v2")
    texts = pick_texts(tokenizer, seq, batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # the first text is truncated to seq tokens
        inputs = bert.encode(texts, max_length=seq)
    compiled = time.perf_counter()
    with SoftwareDevice(cfg) as software:
        want = run_bert(software, bert, **inputs, trace=True)
    soft = time.perf_counter()
    log(f"compiled in {compiled - start:.1f} s, software device {soft - compiled:.1f} s; "
        f"running {want.stats['device_calls']} programs on the RTL")
    with RtlDevice(cfg, build_root=build_root) as rtl:
        rtl.start()                                  # the build and start-up, timed apart
        started = time.perf_counter()
        if progress is True:                         # a bar that starts with the RTL run
            progress = TextProgress()
        got = run_bert(rtl, bert, **inputs, trace=True, progress=progress)
    done = time.perf_counter()
    stages = {f"{layer}.{stage}": bool(torch.equal(got.trace[key], want.trace[key]))
              for key in want.trace for layer, stage in [key]}
    ref = bert_ref.mean_pool(bert_ref.forward(model, inputs["input_ids"],
                                              inputs["attention_mask"],
                                              inputs["token_type_ids"]),
                             inputs["attention_mask"])
    stats = got.stats
    cycles = stats["cycles"]
    return {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "config": cfg.label, "tag": cfg.tag, "clock_mhz": cfg.clock_mhz,
        "batch": stats["batch"], "seq": stats["seq"], "tokens": stats["tokens"],
        "texts": texts,
        "bit_exact": bool(torch.equal(got.hidden_int8, want.hidden_int8)
                          and all(stages.values())),
        "stages_bit_exact": stages,
        "cycles": cycles, "ideal_cycles": stats["ideal_cycles"],
        "est_cycles": stats["est_cycles"],
        "utilization": stats["utilization"],
        "model_utilization": stats["model_macs"] / (cfg.macs_per_cycle * cycles),
        "cycle_model_cycles": want.stats["cycles"],
        "latency_ms": 1e3 * stats["latency_s"],
        "macs": stats["macs"], "model_macs": stats["model_macs"],
        "device_calls": stats["device_calls"], "instructions": stats["instructions"],
        "data_beats": stats["data_beats"], "out_beats": stats["out_beats"],
        "sim_cycles_per_s": cycles / stats["sim_run_s"] if stats.get("sim_run_s") else None,
        "cosine_vs_fp32": [float(c) for c in bert_ref.cosine_similarity(got.embedding, ref)],
        "wall_s": {"compile": compiled - start, "software_device": soft - compiled,
                   "rtl_startup": started - soft, "rtl": done - started,
                   "total": done - start},
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
    parser.add_argument("--seq", type=int, default=32, help="tokens a sequence (32)")
    parser.add_argument("--batch", type=int, default=1, help="sentences (1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    parser.add_argument("--json", action="store_true", help="print the JSON")
    parser.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)
    parser.add_argument("-o", "--output", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output},
               folders={"the build folder": args.build_root})
    try:
        cfg = load_config(args.config)
    except ConfigError as error:
        parser.error(str(error))
    if not 2 <= args.seq <= 512:
        parser.error(f"--seq must be from 2 to 512, not {args.seq}")
    if not 1 <= args.batch <= 16:
        parser.error(f"--batch must be from 1 to 16, not {args.batch}")
    torch.set_num_threads(max(1, args.threads))
    log = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    report = measure(cfg, seq=args.seq, batch=args.batch, build_root=args.build_root,
                     progress=True, log=log)
    import transformers
    report["environment"] = {"python": platform.python_version(), "torch": torch.__version__,
                             "transformers": transformers.__version__,
                             "cpus": os.cpu_count(), "threads": torch.get_num_threads()}
    record(report, args.output, __file__, argv)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["bit_exact"] else 1
    wall = report["wall_s"]
    print(f"all-MiniLM-L6-v2, 6 layers, on the {report['config']} RTL ({report['tag']})")
    print(f"  batch {report['batch']} x seq {report['seq']} ({report['tokens']} tokens)")
    print(f"  cycles       {report['cycles']:,} (ideal {report['ideal_cycles']:,} for "
          f"{report['macs']:,} MACs, of which the model's {report['model_macs']:,}; tiler "
          f"estimate {report['est_cycles']:,})")
    print(f"  utilization  {100 * report['utilization']:.1f} % of the MACs run "
          f"({100 * report['model_utilization']:.1f} % counting only the model's MACs)")
    print(f"  cycle model  {report['cycle_model_cycles']:,} (the software device's)")
    print(f"  latency      {report['latency_ms']:.2f} ms at {report['clock_mhz']:g} MHz")
    print(f"  programs     {report['device_calls']} device calls, {report['instructions']:,} "
          f"instructions, {report['data_beats']:,} data beats")
    if report["sim_cycles_per_s"]:
        print(f"  sim speed    {report['sim_cycles_per_s']:,.0f} cycles/s")
    print(f"  cosine vs FP32 {', '.join(f'{c:.5f}' for c in report['cosine_vs_fp32'])}")
    print(f"  wall         {wall['total']:.0f} s (RTL {wall['rtl']:.0f} s, start-up "
          f"{wall['rtl_startup']:.0f} s, software device {wall['software_device']:.1f} s, "
          f"compile {wall['compile']:.1f} s)")
    print(f"bit-exact: {'yes' if report['bit_exact'] else 'NO'}")
    print(f"wrote {args.output}")
    return 0 if report["bit_exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
