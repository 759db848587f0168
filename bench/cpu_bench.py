#!/usr/bin/env python3
"""CPU latency: kiln against ONNX Runtime, side by side in one run.

For every model folder (zoo layout) it feeds test_data_set_0's inputs to both runtimes with the
same intra-op thread count, alternating rounds (kiln, onnxruntime, kiln, ...) so both see the same
machine state, and reports per model the median latency of each and the ratio kiln/onnxruntime,
plus the geometric mean of the ratios.

    bench/cpu_bench.py [--kiln build/kiln] [--threads N] [--rounds R] [--runs N] [MODEL_DIR ...]

Defaults: every model under ../shared/models, threads = all cores, 5 rounds of 10 runs each.
Results go to bench/results/cpu-<date>.md with the machine and the command.
"""
import argparse
import datetime
import glob
import math
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from benchutil import cpu_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kiln_round(kiln, model_dir, names, threads, runs):
    args = [kiln, "run", os.path.join(model_dir, "model.onnx"), "--threads", str(threads), "--repeat", str(runs)]
    for i, n in enumerate(names):
        args += ["--input", f"{n}={os.path.join(model_dir, 'test_data_set_0', f'input_{i}.pb')}"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or out.stdout.strip())
    m = re.search(r"run ([0-9.]+) ms", out.stdout)
    return float(m.group(1))


def ort_round(sess, feeds, runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--out", default=None)
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    models = a.models or sorted(d for d in glob.glob(os.path.join(ROOT, "..", "shared", "models", "*"))
                                if os.path.isfile(os.path.join(d, "model.onnx")))
    rows = []
    for d in models:
        name = os.path.basename(os.path.normpath(d))
        m = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False)
        inits = {i.name for i in m.graph.initializer}
        names = [i.name for i in m.graph.input if i.name not in inits]
        feeds = {}
        for i, n in enumerate(names):
            t = onnx.TensorProto()
            with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            feeds[n] = numpy_helper.to_array(t)
        so = ort.SessionOptions()
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)  # warm-up
        k_times, o_times = [], []
        try:
            for _ in range(a.rounds):
                # a pause between the runtimes: idle worker threads of the one just measured may
                # still be spinning, which slows the other one on a small machine
                time.sleep(0.3)
                k_times.append(kiln_round(a.kiln, d, names, a.threads, a.runs))
                time.sleep(0.3)
                o_times.append(ort_round(sess, feeds, a.runs))
        except RuntimeError as e:
            print(f"{name}: kiln failed: {e}", file=sys.stderr)
            rows.append((name, None, statistics.median(o_times) if o_times else None, None))
            continue
        k, o = statistics.median(k_times), statistics.median(o_times)
        rows.append((name, k, o, k / o))
        print(f"{name:24s} kiln {k:9.3f} ms   onnxruntime {o:9.3f} ms   ratio {k / o:6.2f}", flush=True)
    ratios = [r[3] for r in rows if r[3]]
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
    print(f"geometric mean ratio kiln/onnxruntime: {geo:.3f} over {len(ratios)} models")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = a.out or os.path.join(ROOT, "bench", "results", f"cpu-{date}.md")
    with open(out, "w") as f:
        f.write(f"# CPU latency, kiln vs onnxruntime {ort.__version__} ({date})\n\n")
        f.write(f"machine: {cpu_name()}, {os.cpu_count()} cores; threads {a.threads}; "
                f"{a.rounds} interleaved rounds of {a.runs} runs, medians\n\n")
        f.write(f"command: `python3 bench/cpu_bench.py {' '.join(sys.argv[1:])}`\n\n")
        f.write("| model | kiln ms | onnxruntime ms | kiln/ort |\n|---|---:|---:|---:|\n")
        for name, k, o, r in rows:
            f.write(f"| {name} | {k if k is None else f'{k:.3f}'} | {o if o is None else f'{o:.3f}'} | "
                    f"{'failed' if r is None else f'{r:.2f}'} |\n")
        f.write(f"\ngeometric mean ratio: {geo:.3f}\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
