"""The convolution classes of MobileNet-V3 and EfficientNet-B0 on the CPU: kiln vs ONNX Runtime and
OpenVINO (f32), side by side.

bench/op_sweep.py's machinery (timing, alternating rounds, output checks, table) over the layers
of the two zoo models (torchvision exports, batch 1) with the epilogue each has in the model:
1x1 expansions and projections (Conv + Swish x*sigmoid(x), Conv + HardSwish, Conv + Relu, plain
Conv, Conv + Add(residual)), depthwise 3x3 and 5x5 at strides 1 and 2, and the RGB stems. Every
runtime fuses the Conv with what follows where it can. Same options as op_sweep.py, e.g.

    python3 bench/mbconv_sweep.py --build build --threads 1 --rounds 5 --clock cpu --out OUT.md

bench/op_ab.py --suite mbconv takes these cases for A/B runs of two builds; --suite models takes the
whole zoo models (model_cases: EfficientNet-B0, MobileNet-V3-small at batch 1, and any .onnx in
$KILN_AB_MODELS, a colon-separated list such as make_cpu_models.py's resnet50.onnx), timed run by run
against each other in one process, 1 thread, thread CPU time.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import op_sweep  # noqa: E402
from op_sweep import Case, rnd  # noqa: E402


class MbCase(Case):
    """Conv (k x k, stride s, group g) with bias, then optionally Add(residual) and an activation."""

    def __init__(self, label, c, hw, m, k=1, s=1, dw=False, act="swish", res=False, fast=False):
        oh = (hw + 2 * (k // 2) - k) // s + 1
        inputs = {"x": rnd(1, c, hw, hw)}
        if res:
            inputs["r"] = rnd(1, m, oh, oh)
        cg = 1 if dw else c
        inits = {"w": (rnd(m, cg, k, k) / np.sqrt(cg * k * k)).astype(np.float32), "b": rnd(m)}
        tail = (" +res" if res else "") + (f" {act}" if act else "")
        attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=c if dw else 1)
        super().__init__("Conv", label + tail, inputs, inits, attrs, fast=fast)
        self.res, self.act, self.oh, self.m = res, act, oh, m

    def model(self):
        x = self.inputs["x"]
        ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **self.attrs)]
        cur = "c"
        if self.res:
            ins.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, self.m, self.oh, self.oh]))
            nodes.append(helper.make_node("Add", [cur, "r"], ["a"]))
            cur = "a"
        if self.act == "swish":
            nodes += [helper.make_node("Sigmoid", [cur], ["sg"]), helper.make_node("Mul", [cur, "sg"], ["y0"])]
        elif self.act == "hswish":
            nodes.append(helper.make_node("HardSwish", [cur], ["y0"]))
        elif self.act == "relu":
            nodes.append(helper.make_node("Relu", [cur], ["y0"]))
        else:
            nodes[-1].output[0] = "y0"
        inits = [numpy_helper.from_array(a, k) for k, a in self.inits.items()]
        out = helper.make_tensor_value_info("y0", TensorProto.FLOAT, [1, self.m, self.oh, self.oh])
        g = helper.make_graph(nodes, "mb", ins, [out], inits)
        mdl = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="mbconv_sweep")
        mdl.ir_version = 8
        return mdl.SerializeToString()


def cases():
    c = []
    # 1x1 expansions / projections (EfficientNet-B0: swish; MobileNet-V3-small: hswish / relu)
    for cin, hw, m, act, res in ((192, 7, 1152, "swish", False), (1152, 7, 192, None, True),
                                 (1152, 7, 320, None, False), (320, 7, 1280, "swish", False),
                                 (112, 14, 672, "swish", False), (672, 14, 112, None, True),
                                 (80, 14, 480, "swish", False), (480, 14, 80, None, True),
                                 (40, 28, 240, "swish", False), (24, 56, 144, "swish", False),
                                 (144, 56, 24, None, True), (16, 112, 96, "swish", False),
                                 (32, 112, 16, None, False), (96, 56, 24, None, False),
                                 (96, 7, 576, "hswish", False), (576, 7, 96, None, True),
                                 (40, 14, 240, "hswish", False), (16, 56, 72, "relu", False)):
        c.append(MbCase(f"1x1 {cin}->{m} {hw}x{hw}", cin, hw, m, act=act, res=res, fast=hw == 7))
    # depthwise
    for ch, hw, k, s, act in ((32, 112, 3, 1, "swish"), (96, 112, 3, 2, "swish"), (144, 56, 3, 1, "swish"),
                              (144, 56, 5, 2, "swish"), (240, 28, 5, 1, "swish"), (240, 28, 3, 2, "swish"),
                              (480, 14, 3, 1, "swish"), (480, 14, 5, 1, "swish"), (672, 14, 5, 2, "swish"),
                              (1152, 7, 5, 1, "swish"), (16, 112, 3, 2, "relu"), (72, 56, 3, 2, "relu"),
                              (88, 28, 3, 1, "relu"), (96, 28, 5, 2, "hswish"), (240, 14, 5, 1, "hswish"),
                              (576, 7, 5, 1, "hswish")):
        c.append(MbCase(f"dw {k}x{k} s{s} {ch} {hw}x{hw}", ch, hw, ch, k=k, s=s, dw=True, act=act, fast=s == 2))
    # stems
    c.append(MbCase("3x3 s2 3->32 224x224 (stem)", 3, 224, 32, k=3, s=2, act="swish"))
    c.append(MbCase("3x3 s2 3->16 224x224 (stem)", 3, 224, 16, k=3, s=2, act="hswish"))
    return c


class ModelCase(Case):
    """A whole model from a file, its symbolic dims set to 1, random normal inputs."""

    def __init__(self, name, path):
        import onnx
        m = onnx.load(path)
        for v in list(m.graph.input) + list(m.graph.output):
            for d in v.type.tensor_type.shape.dim:
                if d.dim_param:
                    d.ClearField("dim_param")
                    d.dim_value = 1
        self.bytes = m.SerializeToString()
        inits = {i.name for i in m.graph.initializer}
        rng = np.random.default_rng(0)
        inputs = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
                  for i in m.graph.input if i.name not in inits}
        super().__init__("Model", name, inputs, rtol=1e-3, atol=1e-4)

    def model(self):
        return self.bytes


def model_cases():
    zoo = os.environ.get("KILN_ZOO", "/work/shared/models")
    paths = [(n, os.path.join(zoo, n, "model.onnx")) for n in ("efficientnet_b0", "mobilenet_v3_small")]
    paths += [(os.path.basename(p)[:-5], p) for p in os.environ.get("KILN_AB_MODELS", "").split(":") if p]
    return [ModelCase(n, p) for n, p in paths if os.path.exists(p)]


op_sweep.cases = cases
if __name__ == "__main__":
    sys.exit(op_sweep.main())
