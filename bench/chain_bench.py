#!/usr/bin/env python3
"""What fusing chains of elementwise operators buys (kiln.FusedElementwise, pass fuse_elementwise).

Builds a few elementwise chains as they come out of exporters (activations without a fused form,
decomposed per-channel affine transforms, ...) over one large activation tensor, and times in one
run, side by side: kiln at level 0 (one kernel per operator), kiln at level 3 (the chain as one
kernel), and ONNX Runtime at ORT_ENABLE_ALL on the CPU. Each kiln level runs as `kiln run --repeat
RUNS` in alternating rounds; ONNX Runtime runs RUNS times per round in this process; latency is
the median of the rounds' medians. The floor is the memory traffic of the fused form (each full
input read once, the output written once) at the copy bandwidth given with --bandwidth (GB/s).

    bench/chain_bench.py [--kiln build/kiln] [--provider cpu|cuda] [--threads N] [--shape 4,64,56,56]
                         [--rounds R] [--runs N] [--bandwidth GBs] [--note TEXT] [--out FILE]

Results go to bench/results/chains-<provider>-<date>.md unless --out says otherwise.
"""
import argparse
import datetime
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def const(name, value, shape=None):
    arr = np.asarray(value, dtype=np.float32)
    if shape is not None:
        arr = arr.reshape(shape)
    return numpy_helper.from_array(arr, name)


def chains(channels):
    """(name, what it is, nodes, initializers, full-size inputs besides x)."""
    rng = np.random.default_rng(7)
    per_c = lambda name: const(name, rng.uniform(0.5, 1.5, channels), (channels, 1, 1))
    n = helper.make_node
    return [
        ("mish", "x * tanh(softplus(x)) (opset 17 has no Mish kernel in many runtimes' fusions)",
         [n("Softplus", ["x"], ["s"]), n("Tanh", ["s"], ["t"]), n("Mul", ["x", "t"], ["y"])], [], []),
        ("swish_beta", "x * sigmoid(1.702 x) (the sigmoid-GELU approximation)",
         [n("Mul", ["x", "k"], ["a"]), n("Sigmoid", ["a"], ["s"]), n("Mul", ["x", "s"], ["y"])],
         [const("k", 1.702)], []),
        ("hardswish_decomposed", "x * clip(x + 3, 0, 6) / 6",
         [n("Add", ["x", "three"], ["a"]), n("Clip", ["a", "zero", "six"], ["c"]), n("Mul", ["x", "c"], ["m"]),
          n("Div", ["m", "six"], ["y"])],
         [const("three", 3.0), const("zero", 0.0), const("six", 6.0)], []),
        ("channel_affine_relu", "relu((x - mean[C,1,1]) * inv_std[C,1,1] * gamma[C,1,1] + beta[C,1,1])",
         [n("Sub", ["x", "mean"], ["a"]), n("Mul", ["a", "inv_std"], ["b"]), n("Mul", ["b", "gamma"], ["c"]),
          n("Add", ["c", "beta"], ["d"]), n("Relu", ["d"], ["y"])],
         [per_c("mean"), per_c("inv_std"), per_c("gamma"), per_c("beta")], []),
        ("residual_scale_gelu", "gelu_tanh(x + 0.5 r) with r a second full-size input, tanh form written out",
         [n("Mul", ["r", "half"], ["rh"]), n("Add", ["x", "rh"], ["v"]), n("Mul", ["v", "v"], ["v2"]),
          n("Mul", ["v2", "v"], ["v3"]), n("Mul", ["v3", "c1"], ["a"]), n("Add", ["v", "a"], ["b"]),
          n("Mul", ["b", "c2"], ["u"]), n("Tanh", ["u"], ["t"]), n("Add", ["t", "one"], ["p"]),
          n("Mul", ["v", "p"], ["q"]), n("Mul", ["q", "half"], ["y"])],
         [const("half", 0.5), const("one", 1.0), const("c1", 0.0441), const("c2", 0.7978845608)], ["r"]),
    ]


def build(path, nodes, inits, extra, shape):
    inputs = [helper.make_tensor_value_info(v, TensorProto.FLOAT, shape) for v in ["x"] + extra]
    g = helper.make_graph(nodes, "chain", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                          inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def kiln_round(kiln, model, feeds, level, provider, threads, runs):
    args = [kiln, "run", model, "--opt-level", str(level), "--threads", str(threads), "--repeat", str(runs),
            "--provider", provider]
    for name, f in feeds.items():
        args += ["--input", f"{name}={f}"]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip() or out.stdout.strip()).splitlines()[-1])
    m = re.search(r"run ([0-9.]+) ms", out.stdout)
    if not m:
        raise RuntimeError("no timing in: " + out.stdout.strip()[-200:])
    return float(m.group(1))


