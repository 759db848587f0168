"""ResNet-50, BERT-base and ViT-B/16 as ONNX graphs built with onnx.helper, for the CPU benchmarks on
machines without torch (seeded random weights: the same model every time).

Two forms of the first two, one switch each:

- as torch.onnx.export writes the eval-mode model (resnet50(fold_bn=True), bert_base(export_form=True):
  bench/make_cpu_models.py, whose models stand in for bench/cpu_models.py's torch exports):
  BatchNormalization folded into the Conv bias, a Linear as MatMul then Add(bias, product), the
  three embedding Gathers, the extended attention mask scaled by float min, attributes at their
  defaults written out. Weights He-normal over the fan-in, biases 0.01 (the classifier's 0), the
  LayerNorms' scale 1 and shift 0: what latency needs, nothing more.
- layer by layer (the defaults: bench/cpu_bf16_models.py): BatchNormalization nodes with random
  running statistics, Add(product, bias), one embedding Gather plus the position and token-type
  table as one constant, the mask scaled by -10000, and the frameworks' initialisation scales
  (torchvision's kaiming fan-out, transformers' and timm's normal(0.02), torch's Linear uniform for
  ResNet's classifier), on which accuracy against fp32 is measured.

Every builder returns an onnx.ModelProto (opset 17, IR version 8).
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper


class Graph:
    """Nodes and initialisers of one graph, named in order (PREFIX_N), and the seeded generator that
    draws its weights."""

    def __init__(self, seed):
        self.nodes, self.inits, self.n = [], [], 0
        self.rng = np.random.default_rng(seed)

    def name(self, p):
        self.n += 1
        return f"{p}_{self.n}"

    def const(self, a, p="w"):
        n = self.name(p)
        self.inits.append(numpy_helper.from_array(np.asarray(a), n))
        return n

    def op(self, t, ins, p=None, **attrs):
        out = self.name(p or t.lower())
        self.nodes.append(helper.make_node(t, ins, [out], name=out, **attrs))
        return out

    def normal(self, shape, std):
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def uniform(self, shape, lo, hi):
        return self.rng.uniform(lo, hi, shape).astype(np.float32)

    def model(self, name, inputs, outputs, opset=17):
        """The model, its last node's output renamed to outputs[0]'s name."""
        self.nodes[-1].output[0] = outputs[0].name
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="kiln-bench")
        m.ir_version = 8
        return m


def float_input(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# ------------------------------------------------------------------ ResNet-50

def conv_unit(g, x, cin, cout, k, stride, relu=True, fold_bn=False):
    """Conv k x k (pads k // 2), its BatchNormalization (or the Conv's bias where folded), Relu."""
    if fold_bn:
        w = g.normal((cout, cin, k, k), np.sqrt(2.0 / (cin * k * k)))
        y = g.op("Conv", [x, g.const(w), g.const(np.full(cout, 0.01, np.float32), "b")], kernel_shape=[k, k],
                 strides=[stride, stride], pads=[k // 2] * 4, dilations=[1, 1], group=1)
    else:
        # torchvision: kaiming_normal_(fan_out, relu); eval-mode BatchNorm with running statistics
        w = g.normal((cout, cin, k, k), np.sqrt(2.0 / (cout * k * k)))
        y = g.op("Conv", [x, g.const(w)], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        y = g.op("BatchNormalization", [y, g.const(g.uniform(cout, 0.5, 1.5)), g.const(g.normal(cout, 0.1)),
                                        g.const(g.normal(cout, 0.1)), g.const(g.uniform(cout, 0.5, 1.5))], epsilon=1e-5)
    return g.op("Relu", [y]) if relu else y


def resnet50(fold_bn=False):
    """torchvision's resnet50 (v1.5: stride on the 3x3): Conv 7x7/2 (+BatchNormalization) Relu,
    MaxPool 3x3/2, bottlenecks [3, 4, 6, 3] of 1x1, 3x3, 1x1 Conv (+BatchNormalization), Add, Relu,
    GlobalAveragePool, Flatten, Gemm 2048 -> 1000. fold_bn: BatchNormalization folded into the
    Conv bias, as the TorchScript exporter writes the eval-mode model. Input 'input' [1,3,224,224];
    output 'output' (fold_bn) or 'logits' [1,1000]."""
    g = Graph(0)
    exported = {"ceil_mode": 0} if fold_bn else {}  # the attributes torch's export writes at their defaults
    y = conv_unit(g, "input", 3, 64, 7, 2, fold_bn=fold_bn)
    y = g.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], **exported)
    cin = 64
    for width, blocks, stride in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for b in range(blocks):
            s = stride if b == 0 else 1
            h = conv_unit(g, y, cin, width, 1, 1, fold_bn=fold_bn)
            h = conv_unit(g, h, width, width, 3, s, fold_bn=fold_bn)
            h = conv_unit(g, h, width, width * 4, 1, 1, relu=False, fold_bn=fold_bn)
            sc = conv_unit(g, y, cin, width * 4, 1, s, relu=False, fold_bn=fold_bn) if b == 0 else y
            y = g.op("Relu", [g.op("Add", [h, sc])])
            cin = width * 4
    y = g.op("GlobalAveragePool", [y])
    if fold_bn:
        y = g.op("Flatten", [y], axis=1)
        g.op("Gemm", [y, g.const(g.normal((1000, 2048), np.sqrt(2.0 / 2048))), g.const(np.zeros(1000, np.float32), "b")],
             alpha=1.0, beta=1.0, transB=1)
    else:
        y = g.op("Flatten", [y])
        bound = 1 / np.sqrt(2048)
        g.op("Gemm", [y, g.const(g.uniform((1000, 2048), -bound, bound)), g.const(g.uniform(1000, -bound, bound))],
             transB=1)
    return g.model("resnet50", [float_input("input", [1, 3, 224, 224])],
                   [float_input("output" if fold_bn else "logits", [1, 1000])])


# ------------------------------------------------------------------ transformer layers

def linear(g, x, din, dout, export_form=False, std=0.02):
    if export_form:
        b = g.const(np.full(dout, 0.01, np.float32), "b")
        return g.op("Add", [b, g.op("MatMul", [x, g.const(g.normal((din, dout), np.sqrt(2.0 / din)))])])
    y = g.op("MatMul", [x, g.const(g.normal((din, dout), std))])
    return g.op("Add", [y, g.const(g.normal(dout, std))])


def layer_norm(g, x, d, export_form=False):
    if export_form:
        scale, shift = np.ones(d, np.float32), np.zeros(d, np.float32)
    else:
        scale, shift = g.uniform(d, 0.8, 1.2), g.normal(d, 0.02)
    return g.op("LayerNormalization", [x, g.const(scale), g.const(shift)], axis=-1, epsilon=1e-12)


def gelu(g, x):
    """GELU in its Erf form, x * (1 + erf(x / sqrt 2)) * 0.5, as the exporters write it."""
    e = g.op("Erf", [g.op("Div", [x, g.const(np.float32(np.sqrt(2.0)))])])
    return g.op("Mul", [g.op("Mul", [x, g.op("Add", [e, g.const(np.float32(1.0))])]), g.const(np.float32(0.5))])


def attention(g, x, s, d, heads, mask=None, export_form=False):
    """Q/K/V projections, Reshape/Transpose to [1,heads,s,d/heads] (K to [1,heads,d/heads,s]),
    Q.K^T, Div by sqrt(d/heads), Add of the mask, Softmax, times V, Transpose/Reshape back, the
    output projection."""
    hd = d // heads
    shp = g.const(np.array([1, s, heads, hd], np.int64))

    def split(t, perm):
        return g.op("Transpose", [g.op("Reshape", [t, shp])], perm=perm)
    q = split(linear(g, x, d, d, export_form), [0, 2, 1, 3])
    k = split(linear(g, x, d, d, export_form), [0, 2, 3, 1])
    v = split(linear(g, x, d, d, export_form), [0, 2, 1, 3])
    sc = g.op("Div", [g.op("MatMul", [q, k]), g.const(np.float32(np.sqrt(hd)))])
    if mask is not None:
        sc = g.op("Add", [sc, mask])
    p = g.op("Softmax", [sc], axis=-1)
    o = g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, g.const(np.array([1, s, d], np.int64))])
    return linear(g, o, d, d, export_form)


