#!/usr/bin/env python3
"""What the memory plan does: per zoo model, kiln's run latency with the plan and without it
(KILN_MEMORY_PLAN=0: every intermediate from the buffer pool), and the plan's arena against the
bytes its values take one buffer each.

For every model folder (zoo layout) it runs `kiln run --repeat RUNS` on test_data_set_0 with and
without the plan in alternating rounds, takes the median of each round's median, and reports the
ratio plan / no plan; the sizes come from the plan's debug log line (the first run's plan for
these input shapes).

    bench/memplan_bench.py [--kiln build/kiln] [--provider cpu] [--threads 1] [--rounds 7]
                           [--runs 20] [--out FILE] [MODEL_DIR ...]

Defaults: every model under ../shared/models (or $KILN_ZOO). Results go to
bench/results/memplan-<provider>-<date>.md with the machine and the command.
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
import tempfile

from benchutil import cpu_name, input_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def input_args(d):
    args = []
    for i, n in enumerate(input_names(os.path.join(d, "model.onnx")) or []):
        args += ["--input", f"{n}={os.path.join(d, 'test_data_set_0', f'input_{i}.pb')}"]
    return args


def run(a, d, plan, env_base, log=False):
    args = [a.kiln, "run", os.path.join(d, "model.onnx"), *input_args(d), "--provider", a.provider, "--threads",
            str(a.threads), "--repeat", str(a.runs)] + (["--log", "debug"] if log else [])
    env = dict(env_base, KILN_MEMORY_PLAN="1" if plan else "0")
    out = subprocess.run(args, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip() or out.stdout.strip()).splitlines()[-1])
    t = float(re.search(r"run ([0-9.]+) ms", out.stdout).group(1))
    sizes = re.search(r"memory plan \([^)]*\): (\d+) host intermediates in ([0-9.]+) MB \(([0-9.]+) MB", out.stderr)
    return t, sizes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--provider", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", default=None)
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    zoo = os.environ.get("KILN_ZOO", os.path.join(ROOT, "..", "shared", "models"))
    models = a.models or sorted(d for d in glob.glob(os.path.join(zoo, "*")) if os.path.isfile(os.path.join(d, "model.onnx")))
    env = dict(os.environ, KILN_CACHE_DIR=tempfile.mkdtemp(prefix="kiln_memplan_"), KILN_CUDA_STAND_INS="never")
    rows = []
    for d in models:
        name = os.path.basename(os.path.normpath(d))
        try:
            _, sizes = run(a, d, True, env, log=True)
            on, off = [], []
            for _ in range(a.rounds):
                on.append(run(a, d, True, env)[0])
                off.append(run(a, d, False, env)[0])
        except RuntimeError as e:
            print(f"{name}: kiln failed: {e}", file=sys.stderr)
            continue
        p, q = statistics.median(on), statistics.median(off)
        n, arena, unshared = (int(sizes.group(1)), float(sizes.group(2)), float(sizes.group(3))) if sizes else (0, 0, 0)
        rows.append((name, n, arena, unshared, p, q, p / q))
        print(f"{name:22s} plan {p:8.3f} ms  no plan {q:8.3f} ms  ratio {p / q:.3f}   {n} values: {arena:.2f} MB "
              f"instead of {unshared:.2f}", flush=True)
    geo = math.exp(sum(math.log(r[6]) for r in rows) / len(rows)) if rows else float("nan")
    print(f"geometric mean plan / no plan: {geo:.3f}")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = a.out or os.path.join(ROOT, "bench", "results", f"memplan-{a.provider}-{date}.md")
    with open(out, "w") as f:
        f.write(f"# The memory plan, provider {a.provider} ({date})\n\n")
        f.write(f"- machine: {cpu_name()}, {os.cpu_count()} cores; {a.threads} thread(s)\n")
        f.write(f"- command: `python3 bench/memplan_bench.py {' '.join(sys.argv[1:])}`\n")
        f.write(f"- {a.rounds} alternating rounds of `kiln run --repeat {a.runs}` with and without the plan "
                f"(KILN_MEMORY_PLAN=0), medians; test_data_set_0's inputs; sizes from the plan's log line\n\n")
        f.write("| model | planned values | arena MB | one buffer each MB | plan ms | no plan ms | plan / no plan |\n")
        f.write("|---|---:|---:|---:|---:|---:|---:|\n")
        for name, n, arena, unshared, p, q, r in rows:
            f.write(f"| {name} | {n} | {arena:.2f} | {unshared:.2f} | {p:.3f} | {q:.3f} | {r:.3f} |\n")
        f.write(f"\ngeometric mean plan / no plan: {geo:.3f}\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
