"""Attributes read at compile time (issue 23): kernels take their attributes from a block their
prepare hook filled when the session was compiled, once per node. These models put two nodes of
one operator with different, non-default attributes into one session (each must get its own
block), and run every model several times with input shapes that change between runs (what a
kernel keeps per input shape, such as QLinearAveragePool's window, must follow them). Outputs
against onnxruntime's."""
import numpy as np
import pytest
from conftest import rng as make_rng
from onnx import TensorProto, helper

onnxruntime = pytest.importorskip("onnxruntime")


def _model(nodes, inputs, outputs, opset=18, extra_opsets=()):
    g = helper.make_graph(nodes, "attrs", inputs, outputs)
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    m = helper.make_model(g, opset_imports=ops)
    m.ir_version = 8
    return m.SerializeToString()


def _vi(name, elem, dims):
    return helper.make_tensor_value_info(name, elem, dims)


def _check(model, feeds_list, rtol=1e-5, atol=1e-6, provider="CPUExecutionProvider"):
    import kiln
    ref = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    sess = kiln.InferenceSession(model, providers=[provider])
    for feeds in feeds_list:
        want = ref.run(None, feeds)
        for run in range(2):
            got = sess.run(None, feeds)
            for i, (g, w) in enumerate(zip(got, want)):
                shapes = {k: v.shape for k, v in feeds.items()}
                assert g.shape == w.shape, f"run {run}, output {i}, inputs {shapes}"
                if np.issubdtype(w.dtype, np.floating):
                    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"run {run}, output {i}, inputs {shapes}")
                else:
                    np.testing.assert_array_equal(g, w, err_msg=f"run {run}, output {i}, inputs {shapes}")


F = TensorProto.FLOAT


@pytest.fixture
def rng():
    return make_rng()