def bert_base(export_form=False, s=128, d=768, heads=12, layers=12, ff=3072, vocab=30522):
    """transformers' BertModel(BertConfig()) at sequence s: word/position/token-type embeddings
    (Gather, Add), LayerNormalization, layers of attention (Q/K/V MatMul+Add, Reshape/Transpose to
    [1,heads,s,d/heads], Q.K^T MatMul, Div by sqrt(d/heads), Add of the extended mask
    (1 - mask[:, None, None, :]) * a large negative, Softmax, MatMul V, Transpose/Reshape, output
    MatMul+Add), residual Add, LayerNormalization, MatMul+Add d -> ff, GELU (Erf form), MatMul+Add
    ff -> d, residual Add, LayerNormalization. export_form: as the transformers model's torch export
    (see the module's doc). Inputs 'input_ids' and 'attention_mask' int64 [1,s]; output
    'last_hidden_state' [1,s,d]."""
    g = Graph(1)
    if export_form:  # word, position and token-type Gathers
        emb = g.op("Gather", [g.const(g.normal((vocab, d), np.sqrt(2.0 / 50)), "wemb"), "input_ids"])
        pos = g.op("Gather", [g.const(g.normal((512, d), np.sqrt(2.0 / 50)), "pemb"),
                              g.const(np.arange(s, dtype=np.int64).reshape(1, s), "pos")])
        tt = g.op("Gather", [g.const(g.normal((2, d), np.sqrt(2.0 / 50)), "temb"),
                             g.const(np.zeros((1, s), np.int64), "tt")])
        emb = g.op("Add", [g.op("Add", [emb, tt]), pos])
    else:  # positions 0..s-1 and token type 0 as one table
        emb = g.op("Gather", [g.const(g.normal((vocab, d), 0.02)), "input_ids"])
        emb = g.op("Add", [emb, g.const(g.normal((1, s, d), 0.02))])
    x = layer_norm(g, emb, d, export_form)
    m = g.op("Cast", [g.op("Unsqueeze", ["attention_mask", g.const(np.array([1, 2], np.int64))])], to=TensorProto.FLOAT)
    fill = np.finfo(np.float32).min if export_form else -10000.0
    mask = g.op("Mul", [g.op("Sub", [g.const(np.float32(1.0)), m]), g.const(np.float32(fill))])
    for _ in range(layers):
        x = layer_norm(g, g.op("Add", [attention(g, x, s, d, heads, mask, export_form), x]), d, export_form)
        h = linear(g, gelu(g, linear(g, x, d, ff, export_form)), ff, d, export_form)
        x = layer_norm(g, g.op("Add", [h, x]), d, export_form)
    return g.model("bert_base", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, s]),
                                 helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, s])],
                   [float_input("last_hidden_state", [1, s, d])])


