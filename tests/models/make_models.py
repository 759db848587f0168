#!/usr/bin/env python3
"""Builds kiln's own small test networks in the ONNX backend-test layout, with reference outputs
from ONNX Runtime (CPU, fp32), for machines that lack the shared model zoo.

    make_models.py OUT_DIR

Each network follows the graph patterns real exporters emit (Conv stacks with depthwise and 1x1
convolutions and a Gemm head; attention with shape arithmetic Shape/Gather/Concat -> Reshape,
LayerNormalization and Erf GELU; LSTM/GRU). Weights are seeded random values. OUT_DIR/zoo.json
gives each model's tolerance, as in the shared zoo.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(20261130)


def w(name, *shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def const_i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def tiny_cnn():
    inits = [w("c1_w", 16, 3, 3, 3), w("c1_b", 16, scale=0.1), w("dw_w", 16, 1, 3, 3), w("dw_b", 16, scale=0.1),
             w("pw_w", 16, 16, 1, 1), w("pw_b", 16, scale=0.1), w("fc_w", 10, 16), w("fc_b", 10, scale=0.1)]
    nodes = [
        helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "dw_w", "dw_b"], ["dw"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("HardSwish", ["dw"], ["hs"]),
        helper.make_node("Conv", ["hs", "pw_w", "pw_b"], ["pw"]),
        helper.make_node("Add", ["pw", "r1"], ["res"]),
        helper.make_node("MaxPool", ["res"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["mp"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    g = helper.make_graph(nodes, "tiny_cnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-tests")
    data = [[RNG.standard_normal((n, 3, 32, 32)).astype(np.float32)] for n in (1, 3)]
    return m, data


def tiny_transformer():
    d, heads = 64, 4
    hd = d // heads
    inits = [w("ln_s", d, scale=0.1), w("ln_b", d, scale=0.1), w("qkv_w", d, 3 * d), w("qkv_b", 3 * d, scale=0.1),
             w("o_w", d, d), w("fc1_w", d, 4 * d), w("fc1_b", 4 * d, scale=0.1), w("fc2_w", 4 * d, d),
             const_i64("idx0", 0), const_i64("idx1", 1), const_i64("heads", [heads]), const_i64("hd", [hd]),
             const_i64("d", [d]), const_i64("ax0", [0]),
             numpy_helper.from_array(np.array(np.sqrt(hd), dtype=np.float32), "scale"),
             numpy_helper.from_array(np.array(np.sqrt(0.5), dtype=np.float32), "inv_sqrt2"),
             numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half")]
    nodes = [
        # batch and sequence length from the input, as exporters do
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Gather", ["xs", "idx0"], ["n"], axis=0),
        helper.make_node("Gather", ["xs", "idx1"], ["s"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
        helper.make_node("Unsqueeze", ["s", "ax0"], ["s1"]),
        helper.make_node("Concat", ["n1", "s1", "heads", "hd"], ["split_shape"], axis=0),
        helper.make_node("Concat", ["n1", "s1", "d"], ["merge_shape"], axis=0),
        helper.make_node("LayerNormalization", ["x", "ln_s", "ln_b"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["ln", "qkv_w"], ["qkv0"]),
        helper.make_node("Add", ["qkv0", "qkv_b"], ["qkv"]),
        helper.make_node("Split", ["qkv"], ["q0", "k0", "v0"], axis=-1, num_outputs=3),
        helper.make_node("Reshape", ["q0", "split_shape"], ["q1"]),
        helper.make_node("Reshape", ["k0", "split_shape"], ["k1"]),
        helper.make_node("Reshape", ["v0", "split_shape"], ["v1"]),
        helper.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["scores0"]),
        helper.make_node("Div", ["scores0", "scale"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["ctx0"]),
        helper.make_node("Transpose", ["ctx0"], ["ctx1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx1", "merge_shape"], ["ctx"]),
        helper.make_node("MatMul", ["ctx", "o_w"], ["attn"]),
        helper.make_node("Add", ["x", "attn"], ["h1"]),
        # MLP with the Erf form of GELU
        helper.make_node("MatMul", ["h1", "fc1_w"], ["f0"]),
        helper.make_node("Add", ["f0", "fc1_b"], ["f1"]),
        helper.make_node("Mul", ["f1", "inv_sqrt2"], ["g0"]),
        helper.make_node("Erf", ["g0"], ["g1"]),
        helper.make_node("Add", ["g1", "one"], ["g2"]),
        helper.make_node("Mul", ["f1", "g2"], ["g3"]),
        helper.make_node("Mul", ["g3", "half"], ["gelu"]),
        helper.make_node("MatMul", ["gelu", "fc2_w"], ["f2"]),
        helper.make_node("Add", ["h1", "f2"], ["y"]),
    ]
    g = helper.make_graph(nodes, "tiny_transformer",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", d])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", d])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], producer_name="kiln-tests")
    data = [[RNG.standard_normal((n, s, d)).astype(np.float32)] for n, s in ((1, 7), (2, 16))]
    return m, data


def mha_static():
    """Two attention blocks at a static shape, as exporters write them: BERT's (Q, K, V projections
    of one input, two with a bias, Reshape + Transpose into heads, an additive mask, Transpose +
    Reshape back) and torch MultiheadAttention's (sequence first, one packed projection taken apart
    with Reshape, Unsqueeze, Transpose, Squeeze and Gather, heads merged with the batch and split
    again). kiln folds those chains into the attention's operand views and the three projections
    into one product (fold_attention_views), only at static shapes."""
    b, s, d, heads = 2, 10, 128, 4
    hd = d // heads
    inits = [w("wq", d, d), w("wk", d, d), w("wv", d, d), w("bq", d, scale=0.1), w("bk", d, scale=0.1), w("wo", d, d), w("w_in", d, 3 * d), w("w_out", d, d),
             w("b_out", d, scale=0.1),
             const_i64("split4", [b, s, heads, hd]), const_i64("merge3", [b, s, d]),
             const_i64("sb3", [s, b, 3, d]), const_i64("ax0", [0]), const_i64("ax3", [3]),
             const_i64("g0", 0), const_i64("g1", 1), const_i64("g2", 2),
             const_i64("sbh", [s, b * heads, hd]), const_i64("bhs", [b, heads, s, hd]), const_i64("sbd", [s * b, d]),
             const_i64("sb_d", [s, b, d]),
             numpy_helper.from_array(np.array(np.sqrt(hd), dtype=np.float32), "div"),
             numpy_helper.from_array(np.array(1.0 / np.sqrt(hd), dtype=np.float32), "mul")]
    nodes = [
        # BERT: mask [b, 1, 1, s] from an int mask input
        helper.make_node("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one_f", "maskf"], ["inv"]),
        helper.make_node("Mul", ["inv", "neg_big"], ["madd"]),
        helper.make_node("Reshape", ["madd", "mask4"], ["m4"]),
        helper.make_node("MatMul", ["x", "wq"], ["q00"]),
        helper.make_node("Add", ["q00", "bq"], ["q0"]),
        helper.make_node("MatMul", ["x", "wk"], ["k00"]),
        helper.make_node("Add", ["bk", "k00"], ["k0"]),
        helper.make_node("MatMul", ["x", "wv"], ["v0"]),
        helper.make_node("Reshape", ["q0", "split4"], ["q1"]),
        helper.make_node("Reshape", ["k0", "split4"], ["k1"]),
        helper.make_node("Reshape", ["v0", "split4"], ["v1"]),
        helper.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["sc0"]),
        helper.make_node("Div", ["sc0", "div"], ["sc1"]),
        helper.make_node("Add", ["sc1", "m4"], ["sc"]),
        helper.make_node("Softmax", ["sc"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["c0"]),
        helper.make_node("Transpose", ["c0"], ["c1"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["c1", "merge3"], ["c"]),
        helper.make_node("MatMul", ["c", "wo"], ["a0"]),
        helper.make_node("Add", ["x", "a0"], ["h"]),
        # torch MultiheadAttention, sequence first
        helper.make_node("Transpose", ["h"], ["hs"], perm=[1, 0, 2]),
        helper.make_node("MatMul", ["hs", "w_in"], ["qkv"]),
        helper.make_node("Reshape", ["qkv", "sb3"], ["qkv4"]),
        helper.make_node("Unsqueeze", ["qkv4", "ax0"], ["qkv5"]),
        helper.make_node("Transpose", ["qkv5"], ["qkv5t"], perm=[3, 1, 2, 0, 4]),
        helper.make_node("Squeeze", ["qkv5t", "ax3"], ["qkv3"]),
        helper.make_node("Gather", ["qkv3", "g0"], ["tq0"], axis=0),
        helper.make_node("Gather", ["qkv3", "g1"], ["tk0"], axis=0),
        helper.make_node("Gather", ["qkv3", "g2"], ["tv0"], axis=0),
        helper.make_node("Reshape", ["tq0", "sbh"], ["tq1"]),
        helper.make_node("Reshape", ["tk0", "sbh"], ["tk1"]),
        helper.make_node("Reshape", ["tv0", "sbh"], ["tv1"]),
        helper.make_node("Transpose", ["tq1"], ["tq2"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["tk1"], ["tk2"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["tv1"], ["tv2"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["tq2", "bhs"], ["tq"]),
        helper.make_node("Reshape", ["tk2", "bhs"], ["tk3"]),
        helper.make_node("Reshape", ["tv2", "bhs"], ["tv"]),
        helper.make_node("Mul", ["tq", "mul"], ["tqs"]),
        helper.make_node("Transpose", ["tk3"], ["tkt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["tqs", "tkt"], ["ts"]),
        helper.make_node("Softmax", ["ts"], ["tp"], axis=-1),
        helper.make_node("MatMul", ["tp", "tv"], ["to0"]),
        helper.make_node("Transpose", ["to0"], ["to1"], perm=[2, 0, 1, 3]),
        helper.make_node("Reshape", ["to1", "sbd"], ["to2"]),
        helper.make_node("Gemm", ["to2", "w_out", "b_out"], ["to3"]),
        helper.make_node("Reshape", ["to3", "sb_d"], ["to4"]),
        helper.make_node("Transpose", ["to4"], ["to5"], perm=[1, 0, 2]),
        helper.make_node("Add", ["h", "to5"], ["y"]),
    ]
    inits += [numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one_f"),
              numpy_helper.from_array(np.array(-10000.0, dtype=np.float32), "neg_big"),
              const_i64("mask4", [b, 1, 1, s])]
    g = helper.make_graph(nodes, "mha_static",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, d]),
                           helper.make_tensor_value_info("mask", TensorProto.INT64, [b, s])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [b, s, d])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-tests")
    mask = np.ones((b, s), dtype=np.int64)
    mask[1, 7:] = 0
    data = [[RNG.standard_normal((b, s, d)).astype(np.float32), mask]]
    return m, data


def tiny_rnn():
    hid, inp = 24, 12
    inits = [w("lw", 1, 4 * hid, inp), w("lr", 1, 4 * hid, hid), w("lb", 1, 8 * hid, scale=0.1),
             w("gw", 2, 3 * hid, hid), w("gr", 2, 3 * hid, hid), w("gb", 2, 6 * hid, scale=0.1)]
    nodes = [
        helper.make_node("LSTM", ["x", "lw", "lr", "lb"], ["ly", "lh", "lc"], hidden_size=hid),
        helper.make_node("Squeeze", ["ly", "one_ax"], ["ly2"]),
        helper.make_node("GRU", ["ly2", "gw", "gr", "gb"], ["gy", "gh"], hidden_size=hid,
                         direction="bidirectional", linear_before_reset=1),
    ]
    inits.append(const_i64("one_ax", [1]))
    g = helper.make_graph(nodes, "tiny_rnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["time", "batch", inp])],
                          [helper.make_tensor_value_info("gy", TensorProto.FLOAT, ["time", 2, "batch", hid]),
                           helper.make_tensor_value_info("gh", TensorProto.FLOAT, [2, "batch", hid])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-tests")
    data = [[RNG.standard_normal((t, b, inp)).astype(np.float32)] for t, b in ((5, 1), (9, 3))]
    return m, data


def two_products_model(name, nodes, inits, k, n1, n2):
    """The model of the quantised product tests: input x [batch, seq, k], outputs y1 (n1 columns)
    and y2 (n2), opset 17, and two data sets (batch 1 seq 7, batch 3 seq 13)."""
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", k])],
                          [helper.make_tensor_value_info("y1", TensorProto.FLOAT, ["batch", "seq", n1]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["batch", "seq", n2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-tests")
    data = [[RNG.standard_normal((b, t, k)).astype(np.float32) * 2] for b, t in ((1, 7), (3, 13))]
    return m, data


def qdq_matmul():
    """Static quantisation's QDQ form (as ONNX Runtime's quantiser writes it): activations through
    QuantizeLinear/DequantizeLinear, weights stored as 8-bit DequantizeLinear inputs; per-column int8
    and per-tensor uint8 weights. kiln runs such a MatMul as an exact integer product
    (MatMulIntegerToFloat); the reference is the float product of the dequantised values."""
    k, n1, n2 = 32, 48, 16
    # int8 weights in 7 bits, as ONNX Runtime's quantiser writes them for x86 (reduce_range): with
    # its graph optimisations on (the Python tests' reference) ONNX Runtime runs this as a u8 x s8
    # product whose AVX2 kernel saturates pairs of products beyond that (kiln's is exact)
    w1 = RNG.integers(-64, 64, (k, n1)).astype(np.int8)
    w2 = RNG.integers(0, 256, (k, n2)).astype(np.uint8)
    inits = [numpy_helper.from_array(np.array(0.04, np.float32), "xs"),
             numpy_helper.from_array(np.array(131, np.uint8), "xz"),
             numpy_helper.from_array(w1, "w1q"),
             numpy_helper.from_array((RNG.uniform(0.002, 0.01, n1)).astype(np.float32), "w1s"),
             numpy_helper.from_array(np.zeros(n1, np.int8), "w1z"),
             numpy_helper.from_array(w2, "w2q"),
             numpy_helper.from_array(np.array(0.006, np.float32), "w2s"),
             numpy_helper.from_array(np.array(119, np.uint8), "w2z"),
             w("b1", n1, scale=0.1)]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w1q", "w1s", "w1z"], ["w1d"], axis=1),
        helper.make_node("DequantizeLinear", ["w2q", "w2s", "w2z"], ["w2d"]),
        helper.make_node("MatMul", ["xd", "w1d"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["y1"]),
        helper.make_node("MatMul", ["xd", "w2d"], ["y2"]),
    ]
    return two_products_model("qdq_matmul", nodes, inits, k, n1, n2)


def dynamic_quant_matmul():
    """Dynamic quantisation as ONNX Runtime's quantize_dynamic writes it: DynamicQuantizeLinear of
    the activations, MatMulInteger with the 8-bit weights, Cast to float, Mul by x_scale * W_scale,
    then the model's own bias Add; one product with a per-tensor int8 weight scale and a bias, one
    with per-column uint8 scales and zero points and none. kiln folds each chain into
    MatMulIntegerToFloat (fuse_integer_matmul_scale); the reference is ONNX Runtime's unfused
    graph, which the fold must match to the bit."""
    k, n1, n2 = 48, 40, 24
    # int8 weights in 7 bits: ONNX Runtime's AVX2 u8 x s8 kernel saturates pairs of products past
    # that (kiln's products are exact), and this reference must be exact on any x86 CPU
    w1 = RNG.integers(-64, 64, (k, n1)).astype(np.int8)
    w2 = RNG.integers(0, 256, (k, n2)).astype(np.uint8)
    inits = [numpy_helper.from_array(w1, "w1q"),
             numpy_helper.from_array(np.array(0.0071, np.float32), "w1s"),
             numpy_helper.from_array(np.array(0, np.int8), "w1z"),
             numpy_helper.from_array(w2, "w2q"),
             numpy_helper.from_array(RNG.uniform(0.002, 0.01, n2).astype(np.float32), "w2s"),
             numpy_helper.from_array(RNG.integers(100, 156, n2).astype(np.uint8), "w2z"),
             w("b1", n1, scale=0.1)]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("Mul", ["xs", "w1s"], ["s1"]),
        helper.make_node("MatMulInteger", ["xq", "w1q", "xz", "w1z"], ["p1"]),
        helper.make_node("Cast", ["p1"], ["f1"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["f1", "s1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["y1"]),
        helper.make_node("Mul", ["xs", "w2s"], ["s2"]),
        helper.make_node("MatMulInteger", ["xq", "w2q", "xz", "w2z"], ["p2"]),
        helper.make_node("Cast", ["p2"], ["f2"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["s2", "f2"], ["y2"]),
    ]
    return two_products_model("dynamic_quant_matmul", nodes, inits, k, n1, n2)


def qdq_qlinear_matmul():
    """Static quantisation's QDQ form around products whose output is quantised again, as
    attention's are: Q(MatMul(DQ(a_q), DQ(b_q))) of two quantised activations (y1), and of an
    activation and 8-bit weights (y2), which kiln folds into QLinearMatMul (the exact integer
    product requantised once, as ONNX Runtime's QDQ selectors do); a third product's float output is
    also a graph output (y3, the Q after it too), so it must stay a float MatMul. The data are drawn
    until the float graph (the reference) and the integer form agree on every output: where a float
    sum lands within its rounding of a half step the two may differ by one step, by design."""
    rng = np.random.default_rng(23)
    m, k, n2 = 6, 16, 10
    sa, za, sb, zb, sw, zw = np.float32(0.05), np.uint8(128), np.float32(0.04), np.uint8(121), np.float32(0.01), np.uint8(127)
    sy1, zy1, sy2, zy2 = np.float32(0.2), np.uint8(125), np.float32(0.1), np.uint8(130)
    wq = rng.integers(64, 192, (k, n2)).astype(np.uint8)  # 7 bits about the zero point: no u8 x s8 saturation
    inits = [numpy_helper.from_array(np.array(v), n) for v, n in
             [(sa, "sa"), (za, "za"), (sb, "sb"), (zb, "zb"), (sw, "sw"), (zw, "zw"), (sy1, "sy1"), (zy1, "zy1"),
              (sy2, "sy2"), (zy2, "zy2")]] + [numpy_helper.from_array(wq, "wq")]
    nodes = [
        helper.make_node("QuantizeLinear", ["a", "sa", "za"], ["aq"]),
        helper.make_node("DequantizeLinear", ["aq", "sa", "za"], ["ad"]),
        helper.make_node("QuantizeLinear", ["b", "sb", "zb"], ["bq"]),
        helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bd"]),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wd"]),
        helper.make_node("MatMul", ["ad", "bd"], ["p1"]),
        helper.make_node("QuantizeLinear", ["p1", "sy1", "zy1"], ["p1q"]),
        helper.make_node("DequantizeLinear", ["p1q", "sy1", "zy1"], ["y1"]),
        helper.make_node("MatMul", ["ad", "wd"], ["p2"]),
        helper.make_node("QuantizeLinear", ["p2", "sy2", "zy2"], ["p2q"]),
        helper.make_node("DequantizeLinear", ["p2q", "sy2", "zy2"], ["y2"]),
        helper.make_node("MatMul", ["bd", "wd"], ["y3"]),
        helper.make_node("QuantizeLinear", ["y3", "sy2", "zy2"], ["y3q"]),
    ]
    g = helper.make_graph(nodes, "qdq_qlinear_matmul",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 2, m, k]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 2, k, k])],
                          [helper.make_tensor_value_info("y1", TensorProto.FLOAT, ["batch", 2, m, k]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["batch", 2, m, n2]),
                           helper.make_tensor_value_info("y3", TensorProto.FLOAT, ["batch", 2, k, n2]),
                           helper.make_tensor_value_info("y3q", TensorProto.UINT8, ["batch", 2, k, n2])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-tests")

    def quant(v, s, z):
        return np.clip(np.rint(v / np.float64(s)) + int(z), 0, 255)

    def integer_form(a, b):
        """QLinearMatMul's arithmetic: the exact integer sum times the float32 ratio, rounded once."""
        qa = quant(a, sa, za).astype(np.int64) - int(za)
        qb = quant(b, sb, zb).astype(np.int64) - int(zb)
        r1 = np.float64(np.float32(np.float32(sa * sb) / sy1))
        r2 = np.float64(np.float32(np.float32(sa * sw) / sy2))
        y1 = np.clip(np.rint(np.matmul(qa, qb) * r1) + int(zy1), 0, 255)
        y2 = np.clip(np.rint(np.matmul(qa, wq.astype(np.int64) - int(zw)) * r2) + int(zy2), 0, 255)
        return (y1 - int(zy1)) * np.float64(sy1), (y2 - int(zy2)) * np.float64(sy2)

    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    data = []
    for n in (1, 3):
        for _ in range(200):
            a = (rng.standard_normal((n, 2, m, k)) * 2).astype(np.float32)
            b = (rng.standard_normal((n, 2, k, k)) * 2).astype(np.float32)
            got = ref.run(["y1", "y2"], {"a": a, "b": b})
            if all(np.array_equal(gv.astype(np.float64), wv.astype(np.float32).astype(np.float64))
                   for gv, wv in zip(got, integer_form(a, b))):
                data.append([a, b])
                break
        else:
            raise RuntimeError("qdq_qlinear_matmul: no draw where the float graph and the integer form agree")
    return model, data


def qdq_conv():
    """Static quantisation's QDQ form around convolutions: Q(Conv(DQ(x_q), DQ(w_q), DQ(b_q))), which
    kiln runs as QLinearConv (the exact integer sum, requantised once) where its integer kernel is
    the faster; a 1-D convolution with per-channel int8 weights and an int32 bias at scale
    xs * ws[m], a 2-D one with per-tensor uint8 weights and an int8 output, a grouped one that
    stays float, a depthwise 1-D one over rows of 64 and a 1x1 one on one position. The data are drawn until the float graph (the reference, ONNX Runtime without
    optimisations) and the integer form's exact result agree on every output: a value whose float
    sum lands within rounding of a half step may differ by one step between the two forms, and
    this test is about the fold's arithmetic, not that rounding."""
    rng = np.random.default_rng(20261205)
    c1, m1, k1, c2, m2 = 16, 96, 9, 32, 48
    xs1, xz1, xs2, xz2 = np.float32(0.03), np.uint8(128), np.float32(0.05), np.uint8(100)
    # halved to 7 bits, as ONNX Runtime's quantiser writes int8 weights for x86: the Python tests
    # compare with ONNX Runtime at its default level, whose u8 x s8 kernel saturates beyond them
    w1q = (rng.integers(-127, 128, (m1, c1, k1)) // 2).astype(np.int8)
    ws1 = rng.uniform(0.002, 0.006, m1).astype(np.float32)
    b1q = rng.integers(-20000, 20000, m1).astype(np.int32)
    bs1 = (xs1 * ws1).astype(np.float32)
    w2q = rng.integers(0, 256, (m2, c2, 3, 3)).astype(np.uint8)
    ws2, wz2 = np.float32(0.004), np.uint8(119)
    w3q = (rng.integers(-127, 128, (c2, c2 // 2, 3, 3)) // 2).astype(np.int8)  # 7 bits, as w1q
    ys1, yz1, ys2, yz2 = np.float32(0.02), np.uint8(120), np.float32(0.06), np.int8(-3)
    # a depthwise 1-D convolution over rows of 64 (5 taps, per-channel weights) and a 1x1 one on
    # one position with 160 terms: the classes fuse_qdq_conv also takes (helper-59)
    c4, c5, m5 = 16, 160, 24
    w4q = (rng.integers(-127, 128, (c4, 1, 5)) // 2).astype(np.int8)
    ws4 = rng.uniform(0.01, 0.03, c4).astype(np.float32)
    w5q = (rng.integers(-127, 128, (m5, c5, 1, 1)) // 2).astype(np.int8)
    ws5 = np.float32(0.004)
    ys4, yz4, ys5, yz5 = np.float32(0.05), np.uint8(130), np.float32(0.04), np.uint8(125)
    a = numpy_helper.from_array
    inits = [a(xs1, "xs1"), a(xz1, "xz1"), a(xs2, "xs2"), a(xz2, "xz2"),
             a(w1q, "w1q"), a(ws1, "ws1"), a(np.zeros(m1, np.int8), "wz1"),
             a(b1q, "b1q"), a(bs1, "bs1"), a(np.zeros(m1, np.int32), "bz1"),
             a(w2q, "w2q"), a(ws2, "ws2"), a(wz2, "wz2"),
             a(w3q, "w3q"), a(np.float32(0.003), "ws3"), a(np.int8(0), "wz3"),
             a(ys1, "ys1"), a(yz1, "yz1"), a(ys2, "ys2"), a(yz2, "yz2"),
             a(w4q, "w4q"), a(ws4, "ws4"), a(np.zeros(c4, np.int8), "wz4"), a(ys4, "ys4"), a(yz4, "yz4"),
             a(w5q, "w5q"), a(ws5, "ws5"), a(np.int8(0), "wz5"), a(ys5, "ys5"), a(yz5, "yz5")]
    nodes = [
        helper.make_node("QuantizeLinear", ["x1", "xs1", "xz1"], ["x1q"]),
        helper.make_node("DequantizeLinear", ["x1q", "xs1", "xz1"], ["x1d"]),
        helper.make_node("DequantizeLinear", ["w1q", "ws1", "wz1"], ["w1d"], axis=0),
        helper.make_node("DequantizeLinear", ["b1q", "bs1", "bz1"], ["b1d"], axis=0),
        helper.make_node("Conv", ["x1d", "w1d", "b1d"], ["c1"], pads=[4, 4]),
        helper.make_node("QuantizeLinear", ["c1", "ys1", "yz1"], ["c1q"]),
        helper.make_node("DequantizeLinear", ["c1q", "ys1", "yz1"], ["y1"]),
        helper.make_node("QuantizeLinear", ["x2", "xs2", "xz2"], ["x2q"]),
        helper.make_node("DequantizeLinear", ["x2q", "xs2", "xz2"], ["x2d"]),
        helper.make_node("DequantizeLinear", ["w2q", "ws2", "wz2"], ["w2d"]),
        helper.make_node("Conv", ["x2d", "w2d"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c2", "ys2", "yz2"], ["c2q"]),
        helper.make_node("DequantizeLinear", ["c2q", "ys2", "yz2"], ["y2"]),
        helper.make_node("DequantizeLinear", ["w3q", "ws3", "wz3"], ["w3d"]),
        # grouped, its float output read as it is: no fold (and none in ONNX Runtime either)
        helper.make_node("Conv", ["x2d", "w3d"], ["y3"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("QuantizeLinear", ["x4", "xs1", "xz1"], ["x4q"]),
        helper.make_node("DequantizeLinear", ["x4q", "xs1", "xz1"], ["x4d"]),
        helper.make_node("DequantizeLinear", ["w4q", "ws4", "wz4"], ["w4d"], axis=0),
        helper.make_node("Conv", ["x4d", "w4d"], ["c4"], pads=[2, 2], group=c4),
        helper.make_node("QuantizeLinear", ["c4", "ys4", "yz4"], ["c4q"]),
        helper.make_node("DequantizeLinear", ["c4q", "ys4", "yz4"], ["y4"]),
        helper.make_node("QuantizeLinear", ["x5", "xs1", "xz1"], ["x5q"]),
        helper.make_node("DequantizeLinear", ["x5q", "xs1", "xz1"], ["x5d"]),
        helper.make_node("DequantizeLinear", ["w5q", "ws5", "wz5"], ["w5d"]),
        helper.make_node("Conv", ["x5d", "w5d"], ["c5"]),
        helper.make_node("QuantizeLinear", ["c5", "ys5", "yz5"], ["c5q"]),
        helper.make_node("DequantizeLinear", ["c5q", "ys5", "yz5"], ["y5"]),
    ]
    g = helper.make_graph(nodes, "qdq_conv",
                          [helper.make_tensor_value_info("x1", TensorProto.FLOAT, ["batch", c1, 24]),
                           helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["batch", c2, 8, 8]),
                           helper.make_tensor_value_info("x4", TensorProto.FLOAT, ["batch", c4, 64]),
                           helper.make_tensor_value_info("x5", TensorProto.FLOAT, ["batch", c5, 1, 1])],
                          [helper.make_tensor_value_info("y1", TensorProto.FLOAT, ["batch", m1, 24]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["batch", m2, 8, 8]),
                           helper.make_tensor_value_info("y3", TensorProto.FLOAT, ["batch", c2, 8, 8]),
                           helper.make_tensor_value_info("y4", TensorProto.FLOAT, ["batch", c4, 64]),
                           helper.make_tensor_value_info("y5", TensorProto.FLOAT, ["batch", m5, 1, 1])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-tests")

    def quant(v, s, z, lo, hi):
        return np.clip(np.round(v / np.float64(s)) + int(z), lo, hi)

    def integer_form(x1, x2, x4, x5):
        """QLinearConv's arithmetic in exact integers and float64 (branches 1, 2, 4 and 5, dequantised)."""
        q1 = (quant(x1, xs1, xz1, 0, 255) - int(xz1)).astype(np.int64)
        p1 = np.pad(q1, ((0, 0), (0, 0), (4, 4)))
        acc1 = np.zeros((x1.shape[0], m1, 24), np.int64)
        for t in range(k1):
            acc1 += np.einsum("ncl,mc->nml", p1[:, :, t:t + 24], w1q[:, :, t].astype(np.int64))
        acc1 += b1q[None, :, None]
        y1 = (quant(acc1 * (np.float64(xs1) * ws1.astype(np.float64))[None, :, None], ys1, 0, -int(yz1), 255 - int(yz1)))
        q2 = (quant(x2, xs2, xz2, 0, 255) - int(xz2)).astype(np.int64)
        p2 = np.pad(q2, ((0, 0), (0, 0), (1, 1), (1, 1)))
        acc2 = np.zeros((x2.shape[0], m2, 8, 8), np.int64)
        for dy in range(3):
            for dx in range(3):
                acc2 += np.einsum("nchw,mc->nmhw", p2[:, :, dy:dy + 8, dx:dx + 8],
                                  w2q[:, :, dy, dx].astype(np.int64) - int(wz2))
        y2 = quant(acc2 * (np.float64(xs2) * np.float64(ws2)), ys2, 0, -128 - int(yz2), 127 - int(yz2))
        q4 = (quant(x4, xs1, xz1, 0, 255) - int(xz1)).astype(np.int64)
        p4 = np.pad(q4, ((0, 0), (0, 0), (2, 2)))
        acc4 = sum(p4[:, :, t:t + 64] * w4q[None, :, 0, t, None].astype(np.int64) for t in range(5))
        y4 = quant(acc4 * (np.float64(xs1) * ws4.astype(np.float64))[None, :, None], ys4, 0, -int(yz4), 255 - int(yz4))
        q5 = (quant(x5, xs1, xz1, 0, 255) - int(xz1)).astype(np.int64)
        acc5 = np.einsum("nchw,mc->nmhw", q5, w5q[:, :, 0, 0].astype(np.int64))
        y5 = quant(acc5 * (np.float64(xs1) * np.float64(ws5)), ys5, 0, -int(yz5), 255 - int(yz5))
        return y1 * np.float64(ys1), y2 * np.float64(ys2), y4 * np.float64(ys4), y5 * np.float64(ys5)

    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    data = []
    for n in (1, 2):
        for _ in range(200):
            x1 = (rng.standard_normal((n, c1, 24)) * 1.5).astype(np.float32)
            x2 = (rng.standard_normal((n, c2, 8, 8)) * 2).astype(np.float32)
            x4 = (rng.standard_normal((n, c4, 64)) * 1.5).astype(np.float32)
            x5 = (rng.standard_normal((n, c5, 1, 1)) * 1.5).astype(np.float32)
            feeds = {"x1": x1, "x2": x2, "x4": x4, "x5": x5}
            got = ref.run(["y1", "y2", "y4", "y5"], feeds)
            want = integer_form(x1, x2, x4, x5)
            if all(np.array_equal(g.astype(np.float64), w.astype(np.float32).astype(np.float64)) for g, w in zip(got, want)):
                data.append([x1, x2, x4, x5])
                break
        else:
            raise RuntimeError("qdq_conv: no draw where the float graph and the integer form agree")
    return m, data


def unrolled_rnn():
    """A recurrence exported step by step (an RNN cell in a Python loop): each step gathers its input
    and multiplies it by the same weights (Gemm with a [1, N] bias, transposed weights) before the
    recurrent product; a second branch takes MatMul products of 4 of the 6 steps; a third, Gemms
    whose bias has a row per batch row, which must stay per step."""
    steps, k, hid, n2 = 6, 20, 16, 8
    inits = [w("wi", hid, k), w("bi", 1, hid, scale=0.1), w("wh", hid, hid), w("bh", hid, scale=0.1), w("w2", k, n2),
             numpy_helper.from_array(np.zeros((1, hid), np.float32), "h_init")]
    nodes, h, outs = [], "h_init", []
    for t in range(steps):
        inits.append(numpy_helper.from_array(np.array(t, np.int64), f"t{t}"))
        nodes += [helper.make_node("Gather", ["x", f"t{t}"], [f"x{t}"], axis=0),
                  helper.make_node("Gemm", [f"x{t}", "wi", "bi"], [f"i{t}"], transB=1),
                  helper.make_node("Gemm", [h, "wh", "bh"], [f"r{t}"], transB=1),
                  helper.make_node("Add", [f"i{t}", f"r{t}"], [f"s{t}"]),
                  helper.make_node("Tanh", [f"s{t}"], [f"h{t}"])]
        h = f"h{t}"
        if t < 4:
            nodes += [helper.make_node("Gather", ["x", f"t{t}"], [f"g{t}"], axis=0),
                      helper.make_node("MatMul", [f"g{t}", "w2"], [f"m{t}"])]
            outs.append(f"m{t}")
    # products whose bias has one row per batch row ([B, N]): each step keeps its own product
    inits.append(w("w3", k, n2))
    inits.append(w("b3", 2, n2, scale=0.1))
    for t in range(steps):
        nodes += [helper.make_node("Gather", ["xb", f"t{t}"], [f"u{t}"], axis=0),
                  helper.make_node("Gemm", [f"u{t}", "w3", "b3"], [f"v{t}"])]
    nodes.append(helper.make_node("Concat", [f"v{t}" for t in range(steps)], ["v"], axis=1))
    nodes.append(helper.make_node("Concat", outs, ["m"], axis=1))
    g = helper.make_graph(nodes, "unrolled_rnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, k]),
                           helper.make_tensor_value_info("xb", TensorProto.FLOAT, [steps, 2, k])],
                          [helper.make_tensor_value_info(h, TensorProto.FLOAT, [1, hid]),
                           helper.make_tensor_value_info("m", TensorProto.FLOAT, [1, 4 * n2]),
                           helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, steps * n2])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-tests")
    data = [[RNG.standard_normal((steps, 1, k)).astype(np.float32), RNG.standard_normal((steps, 2, k)).astype(np.float32)]
            for _ in range(2)]
    return m, data


def decomposed_activations():
    """Opset 13 exports (before HardSwish existed in ONNX): HardSwish as x * Clip(x + 3, 0, 6) / 6
    after a Conv, HardSigmoid as Clip(x / 6 + 0.5, 0, 1) gating channels (squeeze-excite), Relu6
    as Min(Max(x, 0), 6) after a Gemm, SiLU as x / (1 + Exp(-x)), and a lookalike
    (x * Clip(x + 3, 0, 6) / 5) that is none of them. Inputs span the knees at -3 and 3."""
    def s(name, v):
        return numpy_helper.from_array(np.array(v, np.float32), name)
    inits = [w("c1_w", 16, 3, 3, 3, scale=0.6), w("c1_b", 16, scale=0.5), w("dw_w", 16, 1, 3, 3, scale=0.6),
             w("se_w", 16, 16, 1, 1), w("pw_w", 8, 16, 1, 1, scale=0.6), w("pw_b", 8, scale=0.5),
             w("fc_w", 8, 12, scale=0.8), w("fc_b", 12, scale=0.5),
             s("three", 3.0), s("zero", 0.0), s("six", 6.0), s("five", 5.0), s("one", 1.0), s("half", 0.5)]
    nodes = [
        helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c1", "three"], ["c1a"]),
        helper.make_node("Clip", ["c1a", "zero", "six"], ["c1c"]),
        helper.make_node("Mul", ["c1", "c1c"], ["c1m"]),
        helper.make_node("Div", ["c1m", "six"], ["hs"]),
        helper.make_node("Conv", ["hs", "dw_w"], ["dw"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("Neg", ["dw"], ["dwn"]),
        helper.make_node("Exp", ["dwn"], ["dwe"]),
        helper.make_node("Add", ["one", "dwe"], ["dwd"]),
        helper.make_node("Div", ["dw", "dwd"], ["silu"]),
        helper.make_node("GlobalAveragePool", ["silu"], ["gap"]),
        helper.make_node("Conv", ["gap", "se_w"], ["se"]),
        helper.make_node("Div", ["se", "six"], ["se6"]),
        helper.make_node("Add", ["se6", "half"], ["seh"]),
        helper.make_node("Clip", ["seh", "zero", "one"], ["gate"]),
        helper.make_node("Mul", ["silu", "gate"], ["scaled"]),
        helper.make_node("Conv", ["scaled", "pw_w", "pw_b"], ["pw"]),
        helper.make_node("Add", ["pw", "three"], ["pwa"]),
        helper.make_node("Clip", ["pwa", "zero", "six"], ["pwc"]),
        helper.make_node("Mul", ["pw", "pwc"], ["pwm"]),
        helper.make_node("Div", ["pwm", "five"], ["look"]),
        helper.make_node("GlobalAveragePool", ["look"], ["gap2"]),
        helper.make_node("Flatten", ["gap2"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["fc"]),
        helper.make_node("Max", ["fc", "zero"], ["fcm"]),
        helper.make_node("Min", ["fcm", "six"], ["out"]),
    ]
    g = helper.make_graph(nodes, "decomposed_activations",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 12, 12])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 12]),
                           helper.make_tensor_value_info("hs", TensorProto.FLOAT, ["batch", 16, 12, 12])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-tests")
    data = [[(RNG.standard_normal((n, 3, 12, 12)) * 3).astype(np.float32)] for n in (1, 2)]
    return m, data


def float16_cnn():
    """A float16 export as a compressing converter writes it: float16 input and output, weights
    stored as int8 and decompressed in the graph (Cast to float16, Mul by a float16 scale per
    channel), a Conv stack with BatchNormalization and an Erf GELU, a Cast to float16 of a float32
    side input, a Softmax head. On the CPU kiln runs it in float32 (raise_float16), as ONNX
    Runtime and OpenVINO do."""
    def q(name, *shape):
        a = (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)
        scale = (np.abs(a).reshape(shape[0], -1).max(axis=1) / 127).astype(np.float16)
        stored = np.clip(np.round(a / scale.astype(np.float32).reshape((-1,) + (1,) * (len(shape) - 1))), -127, 127)
        return [numpy_helper.from_array(stored.astype(np.int8), name + "_q"),
                numpy_helper.from_array(scale.reshape((-1,) + (1,) * (len(shape) - 1)), name + "_s")]

    def h(name, *shape, scale=0.3, shift=0.0):
        return numpy_helper.from_array((RNG.standard_normal(shape) * scale + shift).astype(np.float16), name)
    inits = q("c1", 16, 3, 3, 3) + q("c2", 16, 16, 3, 3) + q("fc", 10, 16)
    inits += [h("bn_s", 16, shift=1.0), h("bn_b", 16), h("bn_m", 16), h("bn_v", 16, scale=0.1, shift=1.0),
              numpy_helper.from_array(np.array(1.4140625, np.float16), "sqrt2"),
              numpy_helper.from_array(np.array(1.0, np.float16), "one"),
              numpy_helper.from_array(np.array(0.5, np.float16), "half")]
    nodes = []
    for name in ("c1", "c2", "fc"):
        nodes += [helper.make_node("Cast", [name + "_q"], [name + "_c"], to=TensorProto.FLOAT16),
                  helper.make_node("Mul", [name + "_c", name + "_s"], [name + "_w"])]
    nodes += [
        helper.make_node("Cast", ["bias32"], ["bias16"], to=TensorProto.FLOAT16),
        helper.make_node("Add", ["x", "bias16"], ["xb"]),
        helper.make_node("Conv", ["xb", "c1_w"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"]),
        helper.make_node("Div", ["bn", "sqrt2"], ["g1"]),
        helper.make_node("Erf", ["g1"], ["g2"]),
        helper.make_node("Add", ["g2", "one"], ["g3"]),
        helper.make_node("Mul", ["bn", "g3"], ["g4"]),
        helper.make_node("Mul", ["g4", "half"], ["gelu"]),
        helper.make_node("Conv", ["gelu", "c2_w"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc_w"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=-1),
        helper.make_node("Cast", ["logits"], ["logits32"], to=TensorProto.FLOAT),
    ]
    g = helper.make_graph(nodes, "float16_cnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 3, 16, 16]),
                           helper.make_tensor_value_info("bias32", TensorProto.FLOAT, [1, 3, 1, 1])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT16, ["batch", 10]),
                           helper.make_tensor_value_info("logits32", TensorProto.FLOAT, ["batch", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-tests")
    data = [[RNG.standard_normal((n, 3, 16, 16)).astype(np.float16), RNG.standard_normal((1, 3, 1, 1)).astype(np.float32)]
            for n in (1, 2)]
    return m, data


def clamped_activations():
    """A constant clamp after an activation, which kiln folds into the fused node before it:
    openWakeWord's Conv -> LeakyRelu -> Max(x, -0.4), Tanh -> Clip(-0.3, 0.5), Relu -> Max(x, 0.25)
    (one Clip), Gemm -> Sigmoid -> Max(0.2, x) -> Min(x, 0.7); and what must not fold: Max before
    the LeakyRelu, a per-channel bound, a LeakyRelu output read by its Max and also an output."""
    def s(name, v):
        return numpy_helper.from_array(np.array(v, np.float32), name)
    inits = [w("c1_w", 16, 3, 3, 3), w("c1_b", 16, scale=0.3), w("c2_w", 16, 16, 3, 3), w("c2_b", 16, scale=0.3),
             w("c3_w", 16, 16, 1, 1), w("c3_b", 16, scale=0.3), w("c4_w", 16, 16, 3, 3), w("c5_w", 16, 16, 1, 1),
             w("c6_w", 16, 16, 1, 1), w("fc_w", 16, 10), w("fc_b", 10, scale=0.3),
             s("m04", -0.4), s("lo3", -0.3), s("hi5", 0.5), s("q25", 0.25), s("m01", -0.1), s("p2", 0.2),
             s("p7", 0.7),
             numpy_helper.from_array((RNG.uniform(-0.3, 0.0, (1, 16, 1, 1))).astype(np.float32), "per_ch")]
    nodes = [
        helper.make_node("Conv", ["x", "c1_w", "c1_b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c1"], ["l1"], alpha=0.2),
        helper.make_node("Max", ["l1", "m04"], ["a1"]),
        helper.make_node("Conv", ["a1", "c2_w", "c2_b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Tanh", ["c2"], ["t2"]),
        helper.make_node("Clip", ["t2", "lo3", "hi5"], ["a2"]),
        helper.make_node("Conv", ["a2", "c3_w", "c3_b"], ["c3"]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Max", ["r3", "q25"], ["a3"]),
        # lookalikes: Max before the activation; a per-channel bound; a second reader
        helper.make_node("Conv", ["a3", "c4_w"], ["c4"], pads=[1, 1, 1, 1]),
        helper.make_node("Max", ["c4", "m01"], ["m4"]),
        helper.make_node("LeakyRelu", ["m4"], ["a4"], alpha=0.3),
        helper.make_node("Conv", ["a4", "c5_w"], ["c5"]),
        helper.make_node("LeakyRelu", ["c5"], ["l5"], alpha=0.1),
        helper.make_node("Max", ["l5", "per_ch"], ["a5"]),
        helper.make_node("Conv", ["a5", "c6_w"], ["c6"]),
        helper.make_node("LeakyRelu", ["c6"], ["l6"], alpha=0.1),
        helper.make_node("Max", ["l6", "m01"], ["a6"]),
        helper.make_node("GlobalAveragePool", ["a6"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["fc"]),
        helper.make_node("Sigmoid", ["fc"], ["sg"]),
        helper.make_node("Max", ["p2", "sg"], ["sgm"]),
        helper.make_node("Min", ["sgm", "p7"], ["out"]),
    ]
    g = helper.make_graph(nodes, "clamped_activations",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 12, 12])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 10]),
                           helper.make_tensor_value_info("l6", TensorProto.FLOAT, ["batch", 16, 12, 12]),
                           helper.make_tensor_value_info("a1", TensorProto.FLOAT, ["batch", 16, 12, 12])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="kiln-tests")
    data = [[(RNG.standard_normal((n, 3, 12, 12)) * 2).astype(np.float32)] for n in (1, 2)]
    return m, data


def write(out, name, model, data):
    import onnxruntime as ort
    # IR 10 (ONNX 1.16): what every ONNX Runtime still in use loads (the GPU host's 1.30 refuses the
    # IR version newer onnx packages write by default); nothing here needs a newer one
    model.ir_version = min(model.ir_version, 10)
    onnx.checker.check_model(model)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    in_names = [i.name for i in sess.get_inputs()]
    out_names = [o.name for o in sess.get_outputs()]
    for k, inputs in enumerate(data):
        ds = os.path.join(d, f"test_data_set_{k}")
        os.makedirs(ds, exist_ok=True)
        outs = sess.run(None, dict(zip(in_names, inputs)))
        for i, (n, v) in enumerate(zip(in_names, inputs)):
            with open(os.path.join(ds, f"input_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())
        for i, (n, v) in enumerate(zip(out_names, outs)):
            with open(os.path.join(ds, f"output_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(v, n).SerializeToString())


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    zoo = {}
    for name, build in (("tiny_cnn", tiny_cnn), ("tiny_transformer", tiny_transformer), ("tiny_rnn", tiny_rnn),
                        ("mha_static", mha_static), ("qdq_matmul", qdq_matmul), ("qdq_conv", qdq_conv),
                        ("qdq_qlinear_matmul", qdq_qlinear_matmul),
                        ("unrolled_rnn", unrolled_rnn), ("decomposed_activations", decomposed_activations),
                        ("float16_cnn", float16_cnn), ("clamped_activations", clamped_activations),
                        ("dynamic_quant_matmul", dynamic_quant_matmul)):
        model, data = build()
        write(out, name, model, data)
        # float16: level 0 rounds after every operator, ONNX Runtime and the later levels compute
        # in float32 (outputs of order 1: float16's spacing there is 1e-3)
        tol = (1e-2, 1e-2) if name == "float16_cnn" else (1e-3, 1e-4)
        zoo[name] = {"rtol": tol[0], "atol": tol[1], "data_sets": len(data),
                     "ops": sorted({n.op_type for n in model.graph.node})}
    with open(os.path.join(out, "zoo.json"), "w") as f:
        json.dump(zoo, f, indent=1, sort_keys=True)
    print(f"wrote {len(zoo)} models to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
