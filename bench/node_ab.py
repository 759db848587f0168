#!/usr/bin/env python3
"""Per-node A/B of kiln builds (or settings) on one model, at any thread count, wall clock.

Each round runs `kiln bench MODEL` once per variant (the order alternating from round to round),
under flock /tmp/kiln-bench.lock (the shared box's benchmark lock), with KILN_PROFILE=FILE.json;
per node the median of its later executions, per class (op, X and W shapes, '+res' with a
residual input) the sum over its nodes; the table is the median over rounds of each class, and of
the whole run. A variant is NAME=BUILD_DIR, optionally followed by :VAR=VALUE,... set in its
environment (one build against itself with a setting switched).

    python3 bench/node_ab.py MODEL PROVIDER THREADS ROUNDS before=build-a after=build-b[:KILN_X=0]

Used for bench/results/cpu-resnet-2t-2026-12-03.md.
"""
import collections
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import kiln_node_profile  # noqa: E402


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    model, prov, threads, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    variants, envs = [], {}
    for a in sys.argv[5:]:
        name, build = a.split("=", 1)
        if ":" in build:
            build, e = build.split(":", 1)
            envs[name] = dict(x.split("=", 1) for x in e.split(","))
        variants.append((name, build))
    acc = {n: collections.defaultdict(list) for n, _ in variants}
    runs = {n: [] for n, _ in variants}
    order = []
    for r in range(rounds):
        for name, build in (variants if r % 2 == 0 else variants[::-1]):
            per, info, run = kiln_node_profile(build, model, prov, threads, 40, env=envs.get(name), quiet=True)
            runs[name].append(statistics.median(run))
            cls = collections.defaultdict(float)
            for node, v in per.items():
                a = info[node]
                key = a["op"].split(".")[-1] + " " + " ".join(a["inputs"][:2]).replace("float", "")
                key += " +res" if len(a["inputs"]) > 3 else ""
                cls[key] += statistics.median(v)
                if key not in order:
                    order.append(key)
            for k, v in cls.items():
                acc[name][k].append(v)
    names = [n for n, _ in variants]
    print(f"{model}, {prov}, {threads} threads, {rounds} rounds; ms, median over rounds")
    print("| class | " + " | ".join(names) + f" | {names[-1]} / {names[0]} |")
    print("|---|" + "---:|" * (len(names) + 1))
    for k in sorted(order, key=lambda k: -statistics.median(acc[names[0]][k] or [0])):
        m = [statistics.median(acc[n][k]) if acc[n][k] else float("nan") for n in names]
        print(f"| {k} | " + " | ".join(f"{x:.3f}" for x in m) + f" | {m[-1] / m[0]:.3f} |")
    tot = [statistics.median(runs[n]) for n in names]
    print("| run | " + " | ".join(f"{x:.2f}" for x in tot) + f" | {tot[-1] / tot[0]:.3f} |")
    print("runs:", {n: [round(x, 2) for x in runs[n]] for n in names})


if __name__ == "__main__":
    main()
