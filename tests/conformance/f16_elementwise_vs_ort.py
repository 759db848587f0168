#!/usr/bin/env python3
"""float16 elementwise nodes, kiln against ONNX Runtime bit for bit.

Each one-node float16 model runs on every float16 value (unary operators) or on 2^18 pairs of
float16 values with NaN, infinities, signed zeros and subnormals among them (binary operators, same
shape, a per-channel operand and a scalar; Sum and Mean of three). Where ONNX Runtime computes the node in float32 and
rounds once (its CPU provider has no float16 kernel for most of these and casts around the node; a
numpy float32 reference rounded once says whether it did), kiln must match it bit for bit (NaN:
any NaN); where ONNX Runtime does not (Softsign; Sign of NaN, which it makes 0), kiln must match the
float32 reference rounded once. For the operators whose float32 functions are approximations (Exp,
Tanh, Erf, Sigmoid, Gelu) the two runtimes' float32 functions differ in the last bits, so a float16
result may land on either side of a rounding boundary: those are measured against the exact
function (float64, rounded once to float16) and fail above 1 float16 ulp; ONNX Runtime's distance
to it is printed beside.

    python3 tests/conformance/f16_elementwise_vs_ort.py [--build build]

Ends with "N passed, N failed, N skipped".
"""
import argparse
import math
import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from op_sweep import Kiln, KilnSession  # noqa: E402

F16 = TensorProto.FLOAT16


def model(op, inputs, attrs=None, inits=None, opset=17):
    ins = [helper.make_tensor_value_info(n, F16, list(a.shape)) for n, a in inputs.items()]
    init = [helper.make_tensor(n, F16, list(a.shape), a.view(np.uint16).tobytes(), raw=True)
            for n, a in (inits or {}).items()]
    node = helper.make_node(op, list(inputs) + list(inits or {}), ["y"], **(attrs or {}))
    cmp = op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
    g = helper.make_graph([node], "f16", ins, [helper.make_tensor_value_info("y", TensorProto.BOOL if cmp else F16, None)],
                          init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def every_half():
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)


def pairs(n, seed):
    r = np.random.default_rng(seed)
    bits = r.integers(0, 65536, n).astype(np.uint16)
    # mostly moderate magnitudes so that sums and products stay finite, some anywhere
    mod = r.random(n) < 0.75
    bits[mod] = (bits[mod] & 0x83FF) | (r.integers(0x3000 >> 10, (0x4400 >> 10) + 1, int(mod.sum())) << 10).astype(np.uint16)
    special = np.array([0x7E00, 0xFE00, 0x7C00, 0xFC00, 0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF], np.uint16)
    bits[::13] = special[np.arange(len(bits[::13])) % len(special)]
    return bits.view(np.float16)