def _f32(rng, *shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def test_two_lrn_and_two_groupnorm_nodes(rng):
    nodes = [
        helper.make_node("LRN", ["x"], ["a"], size=3, alpha=1e-2, beta=0.5, bias=2.0),
        helper.make_node("LRN", ["x"], ["b"], size=5),
        helper.make_node("GroupNormalization", ["x", "s", "t"], ["c"], num_groups=2, epsilon=1e-2),
        helper.make_node("GroupNormalization", ["x", "s", "t"], ["d"], num_groups=6, epsilon=0.5),
        helper.make_node("LpNormalization", ["x"], ["e"], axis=1, p=1),
        helper.make_node("MeanVarianceNormalization", ["x"], ["f"], axes=[1, 3]),
    ]
    model = _model(nodes, [_vi("x", F, ["N", 6, "H", "W"]), _vi("s", F, [6]), _vi("t", F, [6])],
                   [_vi(o, F, None) for o in "abcdef"], opset=21)
    s, t = _f32(rng, 6), _f32(rng, 6)
    _check(model, [{"x": _f32(rng, 2, 6, 3, 4), "s": s, "t": t}, {"x": _f32(rng, 1, 6, 5, 2), "s": s, "t": t}],
           rtol=1e-4, atol=1e-5)


def test_two_reductions_with_different_axes(rng):
    axes = helper.make_tensor("ax", TensorProto.INT64, [1], [1])
    empty = helper.make_tensor("none", TensorProto.INT64, [0], [])
    nodes = [
        helper.make_node("ReduceSum", ["x", "ax"], ["a"], keepdims=0),
        helper.make_node("ReduceSum", ["x", "none"], ["b"], noop_with_empty_axes=1),
        helper.make_node("ReduceSum", ["x", "none"], ["c"]),
        helper.make_node("ReduceMax", ["x"], ["d"], axes=[0, 2], keepdims=1),
    ]
    g = helper.make_graph(nodes, "attrs", [_vi("x", F, ["A", "B", "C"])], [_vi(o, F, None) for o in "abcd"],
                          initializer=[axes, empty])
    m_sum = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m_sum.ir_version = 8
    _check(m_sum.SerializeToString(), [{"x": _f32(rng, 2, 3, 4)}, {"x": _f32(rng, 3, 1, 5)}], rtol=1e-5, atol=1e-5)


def test_mod_bitshift_and_clip6_nodes(rng):
    nodes = [
        helper.make_node("Mod", ["x", "y"], ["a"], fmod=1),
        helper.make_node("Mod", ["i", "j"], ["b"]),
        helper.make_node("BitShift", ["u", "v"], ["c"], direction="LEFT"),
        helper.make_node("BitShift", ["u", "v"], ["d"], direction="RIGHT"),
    ]
    model = _model(nodes, [_vi("x", F, ["N"]), _vi("y", F, ["N"]), _vi("i", TensorProto.INT32, ["N"]),
                           _vi("j", TensorProto.INT32, ["N"]), _vi("u", TensorProto.UINT8, ["N"]),
                           _vi("v", TensorProto.UINT8, ["N"])],
                   [_vi("a", F, None), _vi("b", TensorProto.INT32, None), _vi("c", TensorProto.UINT8, None),
                    _vi("d", TensorProto.UINT8, None)])

    def feeds(n):
        return {"x": _f32(rng, n, lo=-9, hi=9), "y": _f32(rng, n, lo=0.5, hi=3) * rng.choice([-1, 1], n).astype(np.float32),
                "i": rng.integers(-20, 20, n).astype(np.int32), "j": rng.choice([-7, -3, 2, 5], n).astype(np.int32),
                "u": rng.integers(0, 255, n).astype(np.uint8), "v": rng.integers(0, 4, n).astype(np.uint8)}
    _check(model, [feeds(7), feeds(12)])
    clip = _model([helper.make_node("Clip", ["x"], ["a"], min=-0.5, max=0.25), helper.make_node("Clip", ["x"], ["b"], min=0.0)],
                  [_vi("x", F, ["N"])], [_vi("a", F, None), _vi("b", F, None)], opset=6)
    _check(clip, [{"x": _f32(rng, 9)}, {"x": _f32(rng, 4)}])


def test_two_quickgelu_and_fusedmatmul_nodes(rng):
    nodes = [
        helper.make_node("QuickGelu", ["x"], ["a"], domain="com.microsoft", alpha=0.5),
        helper.make_node("QuickGelu", ["x"], ["b"], domain="com.microsoft"),
        helper.make_node("FusedMatMul", ["x", "w"], ["c"], domain="com.microsoft", transB=1, alpha=0.25),
        helper.make_node("FusedMatMul", ["w", "x"], ["d"], domain="com.microsoft", transB=1, alpha=2.0),
    ]
    model = _model(nodes, [_vi("x", F, ["M", 4]), _vi("w", F, [3, 4])], [_vi(o, F, None) for o in "abcd"],
                   extra_opsets=[("com.microsoft", 1)])
    w = _f32(rng, 3, 4)
    _check(model, [{"x": _f32(rng, 5, 4), "w": w}, {"x": _f32(rng, 2, 4), "w": w}], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_average_pool_across_shapes(rng, dtype):
    """The window QLinearAveragePool keeps per spatial size (kn_ctx_prep) follows the input's."""
    elem = TensorProto.UINT8 if dtype == np.uint8 else TensorProto.INT8
    zp = 128 if dtype == np.uint8 else 0
    inits = [helper.make_tensor("xs", F, [], [0.05]), helper.make_tensor("xz", elem, [], [zp]),
             helper.make_tensor("ys", F, [], [0.04]), helper.make_tensor("yz", elem, [], [zp - 3])]
    nodes = [
        helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["a"], domain="com.microsoft",
                         kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
        helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["b"], domain="com.microsoft",
                         kernel_shape=[2, 3], ceil_mode=1, strides=[2, 1]),
    ]
    g = helper.make_graph(nodes, "qpool", [_vi("x", elem, ["N", 3, "H", "W"])], [_vi("a", elem, None), _vi("b", elem, None)],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    lo, hi = (0, 256) if dtype == np.uint8 else (-128, 128)

    def x(*shape):
        return rng.integers(lo, hi, shape).astype(dtype)
    _check(m.SerializeToString(), [{"x": x(1, 3, 7, 8)}, {"x": x(2, 3, 5, 6)}, {"x": x(1, 3, 7, 8)}, {"x": x(1, 3, 9, 4)}],
           rtol=0, atol=1)
