"""Small ONNX models the API tests build in memory (onnx.helper)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits=(), opset=18, check=True):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="kiln-py-tests")
    m.ir_version = 9
    if check:
        onnx.checker.check_model(m)
    return m.SerializeToString()


def add(dtype=TensorProto.FLOAT):
    """C = A + B, both [N, 3] with N symbolic."""
    return _model([helper.make_node("Add", ["A", "B"], ["C"])],
                  [helper.make_tensor_value_info("A", dtype, ["N", 3]),
                   helper.make_tensor_value_info("B", dtype, ["N", 3])],
                  [helper.make_tensor_value_info("C", dtype, ["N", 3])])


def identity(dtype, shape=None):
    return _model([helper.make_node("Identity", ["x"], ["y"])],
                  [helper.make_tensor_value_info("x", dtype, shape)],
                  [helper.make_tensor_value_info("y", dtype, shape)])


def two_outputs():
    """y = x * 2, z = x + 1 (float [2, 2])."""
    two = numpy_helper.from_array(np.array(2, np.float32), "two")
    one = numpy_helper.from_array(np.array(1, np.float32), "one")
    return _model([helper.make_node("Mul", ["x", "two"], ["y"]), helper.make_node("Add", ["x", "one"], ["z"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2]),
                   helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 2])], [two, one])


def sequences():
    """in: x, y float [?]; out: seq = [x, y], n = length of the input sequence s, cat = concat(s)."""
    seq_t = helper.make_tensor_sequence_value_info
    return _model([helper.make_node("SequenceConstruct", ["x", "y"], ["seq"]),
                   helper.make_node("SequenceLength", ["s"], ["n"]),
                   helper.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0)],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a"]),
                   helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b"]),
                   seq_t("s", TensorProto.FLOAT, ["e"])],
                  [seq_t("seq", TensorProto.FLOAT, ["e"]),
                   helper.make_tensor_value_info("n", TensorProto.INT64, []),
                   helper.make_tensor_value_info("cat", TensorProto.FLOAT, ["c"])])


def optionals():
    """in: o optional(tensor(float)); out: has = OptionalHasElement(o), some = Optional(x),
    none = an empty optional."""
    opt_in = helper.make_tensor_type_proto(TensorProto.FLOAT, [3])
    opt_t = helper.make_optional_type_proto(opt_in)
    return _model([helper.make_node("OptionalHasElement", ["o"], ["has"]),
                   helper.make_node("Optional", ["x"], ["some"]),
                   helper.make_node("Optional", [], ["none"], type=opt_in)],
                  [helper.make_value_info("o", opt_t), helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                  [helper.make_tensor_value_info("has", TensorProto.BOOL, []), helper.make_value_info("some", opt_t),
                   helper.make_value_info("none", opt_t)])


def matmul_chain(n=512, k=8):
    """k MatMuls of [n, n] by constant [n, n] weights: a run long enough to see the GIL free."""
    rng = np.random.default_rng(1)
    inits, nodes, cur = [], [], "x"
    for i in range(k):
        inits.append(numpy_helper.from_array((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", [cur, f"w{i}"], [f"h{i}"]))
        cur = f"h{i}"
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])], inits)


def image_model():
    """[1, 3, 224, 224] float -> [1, 3] (GlobalAveragePool, Flatten): the README's C example runs it."""
    return _model([helper.make_node("GlobalAveragePool", ["images"], ["p"]),
                   helper.make_node("Flatten", ["p"], ["logits"])],
                  [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 224, 224])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3])])


def unknown_dims():
    """o1 = x of unknown rank, o2 = y of shape [unnamed, 3, 'h']."""
    return _model([helper.make_node("Identity", ["x"], ["o1"]), helper.make_node("Identity", ["y"], ["o2"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                   helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3, "h"])],
                  [helper.make_tensor_value_info("o1", TensorProto.FLOAT, None),
                   helper.make_tensor_value_info("o2", TensorProto.FLOAT, [None, 3, "h"])],
                  check=False)  # the checker wants a shape; ONNX Runtime and kiln take none (unknown rank)
