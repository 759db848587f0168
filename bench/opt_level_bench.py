#!/usr/bin/env python3
"""What the graph optimiser buys: per zoo model, kiln's latency at optimisation level 0 and 3.

For every model folder (zoo layout: model.onnx, test_data_set_0/input_I.pb) it runs
`kiln run --repeat RUNS` at level 0 and level 3 in alternating rounds (0, 3, 0, 3, ...) so both
see the same machine state, takes the median of each round's median, and reports the ratio
level 3 / level 0, with the node count of each level from `kiln inspect --opt-level N` (with
--provider, the optimiser judges fusions for those providers, as a session would on a machine
where they run) and, for a device provider, how many nodes fall back to the CPU.

    bench/opt_level_bench.py [--kiln build/kiln] [--provider cpu|cuda|cuda,cpu] [--threads N]
                             [--rounds R] [--runs N] [--note TEXT] [MODEL_DIR ...]

Defaults: every model under ../shared/models (or $KILN_ZOO), provider cpu, 1 thread, 5 rounds of
10 runs. Results go to bench/results/opt-levels-<provider>-<date>.md with the machine and command.
"""
import argparse
import datetime
import glob
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchutil import cpu_name, gpu_name, input_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEVELS = (0, 3)


def load_average():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def provider_args(provider):
    return ["--provider", provider] if provider else []


def run_round(kiln, model_dir, names, level, provider, threads, runs, env):
    args = [kiln, "run", os.path.join(model_dir, "model.onnx"), "--opt-level", str(level), "--threads", str(threads),
            "--repeat", str(runs)] + provider_args(provider)
    for i, n in enumerate(names):
        f = os.path.join(model_dir, "test_data_set_0", f"input_{i}.pb")
        if os.path.isfile(f):
            args += ["--input", f"{n}={f}"]
    out = subprocess.run(args, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[-1])
    m = re.search(r"run ([0-9.]+) ms", out.stdout)
    if not m:
        raise RuntimeError("no timing in: " + out.stdout.strip()[-200:])
    return float(m.group(1))


def node_counts(kiln, model_dir, level, provider):
    """(live nodes after optimising to `level`, nodes falling back to the CPU or None)."""
    args = [kiln, "inspect", os.path.join(model_dir, "model.onnx"), "--opt-level", str(level)] + provider_args(provider)
    out = subprocess.run(args, capture_output=True, text=True)
    m = re.search(r"^nodes per level:(.*)$", out.stdout, re.M)
    nodes = None
    if m:
        per = dict(re.findall(r"(\d+): (\d+)", m.group(1)))
        nodes = int(per.get(str(level), per.get("0", -1)))
    fb = re.search(r"^placement summary:.*fallback=(\d+)", out.stdout, re.M)
    return nodes, (int(fb.group(1)) if fb else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--provider", default="cpu", help="kiln's --provider: cpu, cuda, cuda,cpu, ...")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--note", default="", help="a line about the conditions, written into the results")
    ap.add_argument("--out", default=None, help="results file (default bench/results/opt-levels-<provider>-<date>.md)")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    zoo = os.environ.get("KILN_ZOO", os.path.join(ROOT, "..", "shared", "models"))
    models = a.models or sorted(os.path.dirname(p) for p in glob.glob(os.path.join(zoo, "*", "model.onnx")))
    if not models:
        print("opt_level_bench: no models")
        return 1
    # inspect places with the providers listed; plain cpu needs no placement
    inspect_provider = a.provider if a.provider != "cpu" else None
    cache = tempfile.mkdtemp(prefix="kiln_optbench_")
    # steady state: a warm start's first runs on CUDA use stand-in kernels while the libraries start
    env = dict(os.environ, KILN_CACHE_DIR=cache, KILN_CUDA_STAND_INS="never")
    load_before = load_average()
    rows = []
    try:
        for d in models:
            name = os.path.basename(os.path.normpath(d))
            names = input_names(os.path.join(d, "model.onnx"))
            counts = {lv: node_counts(a.kiln, d, lv, inspect_provider) for lv in LEVELS}
            times = {lv: [] for lv in LEVELS}
            err = None
            try:
                for _ in range(a.rounds):
                    for lv in LEVELS:
                        times[lv].append(run_round(a.kiln, d, names, lv, a.provider, a.threads, a.runs, env))
            except RuntimeError as e:
                err = str(e)
            med = {lv: statistics.median(times[lv]) if times[lv] else None for lv in LEVELS}
            rows.append((name, counts, med, err))
            line = "%-22s nodes %s -> %s  level0 %s ms  level3 %s ms" % (
                name, counts[0][0], counts[3][0], "%.3f" % med[0] if med[0] else "-", "%.3f" % med[3] if med[3] else "-")
            print(line + (f"  ERROR {err}" if err else ""), flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    load_after = load_average()

    ratios = [r[2][3] / r[2][0] for r in rows if r[2][0] and r[2][3]]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    date = datetime.date.today().isoformat()
    tag = re.sub(r"[^A-Za-z0-9]+", "-", a.provider.split(",")[0].split(":")[0]) or "default"
    out = a.out or os.path.join(ROOT, "bench", "results", f"opt-levels-{tag}-{date}.md")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [
        f"# Optimisation level 3 vs level 0, provider {a.provider} ({date})",
        "",
        f"- machine: {cpu_name()}, {os.cpu_count()} cores" + (f"; GPU: {gpu_name()}" if gpu_name() else ""),
        f"- kiln: {a.kiln} at commit {commit}",
        f"- command: `{shlex.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`",
        f"- {a.threads} thread(s); {a.rounds} rounds of `kiln run --repeat {a.runs}` per level, levels alternating "
        f"(0, 3, 0, 3, ...); latency = median of the rounds' medians; inputs from test_data_set_0",
        f"- load average before {load_before}, after {load_after}",
    ]
    if a.note:
        lines.append(f"- note: {a.note}")
    lines += [
        "- nodes: live nodes after optimising to the level (`kiln inspect --opt-level N"
        + (f" --provider {inspect_provider}`: fusions judged for those providers from their kernel tables; CPU "
           "fallback = nodes placed on the CPU because the first provider has no kernel for them)"
           if inspect_provider else "`)"),
        "",
        "| model | nodes L0 | nodes L3 | " + ("CPU fallback L0 / L3 | " if inspect_provider else "")
        + "L0 ms | L3 ms | L3/L0 |",
        "|---|---:|---:|" + ("---:|" if inspect_provider else "") + "---:|---:|---:|",
    ]
    for name, counts, med, err in rows:
        fb = ""
        if inspect_provider:
            fb = f"{counts[0][1] if counts[0][1] is not None else '-'} / {counts[3][1] if counts[3][1] is not None else '-'} | "
        l0 = f"{med[0]:.3f}" if med[0] else "-"
        l3 = f"{med[3]:.3f}" if med[3] else "-"
        ratio = f"{med[3] / med[0]:.3f}" if med[0] and med[3] else (f"error: {err}" if err else "-")
        lines.append(f"| {name} | {counts[0][0]} | {counts[3][0]} | {fb}{l0} | {l3} | {ratio} |")
    if geo:
        lines += ["", f"Geometric mean of L3/L0 over {len(ratios)} models: {geo:.3f} (below 1: level 3 is faster)."]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[-(len(rows) + 3):]))
    print("written to", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