def kiln_nodes(kiln, model, level, provider):
    out = subprocess.run([kiln, "inspect", model, "--opt-level", str(level), "--provider", provider],
                         capture_output=True, text=True).stdout
    m = re.search(r"^nodes per level:(.*)$", out, re.M)
    per = dict(re.findall(r"(\d+): (\d+)", m.group(1))) if m else {}
    return int(per.get(str(level), -1))


def ort_session(model, threads):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def ort_round(sess, arrays, runs):
    sess.run(None, arrays)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, arrays)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--provider", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shape", default="4,64,56,56")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--bandwidth", type=float, default=0.0, help="copy bandwidth in GB/s for the floor (0: none)")
    ap.add_argument("--note", default="")
    ap.add_argument("--out")
    a = ap.parse_args()
    shape = [int(s) for s in a.shape.split(",")]
    elems = int(np.prod(shape))
    rng = np.random.default_rng(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, what, nodes, inits, extra in chains(shape[1]):
            model = os.path.join(tmp, name + ".onnx")
            build(model, nodes, inits, extra, shape)
            arrays, feeds = {}, {}
            for v in ["x"] + extra:
                arrays[v] = rng.standard_normal(shape).astype(np.float32)
                feeds[v] = os.path.join(tmp, f"{name}_{v}.npy")
                np.save(feeds[v], arrays[v])
            times = {0: [], 3: [], "ort": []}
            sess = ort_session(model, a.threads) if a.provider == "cpu" else None
            for _ in range(a.rounds):
                for lv in (0, 3):
                    times[lv].append(kiln_round(a.kiln, model, feeds, lv, a.provider, a.threads, a.runs))
                if sess is not None:
                    times["ort"].append(ort_round(sess, arrays, a.runs))
            med = {k: statistics.median(v) if v else None for k, v in times.items()}
            moved = (1 + len(extra) + 1) * elems * 4  # full-size inputs read once, the output written once
            floor = moved / (a.bandwidth * 1e9) * 1e3 if a.bandwidth else None
            rows.append((name, what, len(nodes), kiln_nodes(a.kiln, model, 3, a.provider), moved, floor, med))
            print(f"{name}: L0 {med[0]:.3f} ms, L3 {med[3]:.3f} ms" +
                  (f", ORT {med['ort']:.3f} ms" if med["ort"] else ""), flush=True)

    date = datetime.date.today().isoformat()
    out = a.out or os.path.join(ROOT, "bench", "results", f"chains-{a.provider}-{date}.md")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.processor())
    lines = [f"# Elementwise chains: kiln level 0 vs level 3 vs ONNX Runtime ({a.provider}, {date})", "",
             f"- machine: {cpu}, {os.cpu_count()} cores",
             f"- kiln: {os.path.relpath(a.kiln, ROOT)} at commit {commit}; ONNX Runtime "
             f"{__import__('onnxruntime').__version__ if rows and rows[0][6]['ort'] else '(not run)'}",
             f"- command: `{' '.join(shlex.quote(x) for x in [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`",
             f"- shape {shape} float32 ({elems * 4 / 1e6:.1f} MB a tensor), {a.threads} thread(s); {a.rounds} rounds "
             f"of {a.runs} runs each, kiln levels alternating; latency = median of the rounds' medians",
             "- moved: bytes the fused form must read and write (each full-size input once, the output once)"]
    if a.note:
        lines.append(f"- note: {a.note}")
    lines += ["", "| chain | nodes L0 | nodes L3 | moved MB | floor ms | kiln L0 ms | kiln L3 ms | L3/L0 | ORT ms | kiln L3/ORT |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, what, n0, n3, moved, floor, med in rows:
        ort = med["ort"]
        lines.append(f"| {name} | {n0} | {n3} | {moved / 1e6:.1f} | {f'{floor:.3f}' if floor else '-'} | "
                     f"{med[0]:.3f} | {med[3]:.3f} | {med[3] / med[0]:.2f} | {f'{ort:.3f}' if ort else '-'} | "
                     f"{f'{med[3] / ort:.2f}' if ort else '-'} |")
    lines += ["", "What each chain is:", ""] + [f"- {name}: {what}" for name, what, *_ in rows]
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
