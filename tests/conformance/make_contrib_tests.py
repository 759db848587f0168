#!/usr/bin/env python3
"""Tests for the com.microsoft operators (and ONNX Runtime's opset-1 LayerNormalization and
SimplifiedLayerNormalization) and the ONNX integer products (MatMulInteger, ConvInteger,
QLinearMatMul, QLinearConv: their shape classes beyond the ONNX node tests' few) against
onnxruntime's CPU outputs.

Builds small models with onnx.helper for each operator in several attribute and shape variants,
runs them with onnxruntime (CPUExecutionProvider) on seeded random inputs, and writes each in the
backend-test layout that `kiln test` reads:

    OUT/test_contrib_NAME/model.onnx
    OUT/test_contrib_NAME/test_data_set_0/input_I.pb, output_I.pb

BiasAdd and BiasSplitGelu have no CPU kernel in onnxruntime; their expected outputs come from
the formulas in onnxruntime's operator documentation, computed with numpy in float64. Nor has
MultiHeadAttention's CPU kernel the packed QKV / packed KV layouts: those tests expect
onnxruntime's outputs for the same data passed unpacked, and Attention's (B, 1, M, M) mask those for
the equivalent (B, S, T) mask.

Usage: make_contrib_tests.py OUT_DIR
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

MS = "com.microsoft"
NP2TP = {np.float32: TP.FLOAT, np.float16: TP.FLOAT16, np.float64: TP.DOUBLE, np.int32: TP.INT32,
         np.int64: TP.INT64, np.bool_: TP.BOOL, np.uint8: TP.UINT8, np.int8: TP.INT8}

written = []
skipped = []


def tp(a):
    return NP2TP[a.dtype.type]


def make_model(node, inputs, outputs, opset=17, initializers=()):
    """inputs: list of (name, array or None for an omitted optional input); those named in
    initializers are stored in the model as constants instead of graph inputs."""
    ins = [helper.make_tensor_value_info(n, tp(a), list(a.shape)) for n, a in inputs
           if a is not None and n not in initializers]
    inits = [numpy_helper.from_array(a, n) for n, a in inputs if a is not None and n in initializers]
    outs = [helper.make_empty_tensor_value_info(n) for n in outputs if n]
    g = helper.make_graph([node], "g", ins, outs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    m.ir_version = 9
    return m


def write(out_dir, name, model, inputs, results):
    d = os.path.join(out_dir, "test_contrib_" + name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    # declare the output types the reference produced
    for o, r in zip(model.graph.output, results):
        o.type.tensor_type.elem_type = tp(np.asarray(r))
        del o.type.tensor_type.shape.dim[:]
        for s in np.asarray(r).shape:
            o.type.tensor_type.shape.dim.add().dim_value = s
    onnx.save(model, os.path.join(d, "model.onnx"))
    init_names = {t.name for t in model.graph.initializer}
    present = [(n, a) for n, a in inputs if a is not None and n not in init_names]
    for i, (n, a) in enumerate(present):
        onnx.save_tensor(numpy_helper.from_array(a, n), os.path.join(d, "test_data_set_0", f"input_{i}.pb"))
    for i, (o, r) in enumerate(zip(model.graph.output, results)):
        onnx.save_tensor(numpy_helper.from_array(np.asarray(r), o.name),
                         os.path.join(d, "test_data_set_0", f"output_{i}.pb"))
    written.append(name)


def ort_run(node, inputs, outputs, opset=17, initializers=(), threads=0):
    import onnxruntime as ort
    model = make_model(node, inputs, outputs, opset, initializers)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: a for n, a in inputs if a is not None and n not in initializers})


def case(out_dir, name, op, inputs, outputs, domain=MS, opset=17, reference=None, initializers=(), node_attrs=None,
         ort_threads=0, **attrs):
    """One test: node op(inputs) -> outputs with attrs; expected outputs from onnxruntime (or from
    `reference(inputs)` for operators onnxruntime has no CPU kernel for). Inputs named in
    initializers are constants of the model (weights, as quantisation tools write them); node_attrs
    holds attributes whose names clash with this function's parameters (QLinearSoftmax's opset)."""
    attrs.update(node_attrs or {})
    inputs = [(n, None if a is None else np.asarray(a)) for n, a in inputs]
    node = helper.make_node(op, [n if a is not None else "" for n, a in inputs], outputs, domain=domain, **attrs)
    model = make_model(node, inputs, outputs, opset, initializers)
    if reference is not None:
        results = reference(dict(inputs))
    else:
        try:
            results = ort_run(node, inputs, outputs, opset, initializers, ort_threads)
        except Exception as e:  # an operator variant this onnxruntime build does not run
            skipped.append(f"{name}: {str(e).splitlines()[0][:160]}")
            return
    write(out_dir, name, model, inputs, results)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240611)

    def f32(*shape, lo=-2.0, hi=2.0):
        return rng.uniform(lo, hi, shape).astype(np.float32)

    def f16(*shape, lo=-2.0, hi=2.0):
        return rng.uniform(lo, hi, shape).astype(np.float16)

    # ---------------------------------------------------------------- activations
    case(out, "gelu", "Gelu", [("X", f32(2, 3, 16, lo=-5, hi=5))], ["Y"])
    case(out, "gelu_1d", "Gelu", [("X", f32(37, lo=-5, hi=5))], ["Y"])
    case(out, "fastgelu", "FastGelu", [("X", f32(2, 3, 16, lo=-5, hi=5))], ["Y"])
    case(out, "fastgelu_bias", "FastGelu", [("X", f32(2, 3, 16, lo=-5, hi=5)), ("bias", f32(16))], ["Y"])
    case(out, "biasgelu", "BiasGelu", [("A", f32(2, 3, 16, lo=-5, hi=5)), ("B", f32(16))], ["C"])
    case(out, "biasgelu_2d", "BiasGelu", [("A", f32(5, 24, lo=-5, hi=5)), ("B", f32(24))], ["C"])
    case(out, "quickgelu", "QuickGelu", [("X", f32(2, 3, 16, lo=-6, hi=6))], ["Y"])
    case(out, "quickgelu_alpha", "QuickGelu", [("X", f32(4, 33, lo=-6, hi=6))], ["Y"], alpha=1.0)

    def gelu64(x):
        from math import erf, sqrt
        return 0.5 * x * (1.0 + np.vectorize(lambda v: erf(v / sqrt(2.0)))(x))

    def ref_bias_add(d):
        return [(d["X"].astype(np.float64) + d["bias"] + d["skip"]).astype(np.float32)]

    def ref_bias_split_gelu(d):
        x = d["X"].astype(np.float64) + d["bias"]
        half = x.shape[-1] // 2
        return [(x[..., :half] * gelu64(x[..., half:])).astype(np.float32)]

    case(out, "biasadd", "BiasAdd", [("X", f32(2, 6, 8)), ("bias", f32(8)), ("skip", f32(2, 6, 8))], ["Y"],
         reference=ref_bias_add)
    case(out, "biassplitgelu", "BiasSplitGelu", [("X", f32(2, 6, 16)), ("bias", f32(16))], ["Y"],
         reference=ref_bias_split_gelu)

    # ---------------------------------------------------------------- normalisations
    H = 32
    case(out, "skiplayernorm", "SkipLayerNormalization",
         [("input", f32(2, 4, H)), ("skip", f32(2, 4, H)), ("gamma", f32(H)), ("beta", f32(H))], ["output"])
    case(out, "skiplayernorm_bias_all_outputs", "SkipLayerNormalization",
         [("input", f32(2, 4, H)), ("skip", f32(2, 4, H)), ("gamma", f32(H)), ("beta", f32(H)), ("bias", f32(H))],
         ["output", "mean", "inv_std_var", "input_skip_bias_sum"], epsilon=1e-6)
    case(out, "skiplayernorm_no_beta_bias", "SkipLayerNormalization",
         [("input", f32(2, 4, H)), ("skip", f32(2, 4, H)), ("gamma", f32(H)), ("beta", None), ("bias", f32(H))],
         ["output", "", "", "input_skip_bias_sum"])
    case(out, "skiplayernorm_skip_broadcast3d", "SkipLayerNormalization",
         [("input", f32(3, 4, H)), ("skip", f32(1, 4, H)), ("gamma", f32(H)), ("beta", f32(H))], ["output"])
    case(out, "skiplayernorm_skip_broadcast2d", "SkipLayerNormalization",
         [("input", f32(3, 4, H)), ("skip", f32(4, H)), ("gamma", f32(H)), ("beta", f32(H))], ["output"])
    case(out, "skiplayernorm_fp16", "SkipLayerNormalization",
         [("input", f16(2, 4, H)), ("skip", f16(2, 4, H)), ("gamma", f16(H)), ("beta", f16(H))], ["output"])
    case(out, "skiplayernorm_hidden768", "SkipLayerNormalization",
         [("input", f32(1, 7, 768)), ("skip", f32(1, 7, 768)), ("gamma", f32(768)), ("beta", f32(768))],
         ["output"])
    case(out, "skipsimplifiedlayernorm", "SkipSimplifiedLayerNormalization",
         [("input", f32(2, 4, H)), ("skip", f32(2, 4, H)), ("gamma", f32(H))], ["output"])
    case(out, "skipsimplifiedlayernorm_bias_all_outputs", "SkipSimplifiedLayerNormalization",
         [("input", f32(2, 4, H)), ("skip", f32(2, 4, H)), ("gamma", f32(H)), ("bias", f32(H))],
         ["output", "mean", "inv_std_var", "input_skip_bias_sum"], epsilon=1e-6)
    case(out, "skipsimplifiedlayernorm_2d", "SkipSimplifiedLayerNormalization",
         [("input", f32(6, H)), ("skip", f32(6, H)), ("gamma", f32(H))], ["output", "", "", "input_skip_bias_sum"])
    case(out, "skipsimplifiedlayernorm_fp16", "SkipSimplifiedLayerNormalization",
         [("input", f16(2, 4, H)), ("skip", f16(2, 4, H)), ("gamma", f16(H))], ["output"])
    case(out, "layernorm_opset13", "LayerNormalization", [("X", f32(2, 5, H)), ("Scale", f32(H)), ("B", f32(H))],
         ["Y"], domain="", opset=13)
    case(out, "layernorm_opset13_axis1_outputs", "LayerNormalization",
         [("X", f32(2, 3, 8)), ("Scale", f32(3, 8)), ("B", f32(3, 8))], ["Y", "Mean", "InvStdDev"], domain="",
         opset=13, axis=1, epsilon=1e-3)
    case(out, "layernorm_opset13_no_bias", "LayerNormalization", [("X", f32(4, H)), ("Scale", f32(H))], ["Y"],
         domain="", opset=13)
    case(out, "layernorm_opset13_fp16", "LayerNormalization",
         [("X", f16(2, 5, H)), ("Scale", f16(H)), ("B", f16(H))], ["Y"], domain="", opset=13)
    case(out, "simplifiedlayernorm", "SimplifiedLayerNormalization", [("X", f32(2, 5, H)), ("scale", f32(H))], ["Y"],
         domain="", opset=13)
    case(out, "simplifiedlayernorm_axis1_inv", "SimplifiedLayerNormalization",
         [("X", f32(2, 3, 8)), ("scale", f32(3, 8))], ["Y", "inv_std_var"], domain="", opset=13, axis=1,
         epsilon=1e-3)
    case(out, "simplifiedlayernorm_opset17", "SimplifiedLayerNormalization", [("X", f32(3, 64)), ("scale", f32(64))],
         ["Y"], domain="", opset=17)
    case(out, "simplifiedlayernorm_fp16", "SimplifiedLayerNormalization", [("X", f16(2, 5, H)), ("scale", f16(H))],
         ["Y"], domain="", opset=13)

    Bs, Ss, Hs, Vs = 2, 5, 32, 40
    ids = rng.integers(0, Vs, (Bs, Ss)).astype(np.int32)
    seg = rng.integers(0, 2, (Bs, Ss)).astype(np.int32)
    we, pe, se = f32(Vs, Hs), f32(16, Hs), f32(2, Hs)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    case(out, "embedlayernorm", "EmbedLayerNormalization",
         [("input_ids", ids), ("segment_ids", seg), ("word_embedding", we), ("position_embedding", pe),
          ("segment_embedding", se), ("gamma", f32(Hs)), ("beta", f32(Hs)), ("mask", mask)],
         ["output", "mask_index", "embedding_sum"])
    case(out, "embedlayernorm_no_segment", "EmbedLayerNormalization",
         [("input_ids", ids), ("segment_ids", None), ("word_embedding", we), ("position_embedding", pe),
          ("segment_embedding", None), ("gamma", f32(Hs)), ("beta", f32(Hs))], ["output", "mask_index"], epsilon=1e-5)
    case(out, "embedlayernorm_position_ids", "EmbedLayerNormalization",
         [("input_ids", ids), ("segment_ids", seg), ("word_embedding", we), ("position_embedding", pe),
          ("segment_embedding", se), ("gamma", f32(Hs)), ("beta", f32(Hs)), ("mask", mask),
          ("position_ids", rng.integers(0, 16, (1, Ss)).astype(np.int32))], ["output", "mask_index"])

    # ---------------------------------------------------------------- FusedMatMul
    case(out, "fusedmatmul", "FusedMatMul", [("A", f32(2, 3, 4)), ("B", f32(2, 4, 5))], ["Y"])
    case(out, "fusedmatmul_alpha_transB", "FusedMatMul", [("A", f32(2, 3, 4)), ("B", f32(2, 5, 4))], ["Y"], alpha=0.125,
         transB=1)
    case(out, "fusedmatmul_transA", "FusedMatMul", [("A", f32(2, 4, 3)), ("B", f32(2, 4, 5))], ["Y"], transA=1)
    case(out, "fusedmatmul_transA_transB_2d", "FusedMatMul", [("A", f32(4, 3)), ("B", f32(5, 4))], ["Y"], transA=1,
         transB=1, alpha=2.0)
    case(out, "fusedmatmul_transBatchA", "FusedMatMul", [("A", f32(3, 2, 5, 4)), ("B", f32(2, 5, 4, 6))], ["Y"],
         transBatchA=1)
    case(out, "fusedmatmul_transBatchA_transA", "FusedMatMul", [("A", f32(4, 2, 3)), ("B", f32(2, 4, 5))], ["Y"],
         transBatchA=1, transA=1)
    case(out, "fusedmatmul_transBatchB_transB", "FusedMatMul", [("A", f32(2, 3, 4)), ("B", f32(5, 2, 4))], ["Y"],
         transBatchB=1, transB=1)
    case(out, "fusedmatmul_broadcast", "FusedMatMul", [("A", f32(2, 1, 3, 4)), ("B", f32(5, 4, 6))], ["Y"], alpha=0.5)
    case(out, "fusedmatmul_bert_scores", "FusedMatMul", [("A", f32(1, 4, 16, 32)), ("B", f32(1, 4, 16, 32))], ["Y"],
         transB=1, alpha=0.17677669)
    case(out, "fusedmatmul_double", "FusedMatMul",
         [("A", rng.uniform(-1, 1, (2, 3, 4))), ("B", rng.uniform(-1, 1, (2, 5, 4)))], ["Y"], transB=1, alpha=0.5)

    # ---------------------------------------------------------------- RotaryEmbedding (contrib)
    def cache(max_pos, half, dtype=np.float32):
        inv = 1.0 / (10000 ** (np.arange(half) / half))
        ang = np.outer(np.arange(max_pos), inv)
        return np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)

    cos, sin = cache(64, 8)
    pos = rng.integers(0, 60, (2, 5)).astype(np.int64)
    case(out, "rotary_3d_positions", "RotaryEmbedding",
         [("input", f32(2, 5, 4 * 16)), ("position_ids", pos), ("cos_cache", cos), ("sin_cache", sin)], ["output"])
    case(out, "rotary_3d_offset", "RotaryEmbedding",
         [("input", f32(2, 5, 4 * 16)), ("position_ids", np.array([7], np.int64)), ("cos_cache", cos),
          ("sin_cache", sin)], ["output"])
    case(out, "rotary_3d_interleaved", "RotaryEmbedding",
         [("input", f32(2, 5, 4 * 16)), ("position_ids", pos), ("cos_cache", cos), ("sin_cache", sin)], ["output"],
         interleaved=1)
    case(out, "rotary_4d", "RotaryEmbedding",
         [("input", f32(2, 4, 5, 16)), ("position_ids", pos), ("cos_cache", cos), ("sin_cache", sin)], ["output"])
    case(out, "rotary_4d_interleaved", "RotaryEmbedding",
         [("input", f32(2, 4, 5, 16)), ("position_ids", pos), ("cos_cache", cos), ("sin_cache", sin)], ["output"],
         interleaved=1)
    cos8, sin8 = cache(64, 4)
    case(out, "rotary_partial", "RotaryEmbedding",
         [("input", f32(2, 5, 4 * 16)), ("position_ids", pos), ("cos_cache", cos8), ("sin_cache", sin8)], ["output"],
         num_heads=4, rotary_embedding_dim=8)
    case(out, "rotary_partial_interleaved", "RotaryEmbedding",
         [("input", f32(2, 5, 4 * 16)), ("position_ids", pos), ("cos_cache", cos8), ("sin_cache", sin8)], ["output"],
         num_heads=4, rotary_embedding_dim=8, interleaved=1)
    cosh, sinh = cache(64, 8, np.float16)
    case(out, "rotary_fp16", "RotaryEmbedding",
         [("input", f16(2, 5, 4 * 16)), ("position_ids", pos), ("cos_cache", cosh), ("sin_cache", sinh)], ["output"])

    # ---------------------------------------------------------------- Attention (contrib)
    B, S, Din, N, Hd = 2, 6, 16, 4, 8
    D = N * Hd
    x = f32(B, S, Din, lo=-1, hi=1)
    w = f32(Din, 3 * D, lo=-0.5, hi=0.5)
    bias = f32(3 * D, lo=-0.5, hi=0.5)
    case(out, "attention", "Attention", [("input", x), ("weights", w), ("bias", bias)], ["output"], num_heads=N)
    case(out, "attention_no_bias", "Attention", [("input", x), ("weights", w)], ["output"], num_heads=N)
    case(out, "attention_unidirectional", "Attention", [("input", x), ("weights", w), ("bias", bias)], ["output"],
         num_heads=N, unidirectional=1)
    case(out, "attention_scale", "Attention", [("input", x), ("weights", w), ("bias", bias)], ["output"],
         num_heads=N, scale=0.05)
    lens = np.array([6, 3], np.int32)
    case(out, "attention_mask_1d", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", lens)], ["output"], num_heads=N)
    se = np.array([5, 6, 1, 2], np.int32)
    case(out, "attention_mask_1d_start_end", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", se)], ["output"], num_heads=N)
    m2 = np.array([[1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1]], np.int32)
    case(out, "attention_mask_2d", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", m2)], ["output"], num_heads=N)
    case(out, "attention_mask_2d_filter", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", m2)], ["output"], num_heads=N,
         mask_filter_value=-1000.0)
    m2z = np.array([[1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], np.int32)
    case(out, "attention_mask_2d_fully_masked", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", m2z)], ["output"], num_heads=N)
    m3 = rng.integers(0, 2, (B, S, S)).astype(np.int32)
    m3[:, :, 0] = 1
    case(out, "attention_mask_3d", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", m3)], ["output"], num_heads=N)
    case(out, "attention_mask_1d_zero_length", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", np.array([4, 0], np.int32))], ["output"],
         num_heads=N)
    m4 = np.tril(np.ones((8, 8), np.int32))[None, None].repeat(B, 0)
    m4[1, 0, :, 0] = 0

    def attention_mask_3d_equivalent(d):
        # onnxruntime's CPU kernel has no (B, 1, M, M) mask: the same rows and columns as (B, S, T)
        node = helper.make_node("Attention", ["input", "weights", "bias", "mask_index"], ["output"], domain=MS,
                                num_heads=N)
        m3_ = np.ascontiguousarray(d["mask_index"][:, 0, :S, :S])
        return ort_run(node, [("input", d["input"]), ("weights", d["weights"]), ("bias", d["bias"]),
                              ("mask_index", m3_)], ["output"])

    case(out, "attention_mask_4d", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", m4)], ["output"], num_heads=N,
         reference=attention_mask_3d_equivalent)
    case(out, "attention_mask_2d_unidirectional", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", m2)], ["output"], num_heads=N,
         unidirectional=1)
    P = 3
    past = f32(2, B, N, P, Hd, lo=-1, hi=1)
    mp = np.ones((B, P + S), np.int32)
    mp[1, :2] = 0
    case(out, "attention_past_present", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", mp), ("past", past)], ["output", "present"],
         num_heads=N, unidirectional=1)
    case(out, "attention_past_present_no_mask", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", None), ("past", past)], ["output", "present"],
         num_heads=N, unidirectional=1)
    x1 = f32(B, 1, Din, lo=-1, hi=1)
    case(out, "attention_decode_step", "Attention",
         [("input", x1), ("weights", w), ("bias", bias), ("mask_index", None), ("past", past)], ["output", "present"],
         num_heads=N, unidirectional=1)
    ab = f32(1, N, S, S, lo=-1, hi=1)
    case(out, "attention_bias", "Attention",
         [("input", x), ("weights", w), ("bias", bias), ("mask_index", None), ("past", None),
          ("attention_bias", ab)], ["output"], num_heads=N)
    wv = f32(Din, D + D + 2 * N * 4, lo=-0.5, hi=0.5)
    bv = f32(D + D + 2 * N * 4, lo=-0.5, hi=0.5)
    case(out, "attention_qkv_hidden_sizes", "Attention", [("input", x), ("weights", wv), ("bias", bv)], ["output"],
         num_heads=N, qkv_hidden_sizes=[D, D, 2 * N * 4])

    # ---------------------------------------------------------------- MultiHeadAttention
    L = 7
    q = f32(B, S, D, lo=-1, hi=1)
    k = f32(B, L, D, lo=-1, hi=1)
    v = f32(B, L, D, lo=-1, hi=1)
    mb = f32(3 * D, lo=-0.5, hi=0.5)
    case(out, "mha", "MultiHeadAttention", [("query", q), ("key", k), ("value", v)], ["output"], num_heads=N)
    case(out, "mha_self_causal", "MultiHeadAttention", [("query", q), ("key", q[:, :, :]), ("value", f32(B, S, D))],
         ["output"], num_heads=N, unidirectional=1)
    case(out, "mha_bias", "MultiHeadAttention", [("query", q), ("key", k), ("value", v), ("bias", mb)], ["output"],
         num_heads=N)
    case(out, "mha_scale", "MultiHeadAttention", [("query", q), ("key", k), ("value", v)], ["output"], num_heads=N,
         scale=0.3)
    vv = f32(B, L, N * 4, lo=-1, hi=1)
    case(out, "mha_v_head_size", "MultiHeadAttention", [("query", q), ("key", k), ("value", vv)], ["output"],
         num_heads=N)
    kl = np.array([7, 4], np.int32)
    case(out, "mha_key_padding_1d", "MultiHeadAttention",
         [("query", q), ("key", k), ("value", v), ("bias", None), ("key_padding_mask", kl)], ["output"], num_heads=N)
    kp = np.ones((B, L), np.int32)
    kp[0, 5:] = 0
    kp[1, :3] = 0
    case(out, "mha_key_padding_2d", "MultiHeadAttention",
         [("query", q), ("key", k), ("value", v), ("bias", None), ("key_padding_mask", kp)], ["output"], num_heads=N)
    kp3 = rng.integers(0, 2, (B, S, L)).astype(np.int32)
    kp3[:, :, 1] = 1
    case(out, "mha_key_padding_3d", "MultiHeadAttention",
         [("query", q), ("key", k), ("value", v), ("bias", None), ("key_padding_mask", kp3)], ["output"], num_heads=N)
    case(out, "mha_key_padding_1d_fully_masked", "MultiHeadAttention",
         [("query", q), ("key", k), ("value", v), ("bias", None), ("key_padding_mask", np.array([7, 0], np.int32))],
         ["output"], num_heads=N)
    kps = np.ones((B, S), np.int32)
    kps[1, 0] = 0
    kps[0, 4:] = 0
    case(out, "mha_self_causal_key_padding", "MultiHeadAttention",
         [("query", q), ("key", f32(B, S, D)), ("value", f32(B, S, D)), ("bias", None), ("key_padding_mask", kps)],
         ["output"], num_heads=N, unidirectional=1)
    mab = f32(B, N, S, L, lo=-1, hi=1)
    case(out, "mha_attention_bias", "MultiHeadAttention",
         [("query", q), ("key", k), ("value", v), ("bias", None), ("key_padding_mask", None), ("attention_bias", mab)],
         ["output"], num_heads=N)
    mab1 = f32(1, 1, S, L, lo=-1, hi=1)
    case(out, "mha_attention_bias_broadcast", "MultiHeadAttention",
         [("query", q), ("key", k), ("value", v), ("bias", mb), ("key_padding_mask", kp), ("attention_bias", mab1)],
         ["output"], num_heads=N)
    # onnxruntime's CPU kernel has no packed layouts: their expected outputs are onnxruntime's for
    # the same data unpacked into separate query, key and value
    def mha_unpacked(**attrs):
        def ref(d):
            qq = d["query"]
            if qq.ndim == 5:
                b_, s_, n_, _, h_ = qq.shape
                parts = [qq[:, :, :, i, :].reshape(b_, s_, n_ * h_) for i in range(3)]
            else:
                kv = d["key"]
                b_, l_, n_, _, h_ = kv.shape
                parts = [qq] + [kv[:, :, :, i, :].reshape(b_, l_, n_ * h_) for i in range(2)]
            ins = [("query", parts[0]), ("key", parts[1]), ("value", parts[2])]
            node = helper.make_node("MultiHeadAttention", ["query", "key", "value"], ["output"], domain=MS, **attrs)
            return ort_run(node, ins, ["output"])
        return ref

    packed = f32(B, S, N, 3, Hd, lo=-1, hi=1)
    case(out, "mha_packed_qkv", "MultiHeadAttention", [("query", packed)], ["output"], num_heads=N,
         reference=mha_unpacked(num_heads=N))
    case(out, "mha_packed_qkv_causal", "MultiHeadAttention", [("query", packed)], ["output"], num_heads=N,
         unidirectional=1, reference=mha_unpacked(num_heads=N, unidirectional=1))
    packed_kv = f32(B, L, N, 2, Hd, lo=-1, hi=1)
    case(out, "mha_packed_kv", "MultiHeadAttention", [("query", q), ("key", packed_kv)], ["output"], num_heads=N,
         reference=mha_unpacked(num_heads=N))
    kb = f32(B, N, L, Hd, lo=-1, hi=1)
    vb = f32(B, N, L, Hd, lo=-1, hi=1)
    case(out, "mha_cross_bnsh", "MultiHeadAttention", [("query", q), ("key", kb), ("value", vb)], ["output"],
         num_heads=N)
    pk = f32(B, N, P, Hd, lo=-1, hi=1)
    pv = f32(B, N, P, Hd, lo=-1, hi=1)
    kself = f32(B, S, D, lo=-1, hi=1)
    vself = f32(B, S, D, lo=-1, hi=1)
    case(out, "mha_past_present", "MultiHeadAttention",
         [("query", q), ("key", kself), ("value", vself), ("bias", mb), ("key_padding_mask", None),
          ("attention_bias", None), ("past_key", pk), ("past_value", pv)],
         ["output", "present_key", "present_value"], num_heads=N, unidirectional=1)
    kpp = np.ones((B, P + S), np.int32)
    kpp[0, :2] = 0
    case(out, "mha_past_present_key_padding", "MultiHeadAttention",
         [("query", q), ("key", kself), ("value", vself), ("bias", None), ("key_padding_mask", kpp),
          ("attention_bias", None), ("past_key", pk), ("past_value", pv)],
         ["output", "present_key", "present_value"], num_heads=N, unidirectional=1)
    case(out, "mha_decode_step", "MultiHeadAttention",
         [("query", f32(B, 1, D)), ("key", f32(B, 1, D)), ("value", f32(B, 1, D)), ("bias", None),
          ("key_padding_mask", None), ("attention_bias", None), ("past_key", pk), ("past_value", pv)],
         ["output", "present_key", "present_value"], num_heads=N)
    case(out, "mha_large", "MultiHeadAttention",
         [("query", f32(1, 70, 64, lo=-1, hi=1)), ("key", f32(1, 1100, 64, lo=-1, hi=1)),
          ("value", f32(1, 1100, 64, lo=-1, hi=1))], ["output"], num_heads=2)

    # ---------------------------------------------------------------- GroupQueryAttention
    # seqlens_k[b] = keys of batch entry b - 1; the first prompt has sequence length ==
    # total_sequence_length; later steps append after the past keys each entry keeps (a past buffer
    # longer than the total is a static cache, present keeps its length)
    def gqa(name, S, N, KV, Hd, seqlens, total, P=None, packed=False, dtype=np.float32, rotary=False, sink=False,
            bias=None, **attrs):
        B = len(seqlens)
        r = f16 if dtype == np.float16 else f32
        if packed:
            ins = [("query", r(B, S, (N + 2 * KV) * Hd, lo=-1, hi=1)), ("key", None), ("value", None)]
        else:
            ins = [("query", r(B, S, N * Hd, lo=-1, hi=1)), ("key", r(B, S, KV * Hd, lo=-1, hi=1)),
                   ("value", r(B, S, KV * Hd, lo=-1, hi=1))]
        past = P is not None
        ins += [("past_key", r(B, KV, P, Hd, lo=-1, hi=1) if past else None),
                ("past_value", r(B, KV, P, Hd, lo=-1, hi=1) if past else None),
                ("seqlens_k", np.array(seqlens, np.int32)), ("total_sequence_length", np.array(total, np.int32))]
        if rotary:  # cos/sin caches of the usual rotary frequencies, 32 positions
            pos = np.arange(32, dtype=np.float64)[:, None]
            theta = pos * 10000.0 ** (-np.arange(Hd // 2, dtype=np.float64) / (Hd // 2))
            ins += [("cos_cache", np.cos(theta).astype(dtype)), ("sin_cache", np.sin(theta).astype(dtype))]
            attrs["do_rotary"] = 1
        if sink or bias:  # attention_bias (added to the scores), a sink logit per head
            ins += [("cos_cache", None), ("sin_cache", None)] if not rotary else []
            ins += [("position_ids", None), ("attention_bias", r(*bias, lo=-2, hi=2) if bias else None)]
            ins += [("head_sink", r(N, lo=-1, hi=3))] if sink else []
        case(out, name, "GroupQueryAttention", ins, ["output", "present_key", "present_value"], num_heads=N,
             kv_num_heads=KV, **attrs)

    gqa("gqa_prompt", 5, 4, 2, 8, [4, 4], 5)
    gqa("gqa_prompt_packed_mqa", 6, 4, 1, 16, [5, 5], 6, packed=True)
    gqa("gqa_prompt_local_window_softcap", 9, 6, 2, 8, [8, 8], 9, local_window_size=3, softcap=2.0, scale=0.2)
    gqa("gqa_decode_dynamic_cache", 1, 4, 2, 8, [6, 4], 7, P=6)
    gqa("gqa_decode_static_cache", 1, 8, 2, 8, [6, 3], 7, P=10)
    gqa("gqa_decode_packed_local_window", 1, 4, 2, 8, [9, 5], 10, P=9, packed=True, local_window_size=4)
    gqa("gqa_continued_prefill", 3, 4, 2, 8, [6], 7, P=4)
    gqa("gqa_prompt_fp16", 5, 4, 2, 8, [4, 4], 5, dtype=np.float16)
    gqa("gqa_decode_fp16", 1, 4, 1, 16, [7, 2], 8, P=7, dtype=np.float16)
    gqa("gqa_prompt_rotary", 5, 4, 2, 16, [4, 4], 5, rotary=True)
    gqa("gqa_prompt_packed_rotary_interleaved", 6, 4, 2, 16, [5, 5], 6, packed=True, rotary=True, rotary_interleaved=1)
    gqa("gqa_decode_rotary", 1, 4, 2, 16, [6, 4], 7, P=6, rotary=True)
    gqa("gqa_continued_prefill_rotary", 3, 4, 2, 16, [6], 7, P=4, rotary=True)
    gqa("gqa_decode_rotary_fp16", 1, 4, 1, 16, [7, 2], 8, P=7, dtype=np.float16, rotary=True)
    gqa("gqa_prompt_smooth_softmax", 5, 4, 2, 8, [4, 4], 5, smooth_softmax=1)
    gqa("gqa_decode_smooth_softmax", 1, 4, 2, 8, [6, 4], 7, P=6, smooth_softmax=1)
    gqa("gqa_prompt_head_sink", 6, 4, 2, 8, [5, 5], 6, sink=True)
    gqa("gqa_decode_head_sink_local_window", 1, 4, 2, 8, [9, 5], 10, P=9, sink=True, local_window_size=4)
    gqa("gqa_prompt_attention_bias", 5, 4, 2, 8, [4, 4], 5, bias=(2, 4, 5, 5))
    gqa("gqa_decode_attention_bias_broadcast", 1, 4, 2, 8, [6, 4], 7, P=6, bias=(1, 1, 1, 7))
    gqa("gqa_decode_static_cache_attention_bias", 1, 8, 2, 8, [6, 3], 7, P=10, bias=(2, 1, 1, 7))

    quantised_contrib_tests(out, rng)

    for s in skipped:
        print("skipped (onnxruntime cannot run it):", s)
    print(f"wrote {len(written)} tests to {out}")
    return 0


def quantised_contrib_tests(out, rng):
    """The quantised operators that ONNX Runtime's quantisation tools emit."""
    def f32(*shape, lo=-2.0, hi=2.0):
        return rng.uniform(lo, hi, shape).astype(np.float32)

    def q(dtype, *shape):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape).astype(dtype)

    # The int8 operand of a uint8 x int8 product (weights, and their zero points) in 7 bits, [-64, 63]:
    # onnxruntime's u8s8 kernels on x86 CPUs without VNNI (AVX2's vpmaddubsw) add pairs of u8*s8
    # products in saturating int16, so with full-range weights its outputs are not the exact
    # products (up to 17 off in 25 on an AVX2 EPYC), and a reference must be exact on every machine
    # the tests are made on. 7-bit weights are what onnxruntime's quantiser emits for such CPUs
    # (reduce_range). Full-range int8 stays covered by the int8 x int8 cases.
    def w8(dtype, *shape):
        if dtype != np.int8:
            return q(dtype, *shape)
        return rng.integers(-64, 64, shape).astype(np.int8)

    # ---------------------------------------------------------------- MatMulNBits
    # B: [N, ceil(K / block_size), block_size * bits / 8], element k of a block at bit k * bits
    # (low bits first); packed uint8 zero points: ceil(k_blocks * bits / 8) bytes per row
    def pack(vals, bits):
        n, m = vals.shape
        per = 8 // bits
        v = np.zeros((n, (m + per - 1) // per * per), np.uint8)
        v[:, :m] = vals
        v = v.reshape(n, -1, per).astype(np.uint32)
        return sum(v[:, :, i] << (i * bits) for i in range(per)).astype(np.uint8)

    def nbits(name, a_shape, K, N, bs, bits=4, zp=None, gidx=False, bias=False, fp16=False, consts=False, **attrs):
        kb = (K + bs - 1) // bs
        qv = rng.integers(0, 1 << bits, (N, kb * bs))
        B = pack(qv, bits).reshape(N, kb, bs * bits // 8)
        ft = np.float16 if fp16 else np.float32
        scales = rng.uniform(0.005, 0.05, (N * kb,)).astype(ft)
        zpv = None
        if zp == "packed":
            zpv = pack(rng.integers(0, 1 << bits, (N, kb)), bits).reshape(-1)
        elif zp == "float":
            zpv = rng.uniform(0, (1 << bits) - 1, (N * kb,)).astype(ft)
        g = None
        if gidx:  # act-order: each k in some block (every block used)
            g = (np.arange(K) // bs).astype(np.int32)
            rng.shuffle(g)
        A = f32(*a_shape, K).astype(ft)
        ins = [("A", A), ("B", B), ("scales", scales), ("zero_points", zpv), ("g_idx", g),
               ("bias", f32(N).astype(ft) if bias else None)]
        while ins[-1][1] is None:
            ins.pop()
        case(out, name, "MatMulNBits", ins, ["Y"], K=K, N=N, bits=bits, block_size=bs,
             initializers=("B", "scales", "zero_points", "g_idx", "bias") if consts else (), **attrs)

    for bs in (16, 32, 64, 128):
        nbits(f"matmulnbits_b{bs}", (3,), 256, 24, bs)
        nbits(f"matmulnbits_b{bs}_zp", (2, 5), 256, 40, bs, zp="packed")
    nbits("matmulnbits_k_tail", (4,), 200, 33, 32, zp="packed")
    nbits("matmulnbits_k_tail_odd_blocks", (1, 3), 80, 17, 16, zp="packed", bias=True)
    nbits("matmulnbits_float_zp", (2, 3), 128, 20, 32, zp="float")
    nbits("matmulnbits_gemv", (1,), 512, 64, 64, zp="packed")
    nbits("matmulnbits_bias", (2, 3), 96, 8, 32, bias=True)
    nbits("matmulnbits_consts", (16,), 256, 48, 32, zp="packed", consts=True)
    nbits("matmulnbits_consts_large_m", (70,), 128, 80, 64, consts=True, bias=True)
    nbits("matmulnbits_fp16", (2, 3), 128, 24, 32, zp="packed", fp16=True)
    # with g_idx onnxruntime 1.32 ignores packed uint8 zero points (uses 2^(bits-1)), reads float ones
    nbits("matmulnbits_g_idx", (3,), 128, 16, 32, zp="packed", gidx=True)
    nbits("matmulnbits_g_idx_float_zp", (3,), 128, 16, 32, zp="float", gidx=True)
    nbits("matmulnbits_g_idx_no_zp", (3,), 128, 16, 32, gidx=True)
    nbits("matmulnbits_accuracy_level1", (4,), 128, 16, 32, zp="packed", accuracy_level=1)
    # accuracy_level 4: onnxruntime's int8 compute type (A quantised per row and block)
    for bs in (16, 32, 64, 128):
        nbits(f"matmulnbits_acc4_b{bs}", (3,), 256, 24, bs, zp="packed", accuracy_level=4, consts=True)
    nbits("matmulnbits_acc4_gemv_no_zp", (1,), 512, 40, 32, accuracy_level=4, consts=True)
    nbits("matmulnbits_acc4_k_tail_bias", (2, 3), 200, 20, 32, zp="packed", bias=True, accuracy_level=4, consts=True)
    # weights that are graph inputs: onnxruntime cannot prepack them and computes in float32
    nbits("matmulnbits_acc4_weights_not_constant", (2, 3), 192, 20, 32, zp="packed", accuracy_level=4)
    nbits("matmulnbits_acc4_float_zp", (3,), 128, 16, 32, zp="float", accuracy_level=4, consts=True)
    nbits("matmulnbits_acc4_fp16", (3,), 128, 16, 32, zp="packed", fp16=True, accuracy_level=4, consts=True)
    nbits("matmulnbits_acc4_bits8", (3,), 128, 16, 32, bits=8, zp="packed", accuracy_level=4, consts=True)
    nbits("matmulnbits_acc4_bits2", (3,), 128, 16, 32, bits=2, zp="packed", accuracy_level=4, consts=True)
    nbits("matmulnbits_acc4_g_idx", (3,), 128, 16, 32, zp="float", gidx=True, accuracy_level=4, consts=True)
    nbits("matmulnbits_bits8", (3,), 128, 16, 32, bits=8, zp="packed")
    nbits("matmulnbits_bits2", (3,), 128, 16, 32, bits=2, zp="packed")

    # ---------------------------------------------------------------- DynamicQuantizeMatMul
    for bt in (np.int8, np.uint8):
        t = "s8" if bt == np.int8 else "u8"
        K, N = 48, 20
        case(out, f"dynamicquantizematmul_{t}", "DynamicQuantizeMatMul",
             [("A", f32(2, 3, K)), ("B", w8(bt, K, N)), ("b_scale", np.float32(0.02))], ["Y"])
        case(out, f"dynamicquantizematmul_{t}_zp_bias", "DynamicQuantizeMatMul",
             [("A", f32(5, K)), ("B", w8(bt, K, N)), ("b_scale", np.array([0.03], np.float32)),
              ("b_zero_point", w8(bt, 1)), ("bias", f32(N))], ["Y"])
        case(out, f"dynamicquantizematmul_{t}_per_column", "DynamicQuantizeMatMul",
             [("A", f32(4, K)), ("B", w8(bt, K, N)), ("b_scale", f32(N, lo=0.01, hi=0.05)),
              ("b_zero_point", w8(bt, N)), ("bias", f32(N))], ["Y"], initializers=("B", "b_scale", "b_zero_point"))
    case(out, "dynamicquantizematmul_positive_a_large_k", "DynamicQuantizeMatMul",
         [("A", f32(3, 600, lo=0.5, hi=3)), ("B", w8(np.int8, 600, 16)), ("b_scale", np.float32(0.01))], ["Y"])
    case(out, "dynamicquantizematmul_negative_a", "DynamicQuantizeMatMul",
         [("A", f32(3, 32, lo=-3, hi=-0.5)), ("B", q(np.uint8, 32, 16)), ("b_scale", np.float32(0.01)),
          ("b_zero_point", np.uint8(128))], ["Y"])

    # ---------------------------------------------------------------- MatMulIntegerToFloat
    for at, bt in ((np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)):
        t = ("s8" if at == np.int8 else "u8") + ("s8" if bt == np.int8 else "u8")
        K, N = 40, 24
        qb = w8 if at == np.uint8 else q
        case(out, f"matmulintegertofloat_{t}", "MatMulIntegerToFloat",
             [("A", q(at, 2, 3, K)), ("B", qb(bt, K, N)), ("a_scale", np.float32(0.03)),
              ("b_scale", np.float32(0.02))], ["Y"])
        case(out, f"matmulintegertofloat_{t}_zp_bias", "MatMulIntegerToFloat",
             [("A", q(at, 4, K)), ("B", qb(bt, K, N)), ("a_scale", np.float32(0.03)),
              ("b_scale", np.float32(0.02)), ("a_zero_point", q(at)), ("b_zero_point", qb(bt)),
              ("bias", f32(N))], ["Y"])
        case(out, f"matmulintegertofloat_{t}_per_column", "MatMulIntegerToFloat",
             [("A", q(at, 5, K)), ("B", qb(bt, K, N)), ("a_scale", np.float32(0.03)),
              ("b_scale", f32(N, lo=0.01, hi=0.05)), ("a_zero_point", q(at)), ("b_zero_point", qb(bt, N)),
              ("bias", f32(N))], ["Y"], initializers=("B", "b_scale", "b_zero_point"))
    case(out, "matmulintegertofloat_large_k", "MatMulIntegerToFloat",
         [("A", q(np.uint8, 3, 700)), ("B", w8(np.int8, 700, 10)), ("a_scale", np.float32(0.01)),
          ("b_scale", np.float32(0.01)), ("a_zero_point", np.uint8(3))], ["Y"])

    # ---------------------------------------------------------------- QGemm
    def qgemm(name, M, K, N, at=np.uint8, bt=np.int8, transA=0, transB=0, per_col=False, C=None, yq=True,
              y_scale_only=False, **attrs):
        A = q(at, K, M) if transA else q(at, M, K)
        qb = w8 if at == np.uint8 else q
        B = qb(bt, N, K) if transB else qb(bt, K, N)
        nb = N if per_col else 1
        ins = [("A", A), ("a_scale", np.float32(0.02)), ("a_zero_point", q(at)), ("B", B),
               ("b_scale", f32(nb, lo=0.01, hi=0.04) if per_col else np.float32(0.025)),
               ("b_zero_point", qb(bt, nb) if per_col else qb(bt)),
               ("C", rng.integers(-3000, 3000, C).astype(np.int32) if C is not None else None)]
        if yq:
            ins += [("y_scale", np.float32(0.3)), ("y_zero_point", q(at))]
        elif y_scale_only:
            ins += [("y_scale", np.float32(0.3))]
        while ins[-1][1] is None:
            ins.pop()
        case(out, name, "QGemm", ins, ["Y"], transA=transA, transB=transB, **attrs)

    qgemm("qgemm_u8s8", 5, 24, 12)
    qgemm("qgemm_u8u8", 5, 24, 12, bt=np.uint8)
    qgemm("qgemm_s8s8", 5, 24, 12, at=np.int8)
    qgemm("qgemm_float_out", 4, 32, 10, yq=False)
    qgemm("qgemm_float_out_y_scale", 4, 32, 10, yq=False, y_scale_only=True)
    qgemm("qgemm_trans", 6, 20, 9, transA=1, transB=1, alpha=0.5)
    qgemm("qgemm_per_column_bias_mn", 7, 40, 11, per_col=True, C=(7, 11))
    qgemm("qgemm_bias_n", 3, 16, 8, C=(8,), transB=1)
    qgemm("qgemm_bias_m1", 3, 16, 8, C=(3, 1), at=np.int8)
    qgemm("qgemm_bias_scalar_float_out", 3, 16, 8, C=(), yq=False, per_col=True)
    qgemm("qgemm_large_k", 4, 600, 12, alpha=2.0)

    # ---------------------------------------------------------------- QAttention
    B, S, Din, N, Hd = 2, 5, 16, 4, 8
    D = N * Hd
    for wt in (np.int8, np.uint8):
        t = "s8" if wt == np.int8 else "u8"
        qa = [("input", q(np.uint8, B, S, Din)), ("weight", w8(wt, Din, 3 * D)), ("bias", f32(3 * D, lo=-0.5, hi=0.5)),
              ("input_scale", np.array(0.01, np.float32)), ("weight_scale", np.array(0.004, np.float32))]
        case(out, f"qattention_{t}", "QAttention", qa, ["output"], num_heads=N)
        case(out, f"qattention_{t}_zero_points_mask", "QAttention",
             qa + [("mask_index", np.array([5, 3], np.int32)), ("input_zero_point", q(np.uint8)),
                   ("weight_zero_point", w8(wt))], ["output"], num_heads=N)
    qa = [("input", q(np.uint8, B, S, Din)), ("weight", w8(np.int8, Din, 3 * D)), ("bias", f32(3 * D, lo=-0.5, hi=0.5)),
          ("input_scale", np.array(0.01, np.float32)), ("weight_scale", f32(3 * D, lo=0.002, hi=0.006))]
    case(out, "qattention_per_column_unidirectional", "QAttention",
         qa + [("mask_index", None), ("input_zero_point", q(np.uint8)), ("weight_zero_point", w8(np.int8, 3 * D))],
         ["output"], num_heads=N, unidirectional=1, initializers=("weight", "weight_scale", "weight_zero_point"))
    case(out, "qattention_past_present", "QAttention",
         qa + [("mask_index", None), ("input_zero_point", q(np.uint8)), ("weight_zero_point", w8(np.int8, 3 * D)),
               ("past", f32(2, B, N, 3, Hd, lo=-1, hi=1))], ["output", "present"], num_heads=N, unidirectional=1)
    m2 = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
    case(out, "qattention_mask_2d_scale", "QAttention",
         qa + [("mask_index", m2), ("input_zero_point", q(np.uint8))], ["output"], num_heads=N, scale=0.1)

    # ---------------------------------------------------------------- DynamicQuantizeLSTM
    # W [nd, I, 4H] and R [nd, H, 4H] (the transposes of LSTM's), quantised per direction or per
    # channel (uint8 zero points: one value per direction; int8: zero). onnxruntime quantises
    # H_{t-1} per chunk of batch rows, one chunk per intra-op thread: its outputs for a batch > 1
    # depend on the machine's thread count. kiln quantises the whole batch, as onnxruntime does
    # with one thread (and with any number for batch 1): the reference runs with one thread.
    #
    # A batch of 1 steps through kiln's u8 x s8 one-row product (kn_qgemv8), exact through a
    # residual list for the weight pairs whose |b0| + |b1| passes 128: weights="sparse_big" makes
    # most weights small and some full-range (uint8: around 128), "full" all full-range (more
    # such pairs than the list holds: the vpmaddwd product instead). onnxruntime's u8 x s8 kernel
    # saturates on such int8 weights, so their reference is onnxruntime on the same product with
    # the weights as uint8 (w + 128, zero point 128), which it computes exactly (u8 x u8).
    def wbig(wt, kind, *shape):
        if kind is None:
            return w8(wt, *shape)
        if kind == "full":
            return q(wt, *shape)
        if kind == "symmetric":  # full-range but never -128 as packed (int8 [-127, 127], uint8 [1, 255])
            lo = -127 if wt == np.int8 else 1
            v = rng.integers(lo, lo + 255, shape)
            v.flat[:2] = (lo, lo + 254)  # both ends
            return v.astype(wt)
        off = 0 if wt == np.int8 else 128
        v = rng.integers(-40, 41, shape) + off
        big = rng.random(shape) < 0.04
        v[big] = rng.integers(np.iinfo(wt).min, np.iinfo(wt).max + 1, int(big.sum()))
        return v.astype(wt)

    def as_u8_reference(op_outputs, attrs):
        def ref(inputs):
            ins = []
            for n, a in inputs.items():
                if n in ("W", "R") and a is not None and a.dtype == np.int8:
                    a = (a.astype(np.int16) + 128).astype(np.uint8)
                elif n in ("W_zero_point", "R_zero_point") and a.dtype == np.int8:
                    a = (a.astype(np.int16) + 128).astype(np.uint8)
                ins.append((n, a))
            node = helper.make_node("DynamicQuantizeLSTM", [n if a is not None else "" for n, a in ins], op_outputs,
                                    domain=MS, **attrs)
            return ort_run(node, ins, op_outputs, 17, ("W", "R", "W_scale", "W_zero_point", "R_scale", "R_zero_point"), 1)
        return ref

    def dqlstm(name, T, B, I, H, direction="forward", wt=np.int8, per_channel=False, bias=True, lens=None,
               states=False, peep=False, weights=None, **attrs):
        nd = 2 if direction == "bidirectional" else 1
        ins = [("X", f32(T, B, I, lo=-1, hi=1))]
        qs = []
        for K in (I, H):
            ins.append(("W" if K == I and not qs else "R", wbig(wt, weights, nd, K, 4 * H)))
            shape = (nd, 4 * H) if per_channel else (nd,)
            sc_ = f32(*shape, lo=0.002, hi=0.01)
            if wt == np.int8:
                zp = np.zeros(shape, np.int8)
            else:
                zp = np.broadcast_to(rng.integers(100, 156, (nd,) + (1,) * (len(shape) - 1)), shape).astype(np.uint8)
            qs.append((sc_, zp))
        ins += [("B", f32(nd, 8 * H, lo=-0.5, hi=0.5) if bias else None),
                ("sequence_lens", np.array(lens, np.int32) if lens is not None else None),
                ("initial_h", f32(nd, B, H, lo=-0.5, hi=0.5) if states else None),
                ("initial_c", f32(nd, B, H, lo=-0.5, hi=0.5) if states else None),
                ("P", f32(nd, 3 * H, lo=-0.3, hi=0.3) if peep else None),
                ("W_scale", qs[0][0]), ("W_zero_point", qs[0][1]), ("R_scale", qs[1][0]), ("R_zero_point", qs[1][1])]
        ref = as_u8_reference(["Y", "Y_h", "Y_c"], dict(hidden_size=H, direction=direction, **attrs)) \
            if weights is not None and wt == np.int8 else None
        case(out, name, "DynamicQuantizeLSTM", ins, ["Y", "Y_h", "Y_c"], hidden_size=H, direction=direction,
             initializers=("W", "R", "W_scale", "W_zero_point", "R_scale", "R_zero_point"), ort_threads=1,
             reference=ref, **attrs)

    dqlstm("dynamicquantizelstm", 5, 2, 8, 6)
    dqlstm("dynamicquantizelstm_u8", 5, 2, 8, 6, wt=np.uint8)
    dqlstm("dynamicquantizelstm_per_channel", 4, 3, 10, 8, per_channel=True)
    dqlstm("dynamicquantizelstm_u8_per_channel_states", 4, 3, 10, 8, wt=np.uint8, per_channel=True, states=True)
    dqlstm("dynamicquantizelstm_bidirectional", 6, 2, 8, 5, direction="bidirectional", states=True)
    dqlstm("dynamicquantizelstm_reverse_no_bias", 5, 1, 7, 4, direction="reverse", bias=False)
    dqlstm("dynamicquantizelstm_peepholes_clip", 5, 2, 6, 4, peep=True, clip=0.8)
    dqlstm("dynamicquantizelstm_wide", 3, 1, 40, 32, per_channel=True)
    # batch 1: hidden sizes off the 4-value quads and 32-column panels, each weight kind
    dqlstm("dynamicquantizelstm_b1_s8_sparse_big_bidirectional", 5, 1, 10, 19, direction="bidirectional",
           weights="sparse_big", states=True)
    dqlstm("dynamicquantizelstm_b1_s8_sparse_big_per_channel", 4, 1, 33, 40, per_channel=True, weights="sparse_big")
    dqlstm("dynamicquantizelstm_b1_s8_full_range", 4, 1, 9, 13, weights="full")
    dqlstm("dynamicquantizelstm_b1_u8_sparse_big_reverse", 5, 1, 7, 21, direction="reverse", wt=np.uint8,
           weights="sparse_big")
    dqlstm("dynamicquantizelstm_b1_u8_full_range", 5, 1, 8, 6, wt=np.uint8, weights="full")
    dqlstm("dynamicquantizelstm_b1_u8_per_channel_h1", 6, 1, 3, 1, wt=np.uint8, per_channel=True, weights="sparse_big")
    # batches: the input projection and the steps as several rows (an odd count: the one-row
    # tile after the two-row ones), K off the 4-value quads
    dqlstm("dynamicquantizelstm_b3_s8_sparse_big_bidirectional", 5, 3, 10, 19, direction="bidirectional",
           weights="sparse_big", states=True)
    dqlstm("dynamicquantizelstm_b2_u8_sparse_big_per_channel", 3, 2, 13, 9, wt=np.uint8, per_channel=True,
           weights="sparse_big", lens=[3, 2])
    dqlstm("dynamicquantizelstm_b4_s8_full_range_peepholes", 3, 4, 6, 7, weights="full", peep=True)

    # ---------------------------------------------------------------- the ONNX integer products
    # MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv (domain ""): the shapes that take the
    # integer GEMM's edges (M not a multiple of 6 rows, N not of 16 columns, odd K, K over one
    # 512-deep block), batches, groups, depthwise, 1-D and 3-D windows, strides, dilations, pads,
    # weights as constants (as quantisers write them) and as inputs
    def mmi(name, a_shape, b_shape, at=np.uint8, bt=np.uint8, zp="scalar", const_b=False):
        qb = w8 if at == np.uint8 else q
        M, N = a_shape[-2] if len(a_shape) > 1 else 1, b_shape[-1]
        za = {"none": None, "scalar": q(at), "rows": q(at, M)}[zp]
        zb = {"none": None, "scalar": qb(bt), "rows": qb(bt, N)}[zp]
        case(out, name, "MatMulInteger", [("A", q(at, *a_shape)), ("B", qb(bt, *b_shape)), ("a_zero_point", za),
                                          ("b_zero_point", zb)], ["Y"], domain="",
             initializers=("B", "b_zero_point") if const_b else ())

    mmi("matmulinteger_u8u8_edges", (13, 37), (37, 45))
    mmi("matmulinteger_u8s8_deep_const", (7, 1100), (1100, 33), bt=np.int8, const_b=True)
    mmi("matmulinteger_s8s8", (6, 64), (64, 16), at=np.int8, bt=np.int8)
    mmi("matmulinteger_u8u8_batched_b", (2, 3, 5, 20), (3, 20, 7))
    mmi("matmulinteger_u8s8_batched_a_const", (2, 9, 31), (31, 18), bt=np.int8, const_b=True)
    mmi("matmulinteger_u8u8_one_row_no_zp", (1, 300), (300, 70), zp="none")
    mmi("matmulinteger_u8u8_vector_a", (40,), (40, 21))
    mmi("matmulinteger_u8u8_tall_narrow_threads_split_rows", (500, 100), (100, 12), const_b=True)

    def convi(name, x_shape, w_shape, xt=np.uint8, wt=np.uint8, const_w=True, zp=True, **attrs):
        ins = [("x", q(xt, *x_shape)), ("w", w8(wt, *w_shape)), ("x_zero_point", q(xt) if zp else None),
               ("w_zero_point", w8(wt) if zp else None)]
        while ins[-1][1] is None:
            ins.pop()
        case(out, name, "ConvInteger", ins, ["y"], domain="",
             initializers=("w", "w_zero_point") if const_w else (), **attrs)

    convi("convinteger_3x3_pads", (1, 5, 9, 11), (7, 5, 3, 3), pads=[1, 1, 1, 1])
    convi("convinteger_3x3_s2_asym_pads", (2, 3, 13, 10), (17, 3, 3, 3), strides=[2, 2], pads=[1, 0, 2, 1])
    convi("convinteger_1x1", (1, 40, 6, 7), (20, 40, 1, 1))
    convi("convinteger_1x1_strided_input_w", (1, 24, 8, 8), (12, 24, 1, 1), strides=[2, 2], const_w=False)
    convi("convinteger_deep_k_dilated", (1, 70, 9, 9), (9, 70, 3, 3), dilations=[2, 2], pads=[2, 2, 2, 2])
    convi("convinteger_groups", (1, 8, 7, 7), (12, 2, 3, 3), group=4, pads=[1, 1, 1, 1])
    convi("convinteger_depthwise_s2", (1, 6, 10, 9), (6, 1, 3, 3), group=6, strides=[2, 2], pads=[1, 1, 1, 1])
    convi("convinteger_1d_s2", (2, 4, 41), (5, 4, 7), strides=[2], pads=[3, 3])
    convi("convinteger_3d", (1, 3, 5, 6, 7), (4, 3, 3, 2, 3), pads=[1, 0, 1, 1, 1, 0])
    convi("convinteger_same_upper_no_zp", (1, 3, 8, 9), (5, 3, 4, 4), auto_pad="SAME_UPPER", strides=[2, 2], zp=False)
    convi("convinteger_u8s8_wide_row", (1, 2, 4, 70), (3, 2, 3, 5), wt=np.int8, pads=[1, 2, 1, 2])
    convi("convinteger_large_plane_threads", (1, 16, 40, 41), (8, 16, 3, 3), pads=[1, 1, 1, 1])
    # tiny planes (a 1x1 plane, rows narrower than a vector), which once read and wrote out of
    # bounds in the depthwise kernel
    convi("convinteger_depthwise_1x1_plane", (1, 3, 1, 1), (3, 1, 1, 1), group=3)
    convi("convinteger_depthwise_tiny_s2", (2, 2, 3, 5), (4, 1, 3, 3), group=2, strides=[2, 2], pads=[1, 1, 1, 1])
    convi("convinteger_s8_depthwise_7_wide", (1, 4, 5, 7), (4, 1, 3, 3), xt=np.int8, wt=np.int8, group=4,
          pads=[1, 1, 1, 1])
    # depthwise (one input channel per group: conv_int_dw.c's direct kernel)
    convi("convinteger_depthwise_dilated", (1, 10, 17, 19), (10, 1, 3, 3), group=10, dilations=[2, 2], pads=[2, 2, 2, 2])
    convi("convinteger_depthwise_s8x_s8w", (1, 7, 12, 40), (7, 1, 3, 3), xt=np.int8, wt=np.int8, group=7,
          pads=[1, 1, 1, 1])
    convi("convinteger_depthwise_u8s8", (1, 9, 9, 35), (9, 1, 3, 3), wt=np.int8, group=9, pads=[1, 1, 1, 1])
    convi("convinteger_depthwise_5x5_s2_asym_pads", (2, 5, 15, 37), (5, 1, 5, 5), group=5, strides=[2, 2],
          pads=[2, 1, 0, 3])
    convi("convinteger_depthwise_mult2", (1, 6, 11, 13), (12, 1, 3, 3), group=6, pads=[1, 1, 1, 1])
    convi("convinteger_depthwise_s3x2_k4x3_dil", (1, 4, 20, 23), (8, 1, 4, 3), group=4, strides=[3, 2],
          dilations=[1, 3], pads=[1, 3, 2, 0])
    convi("convinteger_depthwise_1d_s2", (2, 8, 50), (8, 1, 5), group=8, strides=[2], pads=[2, 2])
    convi("convinteger_depthwise_wide_threads", (1, 64, 30, 70), (64, 1, 3, 3), group=64, pads=[1, 1, 1, 1])
    convi("convinteger_depthwise_one_channel_mult3", (2, 1, 9, 33), (3, 1, 3, 3), pads=[0, 1, 2, 1], const_w=False)
    # the depthwise kernel on small planes (rows narrower than its vectors of 8 and 16, planes of
    # one to a few rows, kernels reaching past the plane through the pads)
    convi("convinteger_depthwise_1x2_plane_k3_pads", (2, 3, 1, 2), (6, 1, 3, 3), group=3, pads=[1, 1, 1, 1])
    convi("convinteger_depthwise_3x3_s8s8_mult2", (1, 5, 3, 3), (10, 1, 3, 3), xt=np.int8, wt=np.int8, group=5,
          pads=[1, 1, 1, 1])
    convi("convinteger_depthwise_5x7_s2_dil2", (1, 4, 5, 7), (4, 1, 3, 3), group=4, strides=[2, 2], dilations=[2, 2],
          pads=[2, 2, 2, 2])
    convi("convinteger_depthwise_7x7_k5_u8s8", (2, 6, 7, 7), (6, 1, 5, 5), wt=np.int8, group=6, pads=[2, 2, 2, 2])
    convi("convinteger_depthwise_15_wide", (1, 3, 3, 15), (3, 1, 3, 3), group=3, pads=[1, 1, 1, 1])
    convi("convinteger_depthwise_16_wide_s2", (1, 3, 2, 16), (3, 1, 3, 3), group=3, strides=[2, 2], pads=[1, 1, 1, 1])
    convi("convinteger_depthwise_17_wide_asym", (1, 2, 4, 17), (6, 1, 2, 3), group=2, pads=[0, 2, 1, 0])
    convi("convinteger_depthwise_1d_5_s2", (1, 4, 5), (4, 1, 3), group=4, strides=[2], pads=[1, 1])
    # eight channels and more (the small-plane form: channels in the lanes), a block's tail of
    # channels, strides, dilation, 1-D, and enough work for the threads
    convi("convinteger_depthwise_13ch_7x7_s2_dil2", (2, 13, 7, 7), (13, 1, 3, 3), group=13, strides=[2, 2],
          dilations=[2, 2], pads=[2, 1, 2, 2])
    convi("convinteger_depthwise_s8s8_24ch_3x5_k5x3", (1, 24, 3, 5), (24, 1, 5, 3), xt=np.int8, wt=np.int8, group=24,
          pads=[2, 1, 2, 1])
    convi("convinteger_depthwise_1d_9ch_11", (1, 9, 11), (9, 1, 4), group=9, pads=[1, 2])
    convi("convinteger_small_7x7_u8s8_33ch_to_48", (2, 33, 7, 7), (48, 33, 3, 3), wt=np.int8, pads=[1, 1, 1, 1])
    convi("convinteger_small_1x1_5x5_u8u8_full_range", (1, 70, 5, 5), (18, 70, 1, 1))
    convi("convinteger_depthwise_256ch_7x7_threads", (1, 256, 7, 7), (256, 1, 3, 3), wt=np.int8, group=256,
          pads=[1, 1, 1, 1])

    def qconv(name, x_shape, w_shape, xt=np.uint8, wt=np.int8, per_channel=False, bias=True, wz_rand=False,
              ys=0.3, x_half=False, w_big=0.0, w_u8_mid=False, **attrs):
        """x_half: x in [0, 127] (uint8); w_big: that fraction of the int8 weights +-(100..127), the
        rest in [-40, 40] (kn_qgemm8's residual pairs, |w0| + |w1| over 128; x_half keeps
        onnxruntime's saturating u8 x s8 pair sums exact: 127 * 128 * 2 < 32767); w_u8_mid: uint8
        weights in [64, 192), which kn_qgemm8 takes (it packs them less 128)"""
        M = w_shape[0]
        x = rng.integers(0, 128, x_shape).astype(np.uint8) if x_half else q(xt, *x_shape)
        w = rng.integers(64, 192, w_shape).astype(np.uint8) if w_u8_mid else w8(wt, *w_shape)
        if w_big:
            w = rng.integers(-40, 41, w_shape).astype(np.int8)
            big = rng.random(w_shape) < w_big
            w[big] = (rng.integers(100, 128, int(big.sum())) * rng.choice([-1, 1], int(big.sum()))).astype(np.int8)
        ins = [("x", x), ("x_scale", np.float32(0.02)), ("x_zero_point", q(xt)),
               ("w", w),
               ("w_scale", f32(M, lo=0.002, hi=0.01) if per_channel else np.float32(0.005)),
               ("w_zero_point", (w8(wt, M) if wz_rand else np.zeros(M, wt)) if per_channel else
                np.zeros((), wt) if w_big else w8(wt)),
               ("y_scale", np.float32(ys)), ("y_zero_point", q(xt)),
               ("B", rng.integers(-5000, 5000, M).astype(np.int32) if bias else None)]
        while ins[-1][1] is None:
            ins.pop()
        case(out, name, "QLinearConv", ins, ["y"], domain="",
             initializers=("w", "w_scale", "w_zero_point", "B"), **attrs)

    qconv("qlinearconv_u8s8_3x3_bias", (1, 8, 9, 9), (10, 8, 3, 3), pads=[1, 1, 1, 1])
    qconv("qlinearconv_u8s8_per_channel_s2", (1, 16, 12, 11), (19, 16, 3, 3), per_channel=True, strides=[2, 2])
    qconv("qlinearconv_u8u8_1x1", (2, 33, 5, 5), (7, 33, 1, 1), wt=np.uint8, bias=False)
    qconv("qlinearconv_s8s8_depthwise", (1, 12, 8, 8), (12, 1, 3, 3), xt=np.int8, group=12, pads=[1, 1, 1, 1])
    qconv("qlinearconv_u8u8_depthwise_per_channel_zp", (1, 10, 13, 12), (10, 1, 3, 3), wt=np.uint8, group=10,
          per_channel=True, wz_rand=True, pads=[1, 1, 1, 1])
    qconv("qlinearconv_s8s8_depthwise_s2_mult2_dilated", (1, 6, 17, 21), (12, 1, 3, 3), xt=np.int8, group=6,
          strides=[2, 2], dilations=[2, 2], pads=[2, 1, 2, 2], per_channel=True)
    qconv("qlinearconv_u8s8_depthwise_asym_pads_no_bias", (2, 16, 10, 9), (16, 1, 3, 3), group=16, bias=False,
          pads=[0, 1, 1, 0])
    # small planes (the depthwise kernel's requantisation from its plane buffer)
    qconv("qlinearconv_u8s8_depthwise_1x1_plane_k3", (1, 24, 1, 1), (24, 1, 3, 3), group=24, per_channel=True,
          pads=[1, 1, 1, 1])
    qconv("qlinearconv_s8s8_depthwise_2x2_s2", (2, 8, 2, 2), (8, 1, 3, 3), xt=np.int8, group=8, strides=[2, 2],
          pads=[1, 1, 1, 1])
    qconv("qlinearconv_u8u8_depthwise_7x7_mult2", (1, 5, 7, 7), (10, 1, 3, 3), wt=np.uint8, group=5,
          per_channel=True, wz_rand=True, pads=[1, 1, 1, 1])
    qconv("qlinearconv_s8s8_depthwise_3x15_k5", (1, 6, 3, 15), (6, 1, 5, 5), xt=np.int8, group=6, pads=[2, 2, 2, 2])
    qconv("qlinearconv_u8s8_depthwise_5x17_dil2_asym", (1, 7, 5, 17), (7, 1, 3, 3), group=7, dilations=[2, 2],
          pads=[2, 0, 1, 2], bias=False)
    qconv("qlinearconv_u8s8_depthwise_40ch_1x1_plane", (1, 40, 1, 1), (40, 1, 3, 3), group=40, pads=[1, 1, 1, 1])
    qconv("qlinearconv_s8s8_depthwise_17ch_5x5_s2_per_channel", (2, 17, 5, 5), (17, 1, 3, 3), xt=np.int8, group=17,
          strides=[2, 2], pads=[1, 1, 1, 1], per_channel=True)
    qconv("qlinearconv_u8u8_depthwise_16ch_7x7_k5_zp", (1, 16, 7, 7), (16, 1, 5, 5), wt=np.uint8, group=16,
          per_channel=True, wz_rand=True, pads=[2, 2, 2, 2])
    qconv("qlinearconv_u8s8_depthwise_320ch_7x7_threads", (1, 320, 7, 7), (320, 1, 3, 3), group=320,
          per_channel=True, pads=[1, 1, 1, 1])
    # small planes with 16 output channels and more, uint8 x, constant weights of one zero point: the
    # transposed product through kn_qgemm8 (conv.c's iconv_rows8): odd channel counts (x's
    # channels-last copy in blocks of 8), rows and columns off its 2 x 32 tile, 1x1 with and without
    # pads, strides, dilation, 1-D, batches, outputs saturating at both ends, threads; and the
    # cases that keep the other form (groups, per-channel zero points that differ, int8 x)
    qconv("qlinearconv_u8s8_small_7x7_128ch_per_channel", (1, 128, 7, 7), (128, 128, 3, 3), per_channel=True,
          pads=[1, 1, 1, 1], ys=2.0)
    qconv("qlinearconv_u8s8_small_14x14_37ch_to_40", (1, 37, 14, 14), (40, 37, 3, 3), pads=[1, 1, 1, 1], ys=0.5)
    qconv("qlinearconv_u8s8_small_5x5_67ch_to_19_saturating", (2, 67, 5, 5), (19, 67, 3, 3), per_channel=True,
          pads=[1, 1, 1, 1], ys=0.05)
    qconv("qlinearconv_u8s8_small_1x1_7x7_256ch", (1, 256, 7, 7), (256, 256, 1, 1), per_channel=True, ys=0.6)
    qconv("qlinearconv_u8s8_small_1x1_pads_9ch_no_bias", (1, 9, 6, 5), (33, 9, 1, 1), pads=[1, 0, 0, 2], bias=False,
          ys=0.05)
    qconv("qlinearconv_u8s8_small_15x15_s2_dil2", (1, 24, 15, 15), (48, 24, 3, 3), strides=[2, 2], dilations=[2, 2],
          pads=[2, 1, 2, 2], ys=0.4)
    qconv("qlinearconv_u8s8_small_16x16_s1_k5_asym", (1, 11, 16, 16), (17, 11, 5, 5), pads=[2, 1, 1, 2], ys=1.5)
    qconv("qlinearconv_u8s8_small_1d_s2", (2, 20, 31), (21, 20, 5), strides=[2], pads=[2, 2], per_channel=True,
          ys=0.2)
    qconv("qlinearconv_u8u8_small_7x7_zp", (1, 30, 7, 7), (35, 30, 3, 3), wt=np.uint8, pads=[1, 1, 1, 1], ys=2.0,
          w_u8_mid=True)
    qconv("qlinearconv_u8s8_small_residual_pairs", (1, 64, 7, 7), (64, 64, 3, 3), per_channel=True,
          pads=[1, 1, 1, 1], x_half=True, w_big=0.003, ys=0.3)
    qconv("qlinearconv_u8s8_small_full_range_w_fallback", (1, 40, 6, 6), (24, 40, 3, 3), pads=[1, 1, 1, 1],
          x_half=True, w_big=0.08, ys=0.5)
    qconv("qlinearconv_u8s8_small_groups_fallback", (1, 32, 7, 7), (32, 16, 3, 3), group=2, per_channel=True,
          pads=[1, 1, 1, 1], ys=0.3)
    qconv("qlinearconv_u8u8_small_per_channel_zp_fallback", (1, 24, 7, 7), (20, 24, 3, 3), wt=np.uint8,
          per_channel=True, wz_rand=True, pads=[1, 1, 1, 1], ys=2.0)
    qconv("qlinearconv_s8s8_small_7x7_fallback", (1, 24, 7, 7), (20, 24, 3, 3), xt=np.int8, pads=[1, 1, 1, 1],
          ys=0.3)
    qconv("qlinearconv_u8s8_small_512ch_7x7_threads", (1, 512, 7, 7), (64, 512, 3, 3), per_channel=True,
          pads=[1, 1, 1, 1], ys=4.0)

    def qmm(name, a_shape, b_shape, at=np.uint8, bt=np.int8):
        qb = w8 if at == np.uint8 else q
        case(out, name, "QLinearMatMul",
             [("a", q(at, *a_shape)), ("a_scale", np.float32(0.03)), ("a_zero_point", q(at)), ("b", qb(bt, *b_shape)),
              ("b_scale", np.float32(0.02)), ("b_zero_point", qb(bt)), ("y_scale", np.float32(0.5)),
              ("y_zero_point", q(at))], ["y"], domain="", initializers=("b",))

    qmm("qlinearmatmul_u8s8_edges", (11, 70), (70, 19))
    qmm("qlinearmatmul_s8s8_batched", (2, 7, 40), (40, 17), at=np.int8)
    qmm("qlinearmatmul_u8u8_deep", (3, 600), (600, 9), bt=np.uint8)

    # ---------------------------------------------------------------- QLinear operators
    def sc(v):
        return np.array(v, np.float32)

    for dt in (np.uint8, np.int8):
        t = "u8" if dt == np.uint8 else "s8"
        for op in ("Add", "Mul"):
            lo = op.lower()
            cs = 0.05 if op == "Add" else 0.4
            for shape_b, tag in (((2, 3, 8), "same"), ((8,), "bcast_last"), ((3, 1), "bcast_inner"),
                                 ((), "scalar_b"), ((2, 1, 8), "bcast_mid")):
                case(out, f"qlinear{lo}_{t}_{tag}", f"QLinear{op}",
                     [("A", q(dt, 2, 3, 8)), ("A_scale", sc(0.031)), ("A_zero_point", q(dt)), ("B", q(dt, *shape_b)),
                      ("B_scale", sc(0.017)), ("B_zero_point", q(dt)), ("C_scale", sc(cs)), ("C_zero_point", q(dt))],
                     ["C"])
            case(out, f"qlinear{lo}_{t}_scalar_a", f"QLinear{op}",
                 [("A", q(dt)), ("A_scale", sc(0.031)), ("A_zero_point", q(dt)), ("B", q(dt, 4, 37)),
                  ("B_scale", sc(0.017)), ("B_zero_point", q(dt)), ("C_scale", sc(cs)), ("C_zero_point", q(dt))], ["C"])
            case(out, f"qlinear{lo}_{t}_long", f"QLinear{op}",
                 [("A", q(dt, 300)), ("A_scale", sc(0.02)), ("A_zero_point", q(dt)), ("B", q(dt, 300)),
                  ("B_scale", sc(0.03)), ("B_zero_point", q(dt)), ("C_scale", sc(cs)), ("C_zero_point", q(dt))], ["C"])
        case(out, f"qlinearsigmoid_{t}", "QLinearSigmoid",
             [("X", q(dt, 2, 3, 40)), ("X_scale", sc(0.05)), ("X_zero_point", q(dt)), ("Y_scale", sc(1 / 256)),
              ("Y_zero_point", np.array(0 if dt == np.uint8 else -128, dt))], ["Y"])
        case(out, f"qlinearsigmoid_{t}_no_zp", "QLinearSigmoid",
             [("X", q(dt, 256)), ("X_scale", sc(0.07)), ("X_zero_point", None), ("Y_scale", sc(0.0041)),
              ("Y_zero_point", None)], ["Y"])
        case(out, f"qlinearleakyrelu_{t}", "QLinearLeakyRelu",
             [("X", q(dt, 4, 64)), ("X_scale", sc(0.05)), ("X_zero_point", q(dt)), ("Y_scale", sc(0.04)),
              ("Y_zero_point", q(dt))], ["Y"], alpha=0.1)
        case(out, f"qlinearleakyrelu_{t}_default_alpha_no_zp", "QLinearLeakyRelu",
             [("X", q(dt, 256)), ("X_scale", sc(0.05)), ("X_zero_point", None), ("Y_scale", sc(0.03)),
              ("Y_zero_point", None)], ["Y"])
        case(out, f"qlinearconcat_{t}", "QLinearConcat",
             [("Y_scale", sc(0.05)), ("Y_zero_point", q(dt)),
              ("X0", q(dt, 2, 3, 4)), ("s0", sc(0.05)), ("z0", q(dt)),
              ("X1", q(dt, 2, 5, 4)), ("s1", sc(0.02)), ("z1", q(dt)),
              ("X2", q(dt, 2, 1, 4)), ("s2", sc(0.11)), ("z2", q(dt))], ["Y"], axis=1)
        zy = np.array(0 if dt == np.uint8 else -128, dt)
        ins = [("Y_scale", sc(0.05)), ("Y_zero_point", zy), ("X0", q(dt, 3, 4)), ("s0", sc(0.05)), ("z0", zy),
               ("X1", q(dt, 3, 2)), ("s1", sc(0.05)), ("z1", zy)]
        case(out, f"qlinearconcat_{t}_same_params_last_axis", "QLinearConcat", ins, ["Y"], axis=-1)
        ys, yz = (1 / 256, 0) if dt == np.uint8 else (1 / 256, -128)
        for shape, axis, opset, tag in (((3, 10), -1, 13, "last"), ((2, 5, 4), 1, 13, "axis1"),
                                        ((2, 3, 4), 1, 12, "opset12_flatten"), ((1, 2, 64), -1, 13, "wide")):
            case(out, f"qlinearsoftmax_{t}_{tag}", "QLinearSoftmax",
                 [("X", q(dt, *shape)), ("X_scale", sc(0.08)), ("X_zero_point", q(dt)), ("Y_scale", sc(ys)),
                  ("Y_zero_point", np.array(yz, dt))], ["Y"], axis=axis, node_attrs={"opset": opset})
        for shape, cl, tag in (((2, 3, 5, 6), 0, "nchw"), ((2, 5, 6, 3), 1, "nhwc"), ((1, 4, 7), 0, "1d")):
            case(out, f"qlinearglobalaveragepool_{t}_{tag}", "QLinearGlobalAveragePool",
                 [("X", q(dt, *shape)), ("x_scale", sc(0.03)), ("x_zero_point", q(dt)), ("y_scale", sc(0.02)),
                  ("y_zero_point", q(dt))], ["Y"], channels_last=cl)
        pool = [("x_scale", sc(0.03)), ("x_zero_point", q(dt)), ("y_scale", sc(0.025)), ("y_zero_point", q(dt))]
        case(out, f"qlinearaveragepool_{t}_2d", "QLinearAveragePool", [("X", q(dt, 2, 3, 7, 8))] + pool, ["Y"],
             kernel_shape=[3, 3], strides=[2, 2])
        case(out, f"qlinearaveragepool_{t}_2d_pads", "QLinearAveragePool", [("X", q(dt, 1, 2, 6, 7))] + pool, ["Y"],
             kernel_shape=[3, 2], pads=[1, 1, 1, 0])
        case(out, f"qlinearaveragepool_{t}_2d_pads_count_include_pad", "QLinearAveragePool",
             [("X", q(dt, 1, 2, 6, 7))] + pool, ["Y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)
        case(out, f"qlinearaveragepool_{t}_ceil", "QLinearAveragePool", [("X", q(dt, 1, 2, 7, 7))] + pool, ["Y"],
             kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
        case(out, f"qlinearaveragepool_{t}_same_upper", "QLinearAveragePool", [("X", q(dt, 1, 2, 7, 6))] + pool, ["Y"],
             kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")
        case(out, f"qlinearaveragepool_{t}_nhwc", "QLinearAveragePool", [("X", q(dt, 2, 6, 5, 3))] + pool, ["Y"],
             kernel_shape=[2, 3], channels_last=1)
        case(out, f"qlinearaveragepool_{t}_1d", "QLinearAveragePool", [("X", q(dt, 2, 3, 11))] + pool, ["Y"],
             kernel_shape=[4], strides=[3], pads=[1, 2])
        case(out, f"qlinearaveragepool_{t}_3d", "QLinearAveragePool", [("X", q(dt, 1, 2, 4, 5, 6))] + pool, ["Y"],
             kernel_shape=[2, 2, 3])

    # DynamicQuantizeLSTM with full-range weights without -128 (symmetric quantisation; last, so
    # that the random values of the cases above stay as they were): more over-bound pairs than the
    # residual list holds, so products of one or two rows take kn_qgemm8's sign form (|a - 128|
    # times sign(a - 128) w); K off the quads (odd: the zero-padded last quad), N off the panels;
    # batch 3 (steps of three rows: kn_qgemm) and T = 1 (the input projection one row too)
    dqlstm("dynamicquantizelstm_b1_s8_symmetric_bidirectional", 5, 1, 9, 13, direction="bidirectional",
           weights="symmetric", states=True)
    dqlstm("dynamicquantizelstm_b2_s8_symmetric_per_channel", 4, 2, 33, 40, per_channel=True, weights="symmetric",
           lens=[4, 3])
    dqlstm("dynamicquantizelstm_b1_u8_symmetric_reverse", 5, 1, 10, 19, direction="reverse", wt=np.uint8,
           weights="symmetric")
    dqlstm("dynamicquantizelstm_b2_u8_symmetric_per_channel_states", 3, 2, 7, 21, wt=np.uint8, per_channel=True,
           weights="symmetric", states=True)
    dqlstm("dynamicquantizelstm_t1_b1_s8_symmetric", 1, 1, 70, 33, weights="symmetric", peep=True)
    dqlstm("dynamicquantizelstm_b3_s8_symmetric", 3, 3, 11, 17, weights="symmetric")

    # QLinearConv with full-range symmetric int8 weights (uniform over [-127, 127]) and x over all of
    # uint8: more over-bound pairs than kn_qgemm8's residual list holds, exact in kiln (the int16
    # form, or kn_qgemm8's sign form on small planes where conv.c takes it). onnxruntime's u8 x s8
    # kernel saturates on them, so the reference is onnxruntime on the same node with the weights as
    # uint8 (w + 128, zero point 128), which it computes exactly (u8 x u8)
    def qconv_symmetric(name, x_shape, w_shape, per_channel=False, **attrs):
        M = w_shape[0]
        w = rng.integers(-127, 128, w_shape).astype(np.int8)
        w.flat[:2] = (-127, 127)
        ins = [("x", q(np.uint8, *x_shape)), ("x_scale", np.float32(0.02)), ("x_zero_point", q(np.uint8)), ("w", w),
               ("w_scale", f32(M, lo=0.002, hi=0.01) if per_channel else np.float32(0.005)),
               ("w_zero_point", np.zeros(M if per_channel else (), np.int8)), ("y_scale", np.float32(8.0)),
               ("y_zero_point", q(np.uint8)), ("B", rng.integers(-5000, 5000, M).astype(np.int32))]
        inits = ("w", "w_scale", "w_zero_point", "B")

        def ref(inputs):
            r = []
            for n, a in inputs.items():
                if n in ("w", "w_zero_point"):
                    a = (a.astype(np.int16) + 128).astype(np.uint8)
                r.append((n, a))
            node = helper.make_node("QLinearConv", [n for n, _ in r], ["y"], **attrs)
            return ort_run(node, r, ["y"], 17, inits, 1)
        case(out, name, "QLinearConv", ins, ["y"], domain="", initializers=inits, reference=ref, **attrs)

    qconv_symmetric("qlinearconv_u8s8_symmetric_full_range_7x7", (1, 40, 7, 7), (24, 40, 3, 3), per_channel=True,
                    pads=[1, 1, 1, 1])
    qconv_symmetric("qlinearconv_u8s8_symmetric_full_range_5x5_batch2", (2, 19, 5, 5), (33, 19, 3, 3),
                    pads=[1, 1, 1, 1])
    qconv_symmetric("qlinearconv_u8s8_symmetric_full_range_1d_s2", (1, 33, 19), (40, 33, 3), per_channel=True,
                    strides=[2], pads=[1, 1])
    qconv_symmetric("qlinearconv_u8s8_symmetric_full_range_20x20", (1, 16, 20, 20), (32, 16, 3, 3),
                    pads=[1, 1, 1, 1])

    # helper-59: the QDQ models' classes. Depthwise on small planes (channels in the lanes, four
    # output positions a step: rows of 14, 7 and 5 leave 2, 3 and 1 over), full-range symmetric
    # int8 weights; 1x1 with few input channels and full-range uint8 weights over planes past 16
    # positions (kn_qgemm's int16 form, no longer kn_qgemm8's residual entries); one output position
    # with fewer than 16 output channels (kn_qgemm8's one-row product)
    qconv_symmetric("qlinearconv_u8s8_symmetric_depthwise_14x14_k5", (1, 24, 14, 14), (24, 1, 5, 5), group=24,
                    per_channel=True, pads=[2, 2, 2, 2])
    qconv_symmetric("qlinearconv_u8s8_symmetric_depthwise_7x7_k5_batch2", (2, 16, 7, 7), (16, 1, 5, 5), group=16,
                    pads=[2, 2, 2, 2])
    qconv_symmetric("qlinearconv_u8s8_symmetric_depthwise_9x9_s2_dil2", (1, 40, 9, 9), (40, 1, 3, 3), group=40,
                    per_channel=True, strides=[2, 2], dilations=[2, 2], pads=[2, 2, 1, 2])
    qconv_symmetric("qlinearconv_u8s8_symmetric_depthwise_pad_past_the_row", (1, 8, 1, 2), (8, 1, 1, 1), group=8,
                    strides=[5, 5], pads=[0, 3, 0, 0])
    qconv_symmetric("qlinearconv_u8s8_symmetric_depthwise_16x16_s2_right_pad", (1, 16, 16, 16), (16, 1, 3, 3),
                    group=16, strides=[2, 2], pads=[1, 1, 1, 1])
    # rows of 17-32 at stride 1 take the channels-in-lanes form too
    qconv_symmetric("qlinearconv_u8s8_symmetric_depthwise_20x27_k3", (1, 24, 20, 27), (24, 1, 3, 3), group=24,
                    per_channel=True, pads=[1, 1, 1, 1])
    qconv_symmetric("qlinearconv_u8s8_symmetric_depthwise_9x32_k5_dil2", (2, 9, 9, 32), (9, 1, 5, 5), group=9,
                    dilations=[1, 2], pads=[2, 4, 2, 4])
    convi("convinteger_depthwise_16ch_18x30", (1, 16, 18, 30), (16, 1, 3, 3), wt=np.int8, group=16, pads=[1, 1, 1, 1])
    # one position, 40 output channels of per-channel scales over two images (requantised with the
    # channels in the lanes)
    qconv_symmetric("qlinearconv_u8s8_symmetric_one_position_64ch_to_40_batch2", (2, 64, 1, 1), (40, 64, 1, 1),
                    per_channel=True)
    qconv("qlinearconv_u8u8_1x1_8ch_to_24_12x20_full_range", (1, 8, 12, 20), (24, 8, 1, 1), wt=np.uint8)
    qconv("qlinearconv_u8u8_1x1_16ch_to_40_3x24_full_range", (1, 16, 3, 24), (40, 16, 1, 1), wt=np.uint8,
          bias=False)
    qconv("qlinearconv_u8u8_one_position_32ch_to_8", (1, 32, 1, 1), (8, 32, 1, 1), wt=np.uint8)
    qconv_symmetric("qlinearconv_u8s8_symmetric_one_position_40ch_to_10", (1, 40, 1, 1), (10, 40, 1, 1),
                    per_channel=True)
    qconv_symmetric("qlinearconv_u8s8_symmetric_one_position_3x3_pads_24ch_to_12", (2, 24, 1, 1), (12, 24, 3, 3),
                    pads=[1, 1, 1, 1])


if __name__ == "__main__":
    sys.exit(main())
