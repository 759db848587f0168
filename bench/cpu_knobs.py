#!/usr/bin/env python3
"""One model under several settings of kiln's measurement switches (environment variables), per output shape.

    python3 bench/cpu_knobs.py MODEL KILN_BINARY --threads T [--variant NAME=VAR=V[,VAR=V...]]... [--rounds R]

Each variant runs `kiln bench MODEL --threads T` under KILN_PROFILE with its variables set, R rounds
alternating over the variants (a shared machine drifts: alternation spreads that over all of them);
the table gives each variant's p50 (median over rounds) and, per first output shape, the sum of the
nodes' medians (median over rounds), so a switch's effect shows on the layers it touches. Symbolic
dimensions at 1. Prints a markdown table.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import tempfile

import onnx

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("kiln")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--variant", action="append", default=[], help="NAME=VAR=V[,VAR=V...] (NAME alone: no variables)")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--duration", type=float, default=1.0)
a = ap.parse_args()

variants = [("default", {})]
for v in a.variant:
    name, _, rest = v.partition("=")
    env = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    variants.append((name, env))
dims = sorted({d.dim_param for i in onnx.load(a.model, load_external_data=False).graph.input
               for d in i.type.tensor_type.shape.dim if d.dim_param})


def one(env):
    """p50 ms and {shape: ms} of one kiln bench run."""
    path = os.path.join(tempfile.mkdtemp(), "profile.json")
    cmd = [a.kiln, "bench", a.model, "--threads", str(a.threads), "--duration", str(a.duration), "--warmup", "10"]
    for d in dims:
        cmd += ["--dim", f"{d}=1"]
    r = subprocess.run(cmd, env=dict(os.environ, KILN_PROFILE=path, **env), capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"kiln bench failed ({env}): {r.stderr.strip()}")
    p50 = float(next(l for l in r.stdout.splitlines() if "p50" in l).split("p50")[1].split()[0])
    txt = open(path).read().rstrip().rstrip("]").rstrip().rstrip(",") + "]"
    per, sig = collections.defaultdict(list), {}
    for e in json.loads(txt):
        args = e.get("args", {})
        if e.get("ph") == "X" and "op" in args and not args.get("first"):
            per[e["name"]].append(e["dur"] / 1000.0)
            sig[e["name"]] = args["outputs"][0] if args.get("outputs") else "?"
    shapes = collections.defaultdict(float)
    for node, ts in per.items():
        shapes[sig[node]] += statistics.median(ts)
    return p50, shapes


res = {name: [] for name, _ in variants}
for _ in range(a.rounds):
    for name, env in variants:
        res[name].append(one(env))
names = [n for n, _ in variants]
p50 = {n: statistics.median(r[0] for r in res[n]) for n in names}
shapes = sorted({s for n in names for r in res[n] for s in r[1]},
                key=lambda s: -statistics.median(r[1].get(s, 0) for r in res["default"]))
print(f"{a.model}, {a.threads} threads, {a.rounds} alternating rounds; p50 and per output shape the sum of node medians (ms)")
print()
print("| output | " + " | ".join(names) + " |")
print("|---|" + "---:|" * len(names))
print("| **p50** | " + " | ".join(f"{p50[n]:.3f}" for n in names) + " |")
print("| p50 each round | " + " | ".join(" ".join(f"{r[0]:.3f}" for r in res[n]) for n in names) + " |")
for s in shapes:
    vals = [statistics.median(r[1].get(s, 0) for r in res[n]) for n in names]
    if vals[0] < 0.005:
        continue
    print(f"| {s} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
print()
print("variants: " + "; ".join(f"{n}: {' '.join(f'{k}={v}' for k, v in e.items()) or '-'}" for n, e in variants))
