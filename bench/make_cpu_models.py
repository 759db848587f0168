#!/usr/bin/env python3
"""ResNet-50 and BERT-base built with onnx.helper, for machines without torch.

bench/cpu_models.py exports these two with torch (torchvision's resnet50, transformers' BertModel)
when torch is installed. Where it is not (the 2-core AVX2 EPYC developers' machine of 2026-12-04:
torch's PyPI wheel pulls several GB of CUDA libraries), this script writes graphs of the same
shapes and operator sequence as those exports (opset 17, random weights with a fixed seed; latency
does not depend on the values) into the folder cpu_models.py reads:

    python3 bench/make_cpu_models.py [--work /tmp/kiln-cpu-models] [--only resnet50,bert_base]

resnet50: torchvision's topology with BatchNormalization folded into Conv bias, as the
TorchScript exporter writes it in eval mode: Conv(+bias) Relu, MaxPool 3x3/2, bottlenecks
[3,4,6,3] with stride on the 3x3 (v1.5), Add, Relu, GlobalAveragePool, Flatten, Gemm 2048->1000.
Input 'input' [1,3,224,224].

bert_base: BertModel(BertConfig()) at sequence 128: word/position/token-type embeddings (Gather,
Add), LayerNormalization, 12 layers of Q/K/V MatMul+Add, Reshape/Transpose to [1,12,128,64],
Q.K^T MatMul, Div by 8, Add of the extended mask ((1 - mask) * float min), Softmax, MatMul V,
Transpose/Reshape, output MatMul+Add, residual Add, LayerNormalization, MatMul+Add 768->3072, Gelu
in its Erf form (x * 0.5 * (1 + erf(x / sqrt 2))), MatMul+Add 3072->768, Add, LayerNormalization.
Inputs 'input_ids' and 'attention_mask' int64 [1,128]; output last_hidden_state [1,128,768].
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class G:
    def __init__(self, seed):
        self.nodes, self.inits, self.n = [], [], 0
        self.rng = np.random.default_rng(seed)

    def name(self, p):
        self.n += 1
        return f"{p}_{self.n}"

    def const(self, arr, p="c"):
        n = self.name(p)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def w(self, shape, fan_in, p="w"):
        return self.const((self.rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), p)

    def op(self, t, ins, **attrs):
        out = self.name(t)
        self.nodes.append(helper.make_node(t, ins, [out], name=out, **attrs))
        return out


def resnet50():
    g = G(0)

    def conv(x, cin, cout, k, s=1, relu=True):
        y = g.op("Conv", [x, g.w([cout, cin, k, k], cin * k * k), g.const(np.zeros(cout, np.float32) + 0.01, "b")],
                 kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, dilations=[1, 1], group=1)
        return g.op("Relu", [y]) if relu else y

    x = conv("input", 3, 64, 7, 2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=0)
    cin = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for b in range(blocks):
            s = stride if b == 0 else 1
            y = conv(x, cin, width, 1)
            y = conv(y, width, width, 3, s)
            y = conv(y, width, width * 4, 1, relu=False)
            sc = conv(x, cin, width * 4, 1, s, relu=False) if b == 0 else x
            x = g.op("Relu", [g.op("Add", [y, sc])])
            cin = width * 4
    x = g.op("GlobalAveragePool", [x])
    x = g.op("Flatten", [x], axis=1)
    out = g.op("Gemm", [x, g.w([1000, 2048], 2048), g.const(np.zeros(1000, np.float32), "b")],
               alpha=1.0, beta=1.0, transB=1)
    g.nodes[-1].output[0] = "output"
    graph = helper.make_graph(g.nodes, "resnet50", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])], g.inits)
    del out
    return graph


def bert_base(seq=128, hidden=768, heads=12, layers=12, inter=3072, vocab=30522):
    g = G(1)
    hd = hidden // heads

    def lin(x, cin, cout):
        return g.op("Add", [g.const(np.zeros(cout, np.float32) + 0.01, "b"), g.op("MatMul", [x, g.w([cin, cout], cin)])])

    def ln(x):
        return g.op("LayerNormalization", [x, g.const(np.ones(hidden, np.float32), "g"), g.const(np.zeros(hidden, np.float32), "b")],
                    axis=-1, epsilon=1e-12)

    emb = g.op("Gather", [g.w([vocab, hidden], 50, "wemb"), "input_ids"])
    pos = g.op("Gather", [g.w([512, hidden], 50, "pemb"), g.const(np.arange(seq, dtype=np.int64).reshape(1, seq), "pos")])
    tt = g.op("Gather", [g.w([2, hidden], 50, "temb"), g.const(np.zeros((1, seq), np.int64), "tt")])
    x = ln(g.op("Add", [g.op("Add", [emb, tt]), pos]))
    # extended mask: (1 - mask[:, None, None, :]) * float min
    m = g.op("Unsqueeze", ["attention_mask", g.const(np.array([1, 2], np.int64))])
    m = g.op("Cast", [m], to=TensorProto.FLOAT)
    m = g.op("Mul", [g.op("Sub", [g.const(np.array(1.0, np.float32)), m]), g.const(np.array(np.finfo(np.float32).min, np.float32))])
    heads_shape = g.const(np.array([1, seq, heads, hd], np.int64))
    flat_shape = g.const(np.array([1, seq, hidden], np.int64))
    for _ in range(layers):
        q = g.op("Transpose", [g.op("Reshape", [lin(x, hidden, hidden), heads_shape])], perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [lin(x, hidden, hidden), heads_shape])], perm=[0, 2, 3, 1])
        v = g.op("Transpose", [g.op("Reshape", [lin(x, hidden, hidden), heads_shape])], perm=[0, 2, 1, 3])
        s = g.op("Div", [g.op("MatMul", [q, k]), g.const(np.array(np.sqrt(hd), np.float32))])
        p = g.op("Softmax", [g.op("Add", [s, m])], axis=-1)
        c = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3]), flat_shape])
        x = ln(g.op("Add", [lin(c, hidden, hidden), x]))
        h = lin(x, hidden, inter)
        e = g.op("Erf", [g.op("Div", [h, g.const(np.array(np.sqrt(2.0), np.float32))])])
        h = g.op("Mul", [g.op("Mul", [h, g.op("Add", [e, g.const(np.array(1.0, np.float32))])]), g.const(np.array(0.5, np.float32))])
        x = ln(g.op("Add", [lin(h, inter, hidden), x]))
    g.nodes[-1].output[0] = "last_hidden_state"
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq]) for n in ("input_ids", "attention_mask")]
    return helper.make_graph(g.nodes, "bert_base", ins,
                             [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [1, seq, hidden])], g.inits)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/kiln-cpu-models")
    ap.add_argument("--only", default="resnet50,bert_base")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    for name in a.only.split(","):
        graph = {"resnet50": resnet50, "bert_base": bert_base}[name]()
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-make_cpu_models")
        model.ir_version = 8
        onnx.checker.check_model(model)
        path = os.path.join(a.work, f"{name}.onnx")
        onnx.save(model, path)
        print(f"{name}: {len(graph.node)} nodes -> {path} ({os.path.getsize(path) / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