def ulp_diff(a, b):
    """float16 ulp distance (order-preserving integer map), NaN vs NaN = 0, NaN vs number = big."""
    def key(x):
        u = x.view(np.uint16).astype(np.int32)
        return np.where(u & 0x8000, -(u & 0x7FFF), u)
    na, nb = np.isnan(a), np.isnan(b)
    d = np.abs(key(a) - key(b))
    d = np.where(na & nb, 0, d)
    return np.where(na ^ nb, 1 << 20, d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    lib = os.path.join(args.build, "libkiln.so")
    k = Kiln(lib)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    passed = failed = 0

    def run(name, blob, feeds, ref, exact):
        """exact: ref is the float32 reference (bit for bit against ORT where ORT rounds once, else
        against ref); else ref is the float64 function (kiln within 1 float16 ulp of it)."""
        nonlocal passed, failed
        s = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
        want = s.run(None, feeds)[0]
        got = KilnSession(k, blob, 1, "cpu", feeds).run_alloc()[0]
        if want.dtype == np.bool_:
            bad = int(np.count_nonzero(got != want)) + int(np.count_nonzero(want != ref))
            ok = bad == 0
            print(f"{'ok  ' if ok else 'FAIL'} {name:34s} bool, vs ORT and numpy: {bad} differ")
            passed, failed = passed + ok, failed + (not ok)
            return
        with np.errstate(over="ignore"):
            ref16 = ref.astype(np.float16)
        if exact:
            ort_once = not np.any(ulp_diff(want, ref16))
            d = ulp_diff(got, want if ort_once else ref16)
            bad = int(np.count_nonzero(d))
            ok = bad == 0
            vs = "ORT" if ort_once else "float32 once (ORT: " + str(int(np.count_nonzero(ulp_diff(want, ref16)))) + " differ)"
            print(f"{'ok  ' if ok else 'FAIL'} {name:34s} bit for bit vs {vs}: {bad} of {d.size} differ")
        else:
            dk, do, dko = ulp_diff(got, ref16), ulp_diff(want, ref16), ulp_diff(got, want)
            ok = int(dk.max()) <= 1
            print(f"{'ok  ' if ok else 'FAIL'} {name:34s} vs exact: kiln at most {int(dk.max())} ulp "
                  f"({int(np.count_nonzero(dk))} off), ORT at most {int(do.max())} ulp ({int(np.count_nonzero(do))} off); "
                  f"kiln vs ORT: {int(np.count_nonzero(dko))} differ")
        passed, failed = passed + ok, failed + (not ok)

    x = every_half()
    x32 = x.astype(np.float32)
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        erf64 = np.vectorize(math.erf, otypes=[np.float64])(x64)
        # erf(x / sqrt2), with 1 + erf below from erfc(-x / sqrt2) - 1 where it cancels
        erf64s = np.vectorize(lambda v: math.erfc(-v / math.sqrt(2)) - 1 if v < 0 else math.erf(v / math.sqrt(2)),
                              otypes=[np.float64])(x64)
    with np.errstate(all="ignore"):
        unary = [
            ("Relu", {}, np.where(x32 < 0, np.float32(0), x32), True),
            ("Abs", {}, np.abs(x32), True),
            ("Neg", {}, -x32, True),
            ("Sqrt", {}, np.sqrt(x32), True),
            ("Reciprocal", {}, np.float32(1) / x32, True),
            ("Floor", {}, np.floor(x32), True),
            ("Ceil", {}, np.ceil(x32), True),
            ("Round", {}, np.round(x32), True),
            ("Sign", {}, np.sign(x32), True),
            ("LeakyRelu", {"alpha": 0.1}, np.where(x32 < 0, np.float32(0.1) * x32, x32), True),
            ("ThresholdedRelu", {"alpha": 0.75}, np.where(x32 > np.float32(0.75), x32, np.float32(0)), True),
            ("HardSigmoid", {"alpha": 0.3, "beta": 0.5},
             np.clip(np.float32(0.3) * x32 + np.float32(0.5), np.float32(0), np.float32(1)), True),
            ("HardSwish", {}, x32 * np.clip(x32 * np.float32(1 / 6) + np.float32(0.5), np.float32(0), np.float32(1)), True),
            ("Softsign", {}, x32 / (np.float32(1) + np.abs(x32)), True),
            ("Exp", {}, np.exp(x64), False),
            ("Tanh", {}, np.tanh(x64), False),
            ("Erf", {}, erf64, False),
            ("Sigmoid", {}, 1 / (1 + np.exp(-x64)), False),
            ("Gelu", {"approximate": "none"}, 0.5 * x64 * (1 + erf64s), False),
            ("Gelu", {"approximate": "tanh"},
             0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3))), False),
        ]
    for op, attrs, ref, exact in unary:
        opset = 20 if op == "Gelu" else 17
        label = f"{op} {attrs.get('approximate', '')}".strip() + " (every value)"
        run(label, model(op, {"x": x}, attrs, opset=opset), {"x": x}, ref, exact)
    for lo, hi in ((0.0, 6.0), (-0.375, 1.5)):
        inits = {"lo": np.array(lo, np.float16), "hi": np.array(hi, np.float16)}
        ref = np.minimum(np.float32(hi), np.maximum(np.float32(lo), x32))
        ref = np.where(np.isnan(x32), x32, ref)
        run(f"Clip [{lo}, {hi}] (every value)", model("Clip", {"x": x}, inits=inits), {"x": x}, ref, True)

    for e in (2.0, 3.0, 0.5, -1.0, 1.5):
        inits = {"e": np.array(e, np.float16)}
        with np.errstate(all="ignore"):
            ref = x32 * x32 if e == 2 else x32 * x32 * x32 if e == 3 else np.power(x32, np.float32(e))
            if e == 0.5:  # C's pow and ONNX Runtime: pow(-0, 0.5) = +0, pow(-inf, 0.5) = +inf (numpy's power
                # by 0.5 is sqrt: -0 and NaN there)
                ref = np.where(x32 == -np.inf, np.float32(np.inf), np.sqrt(x32) + np.float32(0))
        # float32 powf and numpy's power may differ in the last float32 bit: exact only where the
        # float32 operations are (x^2, x^3 as two products, sqrt, 1 / x)
        run(f"Pow by {e} (every value)", model("Pow", {"x": x}, inits=inits, opset=15), {"x": x},
            ref.astype(np.float64) if e == 1.5 else ref, e != 1.5)

    n = 1 << 18
    a, b = pairs(n, 1), pairs(n, 2)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    c = pairs(64, 3)
    a4 = a.reshape(1, 64, 64, 64)
    c4 = c.reshape(1, 64, 1, 1)
    s = pairs(1, 4)
    fns = {
        "Add": lambda x, y: x + y, "Sub": lambda x, y: x - y, "Mul": lambda x, y: x * y, "Div": lambda x, y: x / y,
        "Max": lambda x, y: np.where(np.isnan(x) | (x > y), x, y),
        "Min": lambda x, y: np.where(np.isnan(x) | (x < y), x, y),
        "PRelu": lambda x, y: np.where(x < 0, y * x, x),
        "Equal": lambda x, y: x == y, "Less": lambda x, y: x < y, "LessOrEqual": lambda x, y: x <= y,
        "Greater": lambda x, y: x > y, "GreaterOrEqual": lambda x, y: x >= y,
    }
    with np.errstate(all="ignore"):
        for op, f in fns.items():
            run(f"{op} same shape", model(op, {"a": a, "b": b}), {"a": a, "b": b}, f(a32, b32), True)
            run(f"{op} per channel", model(op, {"a": a4, "b": c4}), {"a": a4, "b": c4},
                f(a4.astype(np.float32), c4.astype(np.float32)), True)
            run(f"{op} scalar", model(op, {"a": a, "b": s}), {"a": a, "b": s}, f(a32, s.astype(np.float32)), True)
    # Sum / Mean of three: the float32 sum of the widened values (divided once) rounded once
    c3 = pairs(n, 5)
    with np.errstate(all="ignore"):
        s3 = (a32 + b32) + c3.astype(np.float32)
        for op, ref in (("Sum", s3), ("Mean", s3 / np.float32(3))):
            ins3 = {"a": a, "b": b, "c": c3}
            blob = model(op, ins3, opset=13)
            run(f"{op} of three", blob, ins3, ref, True)
    print(f"{passed} passed, {failed} failed, 0 skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
