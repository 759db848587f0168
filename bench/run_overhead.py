#!/usr/bin/env python3
"""Per-run overhead on small models: what a run costs besides its kernels (shape inference, output
tensors, attribute lookups, dispatch), measured as whole-run latency on models whose kernels are
tiny, side by side for several kiln builds in one run.

Builds three synthetic models (in --models, default a temporary folder):
  chain200     100 x (Add [1,16] + constant, Relu), then Identity: 201 nodes of 16 elements
  mixed240     40 x (MatMul [1,16]x[16,16], Softmax, Reshape [4,4], Transpose, Reshape [1,16],
               LeakyRelu): nodes with attributes and views
  dynbatch400  40 x (MatMul, Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Softmax, Concat ->
               Reshape, Tanh) on [N,16] (N symbolic, 2 at run time): exporters' shape arithmetic
  loop100      a Loop of 100 iterations (trip count a constant) over a body of 5 nodes on [1,16]
               (Add and MatMul read the main graph's constants)
  attrs150     25 x (Gemm [4,16] transB alpha, Reshape, Attention (opset 23, 2 heads of 8 on
               [1,4,16]), Conv 1-D 4->4 k3, Reshape, Einsum "ij,jk->ik"): kernels with many
               attributes on tiny tensors
and times them and the small zoo models with `kiln bench MODEL --iterations N --threads 1` for each
build given with --kiln LABEL=PATH[:ENV=VALUE...], in alternating rounds; latency is the median of
the rounds' p50s, and the fastest run of all rounds is given too (on a loaded machine the steadier
of the two).

    bench/run_overhead.py --kiln before=/tmp/base/kiln --kiln after=build/kiln \\
        --kiln "after, memo off=build/kiln:KILN_SHAPE_MEMO=0" [--rounds 3] [--zoo DIR] [--out FILE]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(folder, name, nodes, inits, inputs, outputs, opset=17):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    path = os.path.join(folder, name + ".onnx")
    onnx.save(m, path)
    return path


def make_models(folder):
    rng = np.random.default_rng(0)
    n = helper.make_node
    f32 = lambda a: a.astype(np.float32)
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
    io = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
    paths = {}
    nodes, cur = [], "x"
    for i in range(100):
        nodes += [n("Add", [cur, "c"], [f"a{i}"]), n("Relu", [f"a{i}"], [f"r{i}"])]
        cur = f"r{i}"
    nodes.append(n("Identity", [cur], ["y"]))
    paths["chain200"] = save(folder, "chain200", nodes,
                             [numpy_helper.from_array(f32(rng.standard_normal((1, 16))), "c")],
                             [io("x", [1, 16])], [io("y", [1, 16])])
    nodes, cur = [], "x"
    for i in range(40):
        nodes += [n("MatMul", [cur, "w"], [f"m{i}"]), n("Softmax", [f"m{i}"], [f"s{i}"], axis=-1),
                  n("Reshape", [f"s{i}", "s44"], [f"p{i}"]), n("Transpose", [f"p{i}"], [f"t{i}"], perm=[1, 0]),
                  n("Reshape", [f"t{i}", "s116"], [f"q{i}"]), n("LeakyRelu", [f"q{i}"], [f"l{i}"], alpha=0.1)]
        cur = f"l{i}"
    nodes.append(n("Identity", [cur], ["y"]))
    paths["mixed240"] = save(folder, "mixed240", nodes,
                             [numpy_helper.from_array(f32(rng.standard_normal((16, 16)) * 0.2), "w"),
                              i64("s44", [4, 4]), i64("s116", [1, 16])],
                             [io("x", [1, 16])], [io("y", [1, 16])])
    nodes, cur = [], "x"
    for i in range(40):
        nodes += [n("MatMul", [cur, "w"], [f"m{i}"]), n("Shape", [f"m{i}"], [f"sh{i}"]),
                  n("Gather", [f"sh{i}", "i0"], [f"b{i}"], axis=0), n("Unsqueeze", [f"b{i}", "ax0"], [f"bu{i}"]),
                  n("Concat", [f"bu{i}", "s44"], [f"ns{i}"], axis=0), n("Reshape", [f"m{i}", f"ns{i}"], [f"p{i}"]),
                  n("Softmax", [f"p{i}"], [f"sm{i}"], axis=-1), n("Concat", [f"bu{i}", "s16"], [f"nt{i}"], axis=0),
                  n("Reshape", [f"sm{i}", f"nt{i}"], [f"q{i}"]), n("Tanh", [f"q{i}"], [f"l{i}"])]
        cur = f"l{i}"
    nodes.append(n("Identity", [cur], ["y"]))
    paths["dynbatch400"] = save(folder, "dynbatch400", nodes,
                                [numpy_helper.from_array(f32(rng.standard_normal((16, 16)) * 0.2), "w"),
                                 i64("i0", 0), i64("s44", [4, 4]), i64("s16", [16]), i64("ax0", [0])],
                                [io("x", ["N", 16])], [io("y", ["N", 16])])
    body = helper.make_graph(
        [n("Identity", ["c_in"], ["c_out"]), n("Add", ["x_in", "c"], ["a"]), n("Relu", ["a"], ["r"]),
         n("MatMul", ["r", "w"], ["m"]), n("Tanh", ["m"], ["x_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []), io("x_in", [1, 16])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), io("x_out", [1, 16])])
    paths["loop100"] = save(folder, "loop100", [n("Loop", ["M", "", "x"], ["y"], body=body)],
                            [numpy_helper.from_array(f32(rng.standard_normal((1, 16))), "c"),
                             numpy_helper.from_array(f32(rng.standard_normal((16, 16)) * 0.2), "w"),
                             i64("M", 100)],
                            [io("x", [1, 16])], [io("y", [1, 16])])
    nodes, cur = [], "x"
    for i in range(25):
        nodes += [n("Gemm", [cur, "gw", "gb"], [f"g{i}"], transB=1, alpha=0.5),
                  n("Reshape", [f"g{i}", "s1416"], [f"r{i}"]),
                  n("Attention", [f"r{i}", f"r{i}", f"r{i}"], [f"a{i}"], q_num_heads=2, kv_num_heads=2),
                  n("Conv", [f"a{i}", "cw"], [f"c{i}"], pads=[1, 1], kernel_shape=[3]),
                  n("Reshape", [f"c{i}", "s416"], [f"q{i}"]),
                  n("Einsum", [f"q{i}", "ew"], [f"l{i}"], equation="ij,jk->ik")]
        cur = f"l{i}"
    nodes.append(n("Identity", [cur], ["y"]))
    paths["attrs150"] = save(folder, "attrs150", nodes,
                             [numpy_helper.from_array(f32(rng.standard_normal((16, 16)) * 0.2), "gw"),
                              numpy_helper.from_array(f32(rng.standard_normal(16) * 0.1), "gb"),
                              numpy_helper.from_array(f32(rng.standard_normal((4, 4, 3)) * 0.3), "cw"),
                              numpy_helper.from_array(f32(rng.standard_normal((16, 16)) * 0.2), "ew"),
                              i64("s1416", [1, 4, 16]), i64("s416", [4, 16])],
                             [io("x", [4, 16])], [io("y", [4, 16])], opset=23)
    return paths


def bench_p50(kiln, env, model, level, iterations, dims):
    cmd = [kiln, "bench", model, "--iterations", str(iterations), "--warmup", "300", "--threads", "1",
           "--opt-level", str(level)]
    for d in dims:
        cmd += ["--dim", d]
    e = dict(os.environ)
    e.update(env)
    out = subprocess.run(cmd, capture_output=True, text=True, env=e)
    p50 = mn = None
    for line in out.stdout.splitlines():
        if line.startswith("latency ms"):
            p50 = float(line.split()[3])
        elif line.strip().startswith("min "):
            mn = float(line.split()[1])
    if p50 is not None and mn is not None:
        return p50, mn
    sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", action="append", required=True, help="LABEL=PATH[:ENV=VALUE...]")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", help="folder for the synthetic models (default: a temporary one)")
    ap.add_argument("--zoo", default="/work/shared/models")
    ap.add_argument("--out", help="also write the table to this markdown file")
    a = ap.parse_args()
    builds = []
    for spec in a.kiln:
        label, _, rest = spec.partition("=")
        path, *envs = rest.split(":")
        builds.append((label, path, dict(e.split("=", 1) for e in envs)))
    folder = a.models or tempfile.mkdtemp(prefix="kiln_run_overhead.")
    os.makedirs(folder, exist_ok=True)
    syn = make_models(folder)
    cases = [("chain200", syn["chain200"], 0, 20000, []), ("chain200", syn["chain200"], 3, 20000, []),
             ("mixed240", syn["mixed240"], 0, 10000, []), ("mixed240", syn["mixed240"], 3, 10000, []),
             ("dynbatch400 (N=2)", syn["dynbatch400"], 0, 5000, ["N=2"]),
             ("dynbatch400 (N=2)", syn["dynbatch400"], 3, 10000, ["N=2"]),
             ("loop100", syn["loop100"], 0, 2000, []), ("loop100", syn["loop100"], 3, 2000, []),
             ("attrs150", syn["attrs150"], 0, 5000, []), ("attrs150", syn["attrs150"], 3, 5000, [])]
    zoo = [("field_conv1d_gemm", 3, 5000, ["batch=1"]), ("lstm_gru", 3, 1000, ["batch=1", "time=50"]),
           ("bert_mini (seq 16)", 0, 1000, ["batch=1", "seq=16"]), ("bert_mini (seq 16)", 3, 1000, ["batch=1", "seq=16"]),
           ("mobilenet_v3_small", 3, 200, ["batch=1"])]
    for name, level, it, dims in zoo:
        path = os.path.join(a.zoo, name.split(" ")[0], "model.onnx")
        if os.path.exists(path):
            cases.append((name, path, level, it, dims))
    rows = []
    for name, path, level, it, dims in cases:
        got = {b[0]: [] for b in builds}
        for _ in range(a.rounds):
            for label, kiln, env in builds:
                got[label].append(bench_p50(kiln, env, path, level, it, dims))
        med = [statistics.median(p for p, _ in got[b[0]]) * 1000 for b in builds]
        mins = [min(m for _, m in got[b[0]]) * 1000 for b in builds]
        rows.append((name, level, med, mins))
        print(f"{name:22s} L{level}  " + "  ".join(f"{b[0]} {m:9.1f} us (min {n:.1f})" for b, m, n in
                                                  zip(builds, med, mins)), flush=True)
    head = "| model | level | " + " | ".join(f"{b[0]} p50 (min) us" for b in builds) + " | " + \
        " | ".join(f"{b[0]}/{builds[0][0]} p50 (min)" for b in builds[1:]) + " |"
    lines = [head, "|" + "---|" * 2 + "---:|" * (2 * len(builds) - 1)]
    for name, level, med, mins in rows:
        lines.append(f"| {name} | {level} | " + " | ".join(f"{m:.1f} ({n:.1f})" for m, n in zip(med, mins)) + " | " +
                     " | ".join(f"{m / med[0]:.2f} ({n / mins[0]:.2f})" for m, n in zip(med[1:], mins[1:])) + " |")
    table = "\n".join(lines)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
