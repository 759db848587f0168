"""3x3 convolutions on the CPU: kiln vs ONNX Runtime and OpenVINO (f32), side by side.

bench/op_sweep.py's machinery (timing, alternating rounds, output checks, table) over the 3x3 classes
of issue 22's convolution work: ResNet-50's stride-1 and stride-2 3x3 layers, YOLO and UNet shapes
(large planes, few channels), batch > 1, tiny planes, dilation (the GEMM path). Same options as
op_sweep.py, e.g.

    python3 bench/conv3x3_sweep.py --build build-h3x3 --threads 1,2 --rounds 5 --out OUT.md
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import op_sweep  # noqa: E402
from op_sweep import conv  # noqa: E402


def cases():
    c = []
    # ResNet-50 (torchvision, v1.5: stride on the 3x3), batch 1
    c.append(conv("3x3 64->64 56x56", 1, 64, 56, 64, 3, fast=True))
    c.append(conv("3x3 128->128 28x28", 1, 128, 28, 128, 3))
    c.append(conv("3x3 256->256 14x14", 1, 256, 14, 256, 3))
    c.append(conv("3x3 512->512 7x7", 1, 512, 7, 512, 3))
    c.append(conv("3x3 s2 128->128 56x56", 1, 128, 56, 128, 3, s=2))
    c.append(conv("3x3 s2 128->128 28x28", 1, 128, 28, 128, 3, s=2))
    c.append(conv("3x3 s2 256->256 28x28", 1, 256, 28, 256, 3, s=2))
    c.append(conv("3x3 s2 512->512 14x14", 1, 512, 14, 512, 3, s=2))
    # batch > 1
    c.append(conv("3x3 64->64 56x56 b8", 8, 64, 56, 64, 3))
    c.append(conv("3x3 32->32 14x14 b32", 32, 32, 14, 32, 3))
    # YOLO (v5/v8 n/s): large planes, few channels; stride-2 downsamplers
    c.append(conv("3x3 16->32 s2 320x320 (YOLO)", 1, 16, 320, 32, 3, s=2))
    c.append(conv("3x3 32->32 160x160 (YOLO)", 1, 32, 160, 32, 3))
    c.append(conv("3x3 64->64 80x80 (YOLO)", 1, 64, 80, 64, 3))
    c.append(conv("3x3 128->128 40x40 (YOLO)", 1, 128, 40, 128, 3))
    c.append(conv("3x3 256->256 20x20 (YOLO)", 1, 256, 20, 256, 3))
    # UNet: 3 -> 64 at full size, 64 -> 64, odd channel counts
    c.append(conv("3x3 64->64 128x128 (UNet)", 1, 64, 128, 64, 3))
    c.append(conv("3x3 128->64 64x64 (UNet up)", 1, 128, 64, 64, 3))
    c.append(conv("3x3 24->40 75x75 (odd)", 1, 24, 75, 40, 3))
    # tiny planes and the paths Winograd leaves alone
    c.append(conv("3x3 512->512 4x4 (tiny)", 1, 512, 4, 512, 3))
    c.append(conv("3x3 d2 64->64 28x28", 1, 64, 28, 64, 3, d=2))
    return c


op_sweep.cases = cases
if __name__ == "__main__":
    sys.exit(op_sweep.main())
