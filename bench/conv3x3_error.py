"""Accuracy of kiln's 3x3 convolution paths against a double-precision reference.

For each shape (ResNet-50, YOLO, UNet 3x3 layers; weights scaled as op_sweep.py scales them, inputs
uniform in [-1, 1]) runs the one-node model with kiln's default choice (Winograd F(4x4,3x3) at
stride 1, dilated through its phase images, the direct kernels at stride 2, on 7x7 planes and with
few input channels), with the implicit GEMM forced (KILN_WINO=0 KILN_CL3=0 KILN_RK=0) and with
ONNX Runtime, and prints each one's largest |y - y_ref| and that
error relative to the largest |y_ref|. The reference is the convolution in float64 (numpy).

    python3 bench/conv3x3_error.py --build build-h3x3 [--out FILE]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import op_sweep  # noqa: E402
from op_sweep import Kiln, KilnSession, conv  # noqa: E402

SHAPES = [  # label, n, c, hw, m, stride
    ("3x3 64->64 56x56", 1, 64, 56, 64, 1),
    ("3x3 128->128 28x28", 1, 128, 28, 128, 1),
    ("3x3 256->256 14x14", 1, 256, 14, 256, 1),
    ("3x3 512->512 7x7", 1, 512, 7, 512, 1),
    ("3x3 512->512 14x14", 1, 512, 14, 512, 1),
    ("3x3 s2 128->128 56x56", 1, 128, 56, 128, 2),
    ("3x3 s2 512->512 14x14", 1, 512, 14, 512, 2),
    ("3x3 32->32 160x160", 1, 32, 160, 32, 1),
    ("3x3 64->64 128x128", 1, 64, 128, 64, 1),
    ("3x3 32->32 14x14 b32", 32, 32, 14, 32, 1),
    ("3x3 d2 64->64 28x28 (Winograd, phases)", 1, 64, 28, 64, 1, 2),
    ("3x3 16->32 s2 320x320 (rk)", 1, 16, 320, 32, 2),
    ("3x3 1->32 128x128 (rk)", 1, 1, 128, 32, 1),
]


def reference(x, w, b, stride, d=1):
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, c, h, wd = x.shape
    m = w.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (d, d), (d, d)))
    oh, ow = (h + 2 * d - 2 * d - 1) // stride + 1, (wd + 2 * d - 2 * d - 1) // stride + 1
    y = np.zeros((n, m, oh, ow)) + b.astype(np.float64)[None, :, None, None]
    for kh in range(3):
        for kw in range(3):
            patch = xp[:, :, kh * d:kh * d + stride * (oh - 1) + 1:stride, kw * d:kw * d + stride * (ow - 1) + 1:stride]
            y += np.einsum("nchw,mc->nmhw", patch, w[:, :, kh, kw])
    return y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    lib = os.path.join(a.build, "libkiln.so")
    k = Kiln(lib)
    lines = ["| case | kiln default: max abs err | rel. to max abs y | kiln GEMM forced: max abs err | rel. | ORT: max abs err | rel. |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for label, n, c, hw, m, s, *rest in SHAPES:
        d = rest[0] if rest else 1
        case = conv(label, n, c, hw, m, 3, s=s, d=d)
        model = case.model()
        x = case.inputs["x"]
        ref = reference(x, case.inits["w"], case.inits["b"], s, d)
        scale = np.abs(ref).max()
        errs = []
        for env in ({}, {"KILN_WINO": "0", "KILN_CL3": "0", "KILN_RK": "0"}):
            saved = {e: os.environ.get(e) for e in ("KILN_WINO", "KILN_CL3", "KILN_RK")}
            os.environ.update(env)
            try:
                ks = KilnSession(k, model, 1, "cpu", case.inputs)
                got = ks.run_alloc()[0]
                ks.close()
            finally:
                for e, v in saved.items():
                    if v is None:
                        os.environ.pop(e, None)
                    else:
                        os.environ[e] = v
            errs.append(np.abs(got.astype(np.float64) - ref).max())
        if op_sweep.ort is not None:
            ref_ort, _ = op_sweep.ort_session(model, 1, case.inputs)
            errs.append(np.abs(ref_ort[0].astype(np.float64) - ref).max())
        cells = " | ".join(f"{e:.2e} | {e / scale:.1e}" for e in errs)
        line = f"| {label} | {cells} |"
        print(line, flush=True)
        lines.append(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
