#!/usr/bin/env python3
"""Attention on the CPU, kiln against onnxruntime, side by side.

For each shape (batch, heads, sequence, head size) it builds two one-node models, an ai.onnx
Attention (opset 23, 4-D Q/K/V) and a com.microsoft MultiHeadAttention (3-D Q/K/V), and times
both with kiln (`kiln run --repeat`, median of the runs inside one process) and with onnxruntime
(CPUExecutionProvider, same thread count, median of session.run, in a process of its own too),
interleaved over --rounds rounds so both see the same machine state. Prints per model the medians and the ratio
kiln/onnxruntime and writes the table to bench/results/attention-<date>[-tag]-t<threads>[-causal].md
with the machine and the command.

    bench/attention_bench.py [--kiln build/kiln] [--threads 2] [--repeat 50] [--rounds 3]
                             [--shapes 1x4x128x64,1x4x1500x64] [--causal] [--tag NAME]
"""
import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchutil import cpu_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def attention_model(B, H, S, D, causal):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, H, S, D]) for n in "QKV"]
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [B, H, S, D])
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=int(causal))
    m = helper.make_model(helper.make_graph([node], "attention", ins, [out]),
                          opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    return m


def mha_model(B, H, S, D, causal):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [B, S, H * D]) for n in "QKV"]
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [B, S, H * D])
    node = helper.make_node("MultiHeadAttention", ["Q", "K", "V"], ["Y"], domain="com.microsoft", num_heads=H,
                            unidirectional=int(causal))
    m = helper.make_model(helper.make_graph([node], "mha", ins, [out]),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m


def kiln_time(kiln, path, inputs, threads, repeat):
    args = [kiln, "run", path, "--threads", str(threads), "--repeat", str(repeat)]
    for name, file in inputs:
        args += ["--input", f"{name}={file}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"kiln run failed: {r.stderr.strip()}")
    m = re.search(r"run ([0-9.]+) ms", r.stdout)
    return float(m.group(1))


def ort_worker(path, threads, repeat, inputs):
    """Times onnxruntime in this (child) process; prints the median in ms."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for item in inputs:
        name, file = item.split("=", 1)
        feeds[name] = numpy_helper.to_array(onnx.load_tensor(file))
    for _ in range(3):
        sess.run(None, feeds)
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        sess.run(None, feeds)
        ts.append((time.perf_counter() - t) * 1e3)
    print(f"ort {statistics.median(ts):.6f}")


def ort_time(path, files, threads, repeat):
    # a process of its own, as kiln's: onnxruntime's workers keep spinning for a while after a
    # run, which would take cores from whatever runs next in the same process tree
    args = [sys.executable, os.path.abspath(__file__), "--ort-worker", path, "--threads", str(threads), "--repeat",
            str(repeat)] + [f"{n}={f}" for n, f in files]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"onnxruntime failed: {r.stderr.strip()[-500:]}")
    return float(re.search(r"ort ([0-9.]+)", r.stdout).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default="1x4x128x64,1x4x1500x64")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--tag", default="", help="a name for the machine in the results file name")
    ap.add_argument("--ort-worker", help=argparse.SUPPRESS)
    ap.add_argument("inputs", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ort_worker:
        ort_worker(a.ort_worker, a.threads, a.repeat, a.inputs)
        return 0
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    load0 = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="kiln_attn_bench_")
    rows = []
    for shape in a.shapes.split(","):
        B, H, S, D = (int(x) for x in shape.split("x"))
        for kind, make in (("Attention", attention_model), ("MultiHeadAttention", mha_model)):
            model = make(B, H, S, D, a.causal)
            path = os.path.join(tmp, f"{kind}_{shape}.onnx")
            onnx.save(model, path)
            files = []
            for vi in model.graph.input:
                dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
                arr = rng.uniform(-1, 1, dims).astype(np.float32)
                f = os.path.join(tmp, f"{kind}_{shape}_{vi.name}.pb")
                onnx.save_tensor(numpy_helper.from_array(arr, vi.name), f)
                files.append((vi.name, f))
            kt, ot = [], []
            for _ in range(a.rounds):
                kt.append(kiln_time(a.kiln, path, files, a.threads, a.repeat))
                ot.append(ort_time(path, files, a.threads, a.repeat))
            k, o = statistics.median(kt), statistics.median(ot)
            flops = 4.0 * B * H * S * S * D * (0.5 if a.causal else 1.0)
            rows.append((f"{kind} {shape}{' causal' if a.causal else ''}", k, o, k / o, flops / k / 1e6))
            print(f"{rows[-1][0]:44s} kiln {k:9.3f} ms  onnxruntime {o:9.3f} ms  ratio {k / o:5.2f}  "
                  f"(kiln {rows[-1][4]:.1f} GFLOP/s)", flush=True)
    os.makedirs(a.out, exist_ok=True)
    date = datetime.date.today().isoformat()
    name = f"attention-{date}{'-' + a.tag if a.tag else ''}-t{a.threads}{'-causal' if a.causal else ''}.md"
    path = os.path.join(a.out, name)
    with open(path, "w") as f:
        f.write(f"# Attention on the CPU: kiln vs onnxruntime {ort.__version__}\n\n")
        f.write(f"- machine: {cpu_name()}, {os.cpu_count()} logical CPUs, {platform.platform()}\n")
        f.write(f"- threads: {a.threads}; medians of {a.repeat} runs, median over {a.rounds} interleaved rounds\n")
        f.write(f"- command: {' '.join(sys.argv)}\n")
        f.write(f"- load average (1 min) before / after: {load0:.2f} / {os.getloadavg()[0]:.2f} "
                f"(other work on the machine shows up as noise, most in the shortest runs)\n\n")
        f.write("| model (batch x heads x seq x head size) | kiln ms | onnxruntime ms | ratio | kiln GFLOP/s |\n")
        f.write("|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r[0]} | {r[1]:.3f} | {r[2]:.3f} | {r[3]:.2f} | {r[4]:.1f} |\n")
    print(f"results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
