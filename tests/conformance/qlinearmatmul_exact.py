#!/usr/bin/env python3
"""QLinearMatMul against its exact definition, computed here in numpy.

y = saturate(round_half_even(sum_k (a - a_zero) (b - b_zero) * (a_scale * b_scale / y_scale) + y_zero)),
the sum exact in integers and the scale ratio in float32 as ONNX's reference computes it, over
uint8/int8 operand pairs, uint8 and int8 outputs, per-tensor scales, a_scale per row and b_scale
per column, batched and broadcast products, widths that leave tails of 1-7 elements past a
vector. ONNX Runtime is no reference here: its AVX2 u8 x s8 product saturates on full-range
weights. Every element must match.

    python3 tests/conformance/qlinearmatmul_exact.py [--build build]

Ends with "N passed, N failed, N skipped".
"""
import argparse
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from op_sweep import Kiln, KilnSession  # noqa: E402

NP_TO_ONNX = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def draw(rng, t, shape):
    lo, hi = (0, 256) if t == np.uint8 else (-128, 128)
    return rng.integers(lo, hi, shape).astype(t)


def case(rng, shape_a, shape_b, ta, tb, ty, per_row, per_col):
    a, b = draw(rng, ta, shape_a), draw(rng, tb, shape_b)
    M, N = shape_a[-2], shape_b[-1]
    sa = (rng.random(M if per_row else ()) * 0.02 + 0.001).astype(np.float32)
    sb = (rng.random(N if per_col else ()) * 0.02 + 0.001).astype(np.float32)
    za, zb = np.array(3 if ta == np.uint8 else -2, ta), np.array(5 if tb == np.uint8 else 1, tb)
    sy, zy = np.array(0.07, np.float32), np.array(7 if ty == np.uint8 else -3, ty)
    inits = [numpy_helper.from_array(v, n) for v, n in
             [(sa, "sa"), (za, "za"), (b, "B"), (sb, "sb"), (zb, "zb"), (sy, "sy"), (zy, "zy")]]
    node = helper.make_node("QLinearMatMul", ["A", "sa", "za", "B", "sb", "zb", "sy", "zy"], ["Y"])
    g = helper.make_graph([node], "qlinearmatmul", [helper.make_tensor_value_info("A", NP_TO_ONNX[ta], list(a.shape))],
                          [helper.make_tensor_value_info("Y", NP_TO_ONNX[ty], None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    acc = np.matmul(a.astype(np.int64) - int(za), b.astype(np.int64) - int(zb))
    ratio = ((sa.reshape(-1, 1) if per_row else sa) * sb / sy).astype(np.float32).astype(np.float64)
    lo, hi = (-128, 127) if ty == np.int8 else (0, 255)
    want = np.clip(np.rint(acc.astype(np.float64) * ratio + float(zy)), lo, hi).astype(np.int64)
    return m.SerializeToString(), {"A": a}, want


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    k = Kiln(os.path.join(args.build, "libkiln.so"))
    rng = np.random.default_rng(5)
    passed = failed = 0
    shapes = [((50, 70), (70, 29)), ((3, 17, 9), (9, 8)), ((1, 6, 40, 64), (1, 6, 64, 37)), ((2, 1, 5, 33), (3, 33, 1))]
    for sa_shape, sb_shape in shapes:
        for ta, tb in [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8), (np.int8, np.uint8)]:
            for ty in (np.uint8, np.int8):
                for per_row, per_col in [(False, False), (False, True), (True, False), (True, True)]:
                    if per_row and len(sa_shape) > 2:
                        continue  # a_scale per row is 1-D over M: 2-D A only
                    blob, feeds, want = case(rng, sa_shape, sb_shape, ta, tb, ty, per_row, per_col)
                    name = (f"{sa_shape} x {sb_shape} {ta.__name__} x {tb.__name__} -> {ty.__name__}"
                            f"{' a_scale per row' if per_row else ''}{' b_scale per column' if per_col else ''}")
                    for threads in (1, 2):
                        got = KilnSession(k, blob, threads, "cpu", feeds).run_alloc()[0].astype(np.int64)
                        bad = int(np.count_nonzero(got != want))
                        ok = bad == 0 and got.shape == want.shape
                        print(f"{'ok  ' if ok else 'FAIL'} {name}, {threads} thread(s): {bad} of {want.size} differ")
                        passed, failed = passed + ok, failed + (not ok)
    print(f"{passed} passed, {failed} failed, 0 skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
