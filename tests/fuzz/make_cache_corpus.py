"""Writes the seed corpus for tests/fuzz/fuzz_cache.c: small compiled files (a few KB each) made
by `kiln compile` from small models covering the graph section's paths: fused operators (Conv +
Relu, Gemm), every attribute kind kiln stores, string and int constants, subgraphs (If, Loop,
Scan) with outer references, sequences and optionals, symbolic dims and a fixed shape profile.

Usage: python3 tests/fuzz/make_cache_corpus.py KILN_BINARY [OUTDIR]
       (default OUTDIR: tests/fuzz/corpus_cache; the loader corpus's models are compiled too)"""
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

kiln = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(here, "corpus_cache")
os.makedirs(out, exist_ok=True)
tmp = tempfile.mkdtemp()


def model(graph, opset=17):
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def compile_model(name, m, *flags):
    src = os.path.join(tmp, name + ".onnx")
    onnx.save(m, src)
    dst = os.path.join(out, name + ".kiln")
    subprocess.run([kiln, "compile", src, "-o", dst, *flags], check=True, stdout=subprocess.DEVNULL)
    assert os.path.getsize(dst) < 50000, (name, os.path.getsize(dst))


rng = np.random.default_rng(0)
f32 = lambda *s: rng.standard_normal(s).astype(np.float32)

# Conv + bias + Relu (fused at level 3), Gemm with transB, a symbolic batch
g = helper.make_graph(
    [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1], strides=[1]),
     helper.make_node("Relu", ["c"], ["r"]),
     helper.make_node("Flatten", ["r"], ["f"]),
     helper.make_node("Gemm", ["f", "gw", "gb"], ["y"], transB=1, alpha=0.5)],
    "conv_gemm",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
    [numpy_helper.from_array(f32(4, 2, 3), "w"), numpy_helper.from_array(f32(4), "b"),
     numpy_helper.from_array(f32(3, 32), "gw"), numpy_helper.from_array(f32(3), "gb")])
compile_model("conv_gemm", model(g))
compile_model("conv_gemm_n2_o1", model(g), "--dim", "N=2", "--opt-level", "1")

# string and int64 constants, Cast, attributes of kinds float/int/string/ints/floats/tensor
g = helper.make_graph(
    [helper.make_node("Constant", [], ["s"], value=helper.make_tensor("sv", TensorProto.STRING, [2], [b"ab", b"c"])),
     helper.make_node("Identity", ["s"], ["s_out"]),
     helper.make_node("Constant", [], ["k"], value_ints=[2, 3]),
     helper.make_node("Reshape", ["x", "k"], ["r"]),
     helper.make_node("LeakyRelu", ["r"], ["y"], alpha=0.1),
     helper.make_node("ReduceSum", ["y", "axes"], ["z"], keepdims=0)],
    "consts",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])],
    [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2]),
     helper.make_tensor_value_info("s_out", TensorProto.STRING, [2])],
    [numpy_helper.from_array(np.array([1], np.int64), "axes")])
compile_model("consts", model(g, 13), "--opt-level", "0")

# Scan with a state (a subgraph with its own values and outer scope)
body = helper.make_graph(
    [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y_t"])],
    "body",
    [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [2]),
     helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [2])],
    [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [2]),
     helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [2])])
g = helper.make_graph(
    [helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1)],
    "scan",
    [helper.make_tensor_value_info("s0", TensorProto.FLOAT, [2]),
     helper.make_tensor_value_info("xs", TensorProto.FLOAT, [3, 2])],
    [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2]),
     helper.make_tensor_value_info("ys", TensorProto.FLOAT, [3, 2])])
compile_model("scan", model(g, 16))

# a small LSTM (large attribute lists, optional inputs omitted)
g = helper.make_graph(
    [helper.make_node("LSTM", ["x", "W", "R", "B"], ["", "h"], hidden_size=3)],
    "lstm",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 1, 2])],
    [helper.make_tensor_value_info("h", TensorProto.FLOAT, None)],
    [numpy_helper.from_array(f32(1, 12, 2), "W"), numpy_helper.from_array(f32(1, 12, 3), "R"),
     numpy_helper.from_array(f32(1, 24), "B")])
compile_model("lstm", model(g, 14))

# the loader corpus's models that kiln can compile (If, Loop, sequences/optionals, functions)
for src in sorted(glob.glob(os.path.join(here, "corpus_loader", "*.onnx"))):
    name = os.path.splitext(os.path.basename(src))[0]
    r = subprocess.run([kiln, "compile", src, "-o", os.path.join(out, name + ".kiln")],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if r.returncode != 0 and os.path.exists(os.path.join(out, name + ".kiln")):
        os.remove(os.path.join(out, name + ".kiln"))
print("seeds in", out, ":", sorted(os.listdir(out)))
