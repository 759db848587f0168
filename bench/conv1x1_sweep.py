"""Pointwise (1x1) convolutions on the CPU: kiln vs ONNX Runtime and OpenVINO (f32), side by side.

bench/op_sweep.py's machinery (timing, alternating rounds, output checks, table) over the 1x1
classes of issue 22: every 1x1 layer of ResNet-50 (torchvision v1.5, batch 1) with the epilogue it
has in the model (Conv + Relu, Conv + Add(residual) + Relu, plain Conv for the downsample branch at
stride 2), and the same classes at other sizes (odd channel counts and planes, batch 2, MobileNet-
and YOLO-like shapes). Both runtimes fuse the Conv with its Add and Relu. Same options as
op_sweep.py, e.g.

    python3 bench/conv1x1_sweep.py --build build --threads 1 --rounds 5 --clock cpu --out OUT.md

bench/op_ab.py --suite conv1x1 takes these cases for A/B runs of two builds.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import op_sweep  # noqa: E402
from op_sweep import Case, rnd  # noqa: E402


class PwCase(Case):
    """Conv 1x1 (stride s) with bias, then optionally Add(residual) and Relu: one fused node in both."""

    def __init__(self, label, n, c, hw, m, s=1, res=False, relu=True, fast=False):
        hw = hw if isinstance(hw, tuple) else (hw, hw)
        oh, ow = (hw[0] - 1) // s + 1, (hw[1] - 1) // s + 1
        inputs = {"x": rnd(n, c, *hw)}
        if res:
            inputs["r"] = rnd(n, m, oh, ow)
        inits = {"w": (rnd(m, c, 1, 1) / np.sqrt(c)).astype(np.float32), "b": rnd(m)}
        tail = (" +res" if res else "") + (" relu" if relu else "")
        super().__init__("Conv", label + tail, inputs, inits, dict(kernel_shape=[1, 1], strides=[s, s]), fast=fast)
        self.res, self.relu, self.s = res, relu, s

    def model(self):
        x, w = self.inputs["x"], self.inits["w"]
        n, m = x.shape[0], w.shape[0]
        oh, ow = (x.shape[2] - 1) // self.s + 1, (x.shape[3] - 1) // self.s + 1
        ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1], strides=[self.s, self.s])]
        cur = "c"
        if self.res:
            ins.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [n, m, oh, ow]))
            nodes.append(helper.make_node("Add", [cur, "r"], ["a"]))
            cur = "a"
        if self.relu:
            nodes.append(helper.make_node("Relu", [cur], ["y0"]))
        else:
            nodes[-1].output[0] = "y0"
        inits = [numpy_helper.from_array(a, k) for k, a in self.inits.items()]
        out = helper.make_tensor_value_info("y0", TensorProto.FLOAT, [n, m, oh, ow])
        g = helper.make_graph(nodes, "pw", ins, [out], inits)
        mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="conv1x1_sweep")
        mdl.ir_version = 8
        return mdl.SerializeToString()


def cases():
    c = []
    # ResNet-50 bottlenecks: reduce (Conv+Relu), expand (Conv+Add+Relu), downsample (Conv, stride 2 after stage 1)
    for hw, cin, mid, first_in in ((56, 256, 64, 64), (28, 512, 128, 256), (14, 1024, 256, 512), (7, 2048, 512, 1024)):
        c.append(PwCase(f"1x1 {cin}->{mid} {hw}x{hw}", 1, cin, hw, mid, fast=hw == 56))
        c.append(PwCase(f"1x1 {mid}->{cin} {hw}x{hw}", 1, mid, hw, cin, res=True))
        if hw == 56:
            c.append(PwCase(f"1x1 {first_in}->{mid} {hw}x{hw}", 1, first_in, hw, mid))
            c.append(PwCase(f"1x1 {first_in}->{cin} {hw}x{hw}", 1, first_in, hw, cin, relu=False))
        else:
            c.append(PwCase(f"1x1 {first_in}->{mid} {hw * 2}x{hw * 2}", 1, first_in, hw * 2, mid))
            c.append(PwCase(f"1x1 s2 {first_in}->{cin} {hw * 2}x{hw * 2}", 1, first_in, hw * 2, cin, s=2, relu=False))
    # other classes: odd sizes, batch 2, few channels, wide planes
    c.append(PwCase("1x1 72->200 29x31 (odd)", 1, 72, (29, 31), 200, res=True))
    c.append(PwCase("1x1 s2 72->200 29x31 (odd)", 1, 72, (29, 31), 200, s=2))
    c.append(PwCase("1x1 64->256 28x28 b2", 2, 64, 28, 256, res=True))
    c.append(PwCase("1x1 16->96 112x112 (MobileNet)", 1, 16, 112, 96))
    c.append(PwCase("1x1 960->160 7x7 (MobileNet)", 1, 960, 7, 160, relu=False))
    c.append(PwCase("1x1 128->64 80x80 (YOLO)", 1, 128, 80, 64))
    return c


op_sweep.cases = cases
if __name__ == "__main__":
    sys.exit(op_sweep.main())
