"""Writes the seed corpus for tests/fuzz/fuzz_loader.c: small valid models and values made with
the onnx package, each a few hundred bytes, covering the loader's paths (raw and typed tensor
data, every attribute kind, subgraphs with outer references, sequence/optional types,
model-local functions, external data, test-data values).

Usage: python3 tests/fuzz/make_corpus.py [OUTDIR]   (default: tests/fuzz/corpus_loader)"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus_loader")
os.makedirs(out, exist_ok=True)


def save(name, msg):
    data = msg.SerializeToString()
    assert len(data) < 10000, (name, len(data))
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def model(graph, opset=17, **kw):
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)


# raw_data initializer, typed-field initializer, symbolic dims, value_info
w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "W")
b = helper.make_tensor("B", TensorProto.INT64, [2], [3, -1])
g = helper.make_graph(
    [helper.make_node("Add", ["X", "W"], ["Y"], name="add"),
     helper.make_node("Reshape", ["Y", "B"], ["Z"], name="reshape")],
    "main",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
    [helper.make_tensor_value_info("Z", TensorProto.FLOAT, [None, None])],
    [w, b],
    value_info=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])])
save("add_reshape.onnx", model(g))

# every attribute kind
sub = helper.make_graph([helper.make_node("Identity", ["X"], ["o"])], "sub", [],
                        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
n = helper.make_node("Custom", ["X"], ["Y"], domain="test.domain", f=1.5, i=-3, s="str", ints=[1, 2, 3],
                     floats=[0.5, 0.25], strings=["a", "b"],
                     t=helper.make_tensor("t", TensorProto.FLOAT16, [2], np.array([1, 2], np.float16).view(np.uint16)),
                     tensors=[helper.make_tensor("u", TensorProto.BOOL, [1], [True])], g=sub, graphs=[sub],
                     tp=helper.make_tensor_type_proto(TensorProto.INT8, [4]))
g = helper.make_graph([n], "attrs", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test.domain", 1)])
save("attributes.onnx", m)

# If with branches that read outer values
then_g = helper.make_graph([helper.make_node("Add", ["X", "X"], ["t"])], "then", [],
                           [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
else_g = helper.make_graph([helper.make_node("Neg", ["X"], ["e"])], "else", [],
                           [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
g = helper.make_graph([helper.make_node("If", ["c"], ["Y"], then_branch=then_g, else_branch=else_g)], "if",
                      [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                       helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
save("if.onnx", model(g, 13))

# Loop with a carried value
body = helper.make_graph(
    [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
     helper.make_node("Add", ["v_in", "one"], ["v_out"])],
    "body",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []),
     helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
     helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1])],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1])])
g = helper.make_graph([helper.make_node("Loop", ["n", "", "v0"], ["v"], body=body)], "loop",
                      [helper.make_tensor_value_info("n", TensorProto.INT64, []),
                       helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1])],
                      [helper.make_tensor_value_info("v", TensorProto.FLOAT, [1])],
                      [numpy_helper.from_array(np.ones(1, np.float32), "one")])
save("loop.onnx", model(g, 16))

# sequence and optional types
g = helper.make_graph([helper.make_node("SequenceLength", ["S"], ["L"]),
                       helper.make_node("OptionalHasElement", ["O"], ["H"])], "seq",
                      [helper.make_value_info("S", helper.make_sequence_type_proto(
                          helper.make_tensor_type_proto(TensorProto.FLOAT, ["a", 2]))),
                       helper.make_value_info("O", helper.make_optional_type_proto(
                           helper.make_tensor_type_proto(TensorProto.INT32, [3])))],
                      [helper.make_tensor_value_info("L", TensorProto.INT64, []),
                       helper.make_tensor_value_info("H", TensorProto.BOOL, [])])
save("seq_opt.onnx", model(g, 18))

# a model-local function
fn = helper.make_function("local", "AddTwice", ["a", "b"], ["c"],
                          [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Add", ["t", "b"], ["c"])],
                          [helper.make_opsetid("", 17)])
g = helper.make_graph([helper.make_node("AddTwice", ["X", "X"], ["Y"], domain="local")], "fn",
                      [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                      functions=[fn])
save("function.onnx", m)

# external data (the fuzz target's folder holds a 256-byte data.bin)
t = TensorProto()
t.name = "ext"
t.data_type = TensorProto.FLOAT
t.dims.extend([4])
t.data_location = TensorProto.EXTERNAL
for k, v in (("location", "data.bin"), ("offset", "16"), ("length", "16")):
    e = t.external_data.add()
    e.key, e.value = k, v
g = helper.make_graph([helper.make_node("Relu", ["ext"], ["Y"])], "ext", [],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])], [t])
save("external.onnx", model(g))

# values, as in test_data_set_*/input_N.pb
save("value_tensor.pb", numpy_helper.from_array(np.arange(12, dtype=np.int32).reshape(3, 4), "x"))
save("value_strings.pb", helper.make_tensor("s", TensorProto.STRING, [2], [b"ab", b"c"]))
seq = onnx.SequenceProto()
seq.name = "seq"
seq.elem_type = onnx.SequenceProto.TENSOR
seq.tensor_values.extend([numpy_helper.from_array(np.ones((2,), np.float32)),
                          numpy_helper.from_array(np.zeros((3,), np.float32))])
save("value_sequence.pb", seq)
opt = onnx.OptionalProto()
opt.name = "opt"
opt.elem_type = onnx.OptionalProto.TENSOR
opt.tensor_value.CopyFrom(numpy_helper.from_array(np.ones((2,), np.float64)))
save("value_optional.pb", opt)
empty = onnx.OptionalProto()
empty.name = "none"
save("value_optional_empty.pb", empty)
print("wrote", len(os.listdir(out)), "files to", out)
