"""Regression models for the optimiser: each is a graph that once broke an optimisation level.
They are written beside the random graphs by opt_fuzz.py and checked the same way (levels 1-3
against level 0, level 0 against ONNX Runtime).

Each builder returns (model, inputs). Keep every failure the generator finds here, reduced to the
smallest graph that still shows it, with a line saying what broke.
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _w(rng, name, *shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
    return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, opset=17):
    g = helper.make_graph(nodes, "regression", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="kiln-opt-fuzz")
    m.ir_version = 8  # as gen.py: older onnxruntime builds (the GPU host's) refuse newer onnx's default
    return m


def conv_sigmoid_read_in_if(rng):
    """issue 18: Conv+Sigmoid fused at level 2 while the Sigmoid's output is read inside an If
    branch (outer scope): the fused node was scheduled after the If ('has no value at run time')."""
    inits = [_w(rng, "w", 4, 3, 3, 3), _w(rng, "b", 4, scale=0.1)]
    then_g = helper.make_graph([helper.make_node("Squeeze", ["sig", "ax"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", F, [4, 6, 6])],
                               [numpy_helper.from_array(np.array([0], np.int64), "ax")])
    else_g = helper.make_graph([helper.make_node("ReduceMean", ["sig"], ["e_out"], axes=[0], keepdims=0)], "else", [],
                               [helper.make_tensor_value_info("e_out", F, [4, 6, 6])])
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["sig"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [1, 3, 6, 6]),
                       helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
               [helper.make_tensor_value_info("y", F, [4, 6, 6])], inits)
    return m, [rng.standard_normal((1, 3, 6, 6)).astype(np.float32), np.array(True)]


def layernorm_intermediate_read_in_if(rng):
    """issue 18: a decomposed LayerNorm whose intermediates (the normalised value, the result) are
    read inside an If's branches: the LayerNorm fused at level 2 was scheduled after the If."""
    d = 8
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "axes"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
             _w(rng, "scale", d, scale=1.0), _w(rng, "bias", d, scale=0.1)]
    then_g = helper.make_graph([helper.make_node("Abs", ["norm"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", F, [2, 5, d])])
    else_g = helper.make_graph([helper.make_node("Neg", ["ln"], ["e_out"])], "else", [],
                               [helper.make_tensor_value_info("e_out", F, [2, 5, d])])
    nodes = [
        helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=1),
        helper.make_node("Sub", ["x", "mean"], ["dev"]),
        helper.make_node("Pow", ["dev", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "axes"], ["var"], keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["std"]),
        helper.make_node("Div", ["dev", "std"], ["norm"]),
        helper.make_node("Mul", ["norm", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["ln"]),
        helper.make_node("If", ["cond"], ["branch"], then_branch=then_g, else_branch=else_g),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [2, 5, d]),
                       helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
               [helper.make_tensor_value_info("ln", F, [2, 5, d]), helper.make_tensor_value_info("branch", F, [2, 5, d])],
               inits, opset=18)
    return m, [rng.standard_normal((2, 5, d)).astype(np.float32), np.array(False)]


def fusible_read_in_nested_loop_if(rng):
    """A MatMul+Add+Relu chain whose MatMul output is read two subgraph levels down (an If inside a
    Loop body): the read must pin it through both levels."""
    inits = [_w(rng, "w", 6, 6), _w(rng, "b", 6, scale=0.1),
             numpy_helper.from_array(np.array(2, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "true")]
    inner_then = helper.make_graph([helper.make_node("Add", ["acc_in", "mm"], ["it"])], "ithen", [],
                                   [helper.make_tensor_value_info("it", F, [3, 6])])
    inner_else = helper.make_graph([helper.make_node("Sub", ["acc_in", "mm"], ["ie"])], "ielse", [],
                                   [helper.make_tensor_value_info("ie", F, [3, 6])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("If", ["cond"], ["acc_out"], then_branch=inner_then, else_branch=inner_else)],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [3, 6])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", F, [3, 6])])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["mb"]),
        helper.make_node("Relu", ["mb"], ["r"]),
        helper.make_node("Loop", ["trips", "true", "r"], ["acc"], body=body),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [3, 6]),
                       helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
               [helper.make_tensor_value_info("acc", F, [3, 6])], inits)
    return m, [rng.standard_normal((3, 6)).astype(np.float32), np.array(True)]


REGRESSIONS = [conv_sigmoid_read_in_if, layernorm_intermediate_read_in_if, fusible_read_in_nested_loop_if]
