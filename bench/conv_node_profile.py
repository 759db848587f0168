#!/usr/bin/env python3
"""A model's convolutions, node by node, kiln against ONNX Runtime's profiler (1 thread, fp32).

Runs the model in kiln with KILN_PROFILE=FILE.json (libkiln through ctypes, as op_sweep.py does, in
a child process so that the trace is complete when it exits) and in ONNX Runtime with
enable_profiling, both at 1 intra-op thread, and matches their Conv nodes by class: input
channels and plane, output channels and plane (ORT's NCHWc convolutions and kiln's fused
Conv+Add+Relu nodes both keep those; the kernel size is in kiln's weight shape, and where two
classes share the key (a 1x1 and a 3x3 with the same planes) they are summed on both sides). Per
class: the nodes per run, the median per-call time of each runtime (wall clock inside the runtime:
use a quiet machine, or read ratios only), the ratio; then the totals per run.

    python3 bench/conv_node_profile.py --build build --model /tmp/kiln-bf16-models/resnet50.onnx [--runs 40]
"""
import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import random_feeds  # noqa: E402

WARM = 5


def kiln_child(build, model_path, runs, trace):
    from op_sweep import Kiln, KilnSession
    feeds = random_feeds(onnx.load(model_path))
    os.environ["KILN_PROFILE"] = trace
    k = Kiln(os.path.abspath(os.path.join(build, "libkiln.so")))
    ks = KilnSession(k, open(model_path, "rb").read(), 1, "cpu", feeds)
    ks.bind_outputs(ks.run_alloc())
    for _ in range(WARM + runs):
        ks.run()
    ks.close()


def dims(desc):
    m = re.search(r"\[([0-9, x]*)\]", desc)
    return tuple(int(v) for v in re.split(r"[ ,x]+", m.group(1)) if v) if m else ()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", required=True)
    ap.add_argument("--runs", type=int, default=40)
    a = ap.parse_args()
    import onnxruntime as ort

    feeds = random_feeds(onnx.load(a.model))
    tmp = tempfile.mkdtemp()

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tmp, "ort")
    s = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    for _ in range(WARM + a.runs):
        s.run(None, feeds)
    ev = json.load(open(s.end_profiling()))
    ort_cls, ort_other, seen = collections.defaultdict(list), collections.defaultdict(float), collections.Counter()
    for e in ev:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        seen[e["name"]] += 1
        if seen[e["name"]] <= WARM + 1:  # the session's first run, then the warm-up
            continue
        args = e.get("args", {})
        op = args.get("op_name", "?")
        ms = e["dur"] / 1e3
        if op in ("Conv", "FusedConv"):
            x = tuple(list(args["input_type_shape"][0].values())[0])
            y = tuple(list(args["output_type_shape"][0].values())[0])
            ort_cls[(x[1], x[2], x[3], y[1], y[2], y[3])].append((e["name"], ms))
        else:
            ort_other[op] += ms / a.runs

    trace = os.path.join(tmp, "kiln.json")
    subprocess.run([sys.executable, __file__, "--kiln-child", a.build, a.model, str(a.runs), trace], check=True)
    kev = json.load(open(trace))
    kiln_cls, kiln_other, kseen, kind = collections.defaultdict(list), collections.defaultdict(float), collections.Counter(), {}
    for e in kev:
        if e.get("ph") != "X" or e.get("cat") == "run":
            continue
        args = e.get("args", {})
        op = args.get("op", "?")
        kseen[e["name"]] += 1
        if kseen[e["name"]] <= WARM + 1:
            continue
        ms = e["dur"] / 1e3
        ins = [dims(d) for d in args.get("inputs", [])]
        outs = [dims(d) for d in args.get("outputs", [])]
        if "Conv" in op and len(ins) > 1 and len(ins[0]) == 4 and len(ins[1]) == 4:
            x, w, y = ins[0], ins[1], outs[0]
            key = (x[1], x[2], x[3], y[1], y[2], y[3])
            kiln_cls[key].append((e["name"], ms))
            kind[key] = f"{w[2]}x{w[3]}" + (" +res" if len(ins) > 3 else "")
        else:
            kiln_other[op] += ms / a.runs

    print(f"model {a.model}, 1 thread, {a.runs} runs after {WARM} warm-up; ms per call (median over calls), ms per run")
    print()
    print("| conv class (in -> out) | kernel | nodes | kiln ms/call | ORT ms/call | kiln/ORT | kiln ms/run | ORT ms/run |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    tk = to = 0.0
    for key in sorted(set(kiln_cls) | set(ort_cls), key=lambda k: -sum(m for _, m in kiln_cls.get(k, [])) / a.runs):
        kl, ol = kiln_cls.get(key, []), ort_cls.get(key, [])
        kn = len({n for n, _ in kl})
        km = statistics.median(m for _, m in kl) if kl else float("nan")
        om = statistics.median(m for _, m in ol) if ol else float("nan")
        kr, orr = sum(m for _, m in kl) / a.runs, sum(m for _, m in ol) / a.runs
        tk, to = tk + kr, to + orr
        c, h, w, m, oh, ow = key
        print(f"| {c}x{h}x{w} -> {m}x{oh}x{ow} | {kind.get(key, '?')} | {kn} | {km:.3f} | {om:.3f} | {km / om:.2f} | {kr:.3f} | {orr:.3f} |")
    print(f"| all convolutions | | | | | {tk / to:.3f} | {tk:.2f} | {to:.2f} |")
    ko, oo = sum(kiln_other.values()), sum(ort_other.values())
    print(f"| everything else | | | | | {ko / oo if oo else float('nan'):.3f} | {ko:.2f} | {oo:.2f} |")
    print()
    print("kiln other: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(kiln_other.items(), key=lambda kv: -kv[1])))
    print("ORT other: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(ort_other.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--kiln-child":
        kiln_child(*sys.argv[2:4], int(sys.argv[4]), sys.argv[5])
        sys.exit(0)
    sys.exit(main())
