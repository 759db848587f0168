#!/usr/bin/env python3
"""CUDA run latency with and without CUDA graphs, per zoo model, in one run.

For every model folder (zoo layout) it runs `kiln run MODEL --provider cuda:graphs=G --repeat N`
with test_data_set_0's inputs, alternating rounds (graphs=0, graphs=1, graphs=0, ...) so both see
the same machine state, and reports per model the median run latency of each, the ratio
off/on (the speed-up graphs give), and whether the session was captured (from the info log).
`kiln run` times kiln_session_run alone: host inputs in, host outputs out, as a user calls it.

    bench/cuda_run_bench.py [--kiln build/kiln] [--rounds R] [--runs N] [--precision P] [MODEL_DIR ...]

Defaults: every model under ../shared/models, 3 rounds of 50 runs, precision fp32.
Results go to bench/results/cuda-graphs-<date>.md with the device and the command.
Needs a CUDA device; uses the onnx package only to read input names.
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

from benchutil import gpu_name, input_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def kiln_round(kiln, model_dir, names, graphs, precision, runs):
    provider = f"cuda:graphs={graphs}:precision={precision}"
    args = [kiln, "run", os.path.join(model_dir, "model.onnx"), "--provider", provider, "--repeat", str(runs),
            "--log", "info"]
    for i, n in enumerate(names or []):
        path = os.path.join(model_dir, "test_data_set_0", f"input_{i}.pb")
        if os.path.isfile(path):
            args += ["--input", f"{n}={path}"]
    # steady state: a warm start's first runs use stand-in kernels while the libraries start
    env = dict(os.environ, KILN_CACHE_DIR=os.environ.get("KILN_CACHE_DIR", "/tmp/kiln-bench-cache"),
               KILN_CUDA_STAND_INS="never")
    out = subprocess.run(args, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.stdout.strip())
    m = re.search(r"run ([0-9.]+) ms", out.stdout)
    why = None
    for line in out.stderr.splitlines():
        if "not captured" in line:
            why = line.strip()
    return float(m.group(1)), why


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--out", default=None)
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    models = a.models or sorted(d for d in glob.glob(os.path.join(ROOT, "..", "shared", "models", "*"))
                                if os.path.isfile(os.path.join(d, "model.onnx")))
    rows = []
    for d in models:
        name = os.path.basename(os.path.normpath(d))
        names = input_names(os.path.join(d, "model.onnx"))
        off, on, why = [], [], None
        try:
            for _ in range(a.rounds):
                off.append(kiln_round(a.kiln, d, names, 0, a.precision, a.runs)[0])
                t, w = kiln_round(a.kiln, d, names, 1, a.precision, a.runs)
                on.append(t)
                why = why or w
        except RuntimeError as e:
            print(f"{name}: kiln failed: {e}", file=sys.stderr)
            rows.append((name, None, None, None, str(e)))
            continue
        o, g = statistics.median(off), statistics.median(on)
        rows.append((name, o, g, o / g, why))
        note = f"   ({why})" if why else ""
        print(f"{name:24s} graphs off {o:9.3f} ms   on {g:9.3f} ms   speed-up {o / g:5.2f}{note}", flush=True)
    ratios = [r[3] for r in rows if r[3]]
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
    print(f"geometric mean speed-up of graphs: {geo:.3f} over {len(ratios)} models")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = a.out or os.path.join(ROOT, "bench", "results", f"cuda-graphs-{date}.md")
    with open(out, "w") as f:
        f.write(f"# CUDA run latency with and without CUDA graphs ({date})\n\n")
        f.write(f"device: {gpu_name() or 'unknown GPU'}; precision {a.precision}; {a.rounds} interleaved rounds of {a.runs} runs "
                f"of `kiln run` (host inputs and outputs), medians\n\n")
        f.write(f"command: `python3 bench/cuda_run_bench.py {' '.join(sys.argv[1:])}`\n\n")
        f.write("| model | graphs=0 ms | graphs=1 ms | speed-up | note |\n|---|---:|---:|---:|---|\n")
        for name, o, g, r, why in rows:
            f.write(f"| {name} | {'-' if o is None else f'{o:.3f}'} | {'-' if g is None else f'{g:.3f}'} | "
                    f"{'failed' if r is None else f'{r:.2f}'} | {why or ''} |\n")
        f.write(f"\ngeometric mean speed-up: {geo:.3f}\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