def vit_base(d=768, heads=12, layers=12, ff=3072, patch=16, img=224):
    """timm's ViT-B/16: patch Conv, class token, position embeddings, pre-LN blocks, final
    LayerNormalization, the class token's Gemm head. Input 'pixel_values' [1,3,img,img]; output
    'logits' [1,1000]."""
    g = Graph(2)
    n = (img // patch) ** 2
    w = g.normal((d, 3, patch, patch), np.sqrt(1.0 / (3 * patch * patch)))
    y = g.op("Conv", ["pixel_values", g.const(w), g.const(g.normal(d, 0.02))], kernel_shape=[patch, patch],
             strides=[patch, patch])
    y = g.op("Transpose", [g.op("Reshape", [y, g.const(np.array([1, d, n], np.int64))])], perm=[0, 2, 1])
    x = g.op("Concat", [g.const(g.normal((1, 1, d), 0.02)), y], axis=1)
    x = g.op("Add", [x, g.const(g.normal((1, n + 1, d), 0.02))])
    for _ in range(layers):
        x = g.op("Add", [x, attention(g, layer_norm(g, x, d), n + 1, d, heads)])
        x = g.op("Add", [x, linear(g, gelu(g, linear(g, layer_norm(g, x, d), d, ff)), ff, d)])
    x = layer_norm(g, x, d)
    cls = g.op("Gather", [x, g.const(np.array(0, np.int64))], axis=1)
    g.op("Gemm", [cls, g.const(g.normal((1000, d), 0.02)), g.const(np.zeros(1000, np.float32))], transB=1)
    return g.model("vit_base", [float_input("pixel_values", [1, 3, img, img])], [float_input("logits", [1, 1000])])
