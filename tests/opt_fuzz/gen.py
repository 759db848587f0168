"""Random valid ONNX graphs made of the patterns kiln's optimisation passes look for.

random_model(seed) -> (model, inputs). A graph is a few pattern blocks chained on float32 values:
Conv (+bias, BatchNormalization, residual Add, activation), MatMul+Add (+residual, activation),
Gemm+activation, LayerNorm/RMSNorm and GELU decompositions, attention (one head and split heads),
elementwise chains, constant subexpressions and shape arithmetic, Reshape/Transpose chains,
duplicated nodes (CSE), no-ops, squeeze-excite blocks, and (one float32 graph in three) a dynamically quantised MatMul. Then random readers of the blocks' intermediates: extra nodes,
graph outputs, and If/Loop/Scan bodies (nested up to two deep) that read them from the enclosing
scope and hold patterns of their own. Random shapes (a symbolic batch in some), opsets 14/17/18,
float32 or (one graph in five) float16.
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
I64 = TensorProto.INT64
BOOL = TensorProto.BOOL
ACTS = ["Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "HardSwish", "Silu", "Gelu"]


class Graph:
    """One graph being built (the main graph or a body). vals: every float value made here, with
    its shape (candidates for extra readers); pool: the values blocks chain on."""

    def __init__(self, root, parent=None):
        self.root = root if root is not None else self
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.nodes, self.inits = [], []
        self.vals, self.pool = [], []
        if root is None:
            self.counter = [0]

    @property
    def rng(self):
        return self.root.r

    @property
    def opset(self):
        return self.root.op

    def name(self, base):
        self.root.counter[0] += 1
        return f"{base}{self.root.counter[0]}"

    def const(self, arr, base="c"):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def fconst(self, shape, scale=1.0, base="w"):
        return self.const((self.rng.standard_normal(shape) * scale).astype(self.root.npdt), base)

    def scalar(self, v):
        return self.const(np.array(v, self.root.npdt), "s")

    def node(self, op, ins, shape=None, n_out=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, **attrs))
        if shape is not None:
            self.vals.append((outs[0], tuple(shape)))
        return outs[0] if n_out == 1 else outs

    def ints(self, values):
        return self.const(np.array(values, np.int64), "i")

    def reduce(self, op, x, axes, keepdims, shape):
        """A Reduce* over axes (None: all), by attribute or input as the opset has it."""
        by_input = op == "ReduceSum" or self.opset >= 18
        if axes is None:
            return self.node(op, [x], shape, keepdims=keepdims)
        if by_input:
            return self.node(op, [x, self.ints(axes)], shape, keepdims=keepdims)
        return self.node(op, [x], shape, axes=list(axes), keepdims=keepdims)

    # ---- activations
    def act(self, x, shape, kind=None):
        r = self.rng
        kind = kind or ACTS[r.integers(len(ACTS))]
        if kind == "LeakyRelu":
            return self.node("LeakyRelu", [x], shape, alpha=float(r.choice([0.01, 0.2])))
        if kind == "Clip":
            lo, hi = sorted(r.uniform(-1.5, 1.5, 2).tolist())
            return self.node("Clip", [x, self.scalar(lo), self.scalar(hi)], shape)
        if kind == "HardSigmoid":
            return self.node("HardSigmoid", [x], shape, alpha=0.2, beta=0.5)
        if kind == "Silu":
            s = self.node("Sigmoid", [x], shape)
            return self.node("Mul", [x, s] if r.random() < 0.5 else [s, x], shape)
        if kind == "Gelu":
            return gelu(self, x, shape)
        return self.node(kind, [x], shape)

    def maybe_act(self, x, shape, p=0.6):
        return self.act(x, shape) if self.rng.random() < p else x


def pick(g, pred=None, from_vals=False):
    """A value (name, shape) of g satisfying pred, or None."""
    src = g.vals if from_vals else g.pool
    c = [v for v in src if pred is None or pred(v[1])]
    return c[g.rng.integers(len(c))] if c else None


# ---------------------------------------------------------------- pattern blocks
# Each takes (g, x, shape) and returns (value, shape) or None when it does not fit.

def conv(g, x, s, same=False):
    if len(s) != 4:
        return None
    r = g.rng
    n, c, h, w = s
    c2 = c if same or r.random() < 0.4 else int(r.integers(1, 7))
    k = int(r.choice([1, 3])) if min(h, w) >= 3 else 1
    pad = k // 2 if same or r.random() < 0.7 else 0
    group = c if c2 == c and c > 1 and r.random() < 0.3 else 1
    ho, wo = h + 2 * pad - k + 1, w + 2 * pad - k + 1
    ins = [x, g.fconst((c2, c // group, k, k), 1.0 / np.sqrt(c // group * k * k))]
    if r.random() < 0.7:
        ins.append(g.fconst((c2,), 0.1))
    out_s = (n, c2, ho, wo)
    y = g.node("Conv", ins, out_s, pads=[pad] * 4, kernel_shape=[k, k], group=group)
    if r.random() < 0.3:  # BatchNormalization after the Conv: fold_batchnorm
        y = g.node("BatchNormalization", [y, g.fconst((c2,), 0.5), g.fconst((c2,), 0.1), g.fconst((c2,), 0.1),
                                          g.const(r.uniform(0.5, 1.5, c2).astype(g.root.npdt))], out_s, epsilon=1e-5)
    if out_s == tuple(s) and r.random() < 0.5:  # residual
        y = g.node("Add", [y, x] if r.random() < 0.5 else [x, y], out_s)
    else:
        other = pick(g, lambda t: t == out_s)
        if other and r.random() < 0.3:
            y = g.node("Add", [y, other[0]], out_s)
    return g.maybe_act(y, out_s), out_s


def matmul(g, x, s, same=False):
    if len(s) < 1:
        return None
    r = g.rng
    k = s[-1]
    m = k if same or r.random() < 0.4 else int(r.integers(2, 9))
    out_s = tuple(s[:-1]) + (m,)
    y = g.node("MatMul", [x, g.fconst((k, m), 1.0 / np.sqrt(k))], out_s)
    if r.random() < 0.75:
        b = g.fconst((m,) if r.random() < 0.8 else (1,) * (len(s) - 1) + (m,), 0.1)
        y = g.node("Add", [y, b] if r.random() < 0.6 else [b, y], out_s)
    if len(out_s) == 2 and r.random() < 0.2:  # BatchNormalization over the features: fold_batchnorm
        y = g.node("BatchNormalization", [y, g.fconst((m,), 0.5), g.fconst((m,), 0.1), g.fconst((m,), 0.1),
                                          g.const(r.uniform(0.5, 1.5, m).astype(g.root.npdt))], out_s)
    if out_s == tuple(s) and r.random() < 0.4:
        y = g.node("Add", [y, x], out_s)
    return g.maybe_act(y, out_s), out_s


def gemm(g, x, s, same=False):
    if len(s) != 2:
        return None
    r = g.rng
    n, k = s
    m = k if same or r.random() < 0.4 else int(r.integers(2, 9))
    tb = int(r.integers(2))
    wt = g.fconst((m, k) if tb else (k, m), 1.0 / np.sqrt(k))
    ins = [x, wt]
    if r.random() < 0.7:
        ins.append(g.fconst((m,), 0.1))
    y = g.node("Gemm", ins, (n, m), transB=tb, alpha=float(r.choice([1.0, 0.5])), beta=float(r.choice([1.0, 2.0])))
    return g.act(y, (n, m)), (n, m)


def layernorm(g, x, s, same=True):
    if len(s) < 1 or s[-1] < 2:
        return None
    r = g.rng
    n_axes = 2 if len(s) >= 3 and r.random() < 0.2 else 1
    axes = list(range(-n_axes, 0))
    red = tuple(s[:-n_axes]) + (1,) * n_axes
    norm_shape = tuple(s[-n_axes:])
    # a tiny eps over a near-constant row (after a Clip, an Erf that saturates) amplifies rounding by
    # 1/sqrt(eps): past any tolerance in float32 at 1e-6, and in float16 (a 1e-3 ulp) at 1e-3 (seeds
    # 17622, 18595 differed from ONNX Runtime by one ulp of a saturated Erf, times 30)
    eps = g.scalar(float(r.choice([0.1, 0.5]) if g.root.half else r.choice([1e-3, 1e-2])))
    rms = r.random() < 0.3
    if rms:
        d = x
    else:
        mean = g.reduce("ReduceMean", x, axes, 1, red)
        d = g.node("Sub", [x, mean], s)
    sq = g.node("Pow", [d, g.scalar(2.0)], s) if r.random() < 0.5 else g.node("Mul", [d, d], s)
    var = g.reduce("ReduceMean", sq, axes, 1, red)
    ve = g.node("Add", [var, eps] if r.random() < 0.7 else [eps, var], red)
    std = g.node("Sqrt", [ve], red)
    if r.random() < 0.7:
        nrm = g.node("Div", [d, std], s)
    else:
        nrm = g.node("Mul", [d, g.node("Reciprocal", [std], red)], s)
    if r.random() < 0.8:
        sc_shape = norm_shape if r.random() < 0.85 else (s[0],) + (1,) * (len(s) - 1)  # a non-LN scale
        nrm = g.node("Mul", [nrm, g.fconst(sc_shape, 1.0)], s)
    if not rms and r.random() < 0.7:
        nrm = g.node("Add", [nrm, g.fconst(norm_shape, 0.1)], s)
    return nrm, s


def gelu(g, x, s, same=True):
    r = g.rng
    if r.random() < 0.6:  # 0.5 * x * (1 + erf(x / sqrt 2))
        e = g.node("Erf", [g.node("Div", [x, g.scalar(float(np.sqrt(2.0)))], s)
                           if r.random() < 0.5 else g.node("Mul", [x, g.scalar(float(1 / np.sqrt(2.0)))], s)], s)
        one = g.node("Add", [e, g.scalar(1.0)], s)
        if r.random() < 0.5:
            return g.node("Mul", [g.node("Mul", [x, g.scalar(0.5)], s), one], s)
        return g.node("Mul", [g.node("Mul", [x, one], s), g.scalar(0.5)], s)
    # tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    x3 = g.node("Pow", [x, g.scalar(3.0)], s) if r.random() < 0.5 else g.node("Mul", [g.node("Mul", [x, x], s), x], s)
    inner = g.node("Add", [x, g.node("Mul", [x3, g.scalar(0.044715)], s)], s)
    t = g.node("Tanh", [g.node("Mul", [inner, g.scalar(float(np.sqrt(2 / np.pi)))], s)], s)
    return g.node("Mul", [g.node("Mul", [x, g.scalar(0.5)], s), g.node("Add", [t, g.scalar(1.0)], s)], s)


def gelu_block(g, x, s, same=True):
    return gelu(g, x, s), s


def attention(g, x, s, same=True):
    if len(s) != 3 or s[2] % 2:
        return None
    r = g.rng
    b, n, d = s
    heads = int(r.choice([1, 2])) if d % 2 == 0 else 1
    if r.random() < 0.25:
        return torch_mha_batch_first(g, x, s, heads)
    split = heads > 1 or r.random() < 0.3
    # with heads split, every other time one packed projection taken apart (decided without a draw,
    # and with the same number of weights drawn, so the seeds' other choices stay as they were):
    # by Split after the heads' Transpose (timm's ViT) or by Slices of its columns (GPT-2's exports)
    packed = split and g.root.counter[0] % 2 == 1
    if packed:
        qkv = g.node("MatMul", [x, g.fconst((d, 3 * d), 1.0 / np.sqrt(d))], (b, n, 3 * d))
        by_split = g.root.counter[0] % 4 < 2
        if not by_split:
            q, k, v = (g.node("Slice", [qkv, g.ints([i * d]), g.ints([(i + 1) * d]), g.ints([2])], s) for i in range(3))
    else:
        q, k, v = (g.node("MatMul", [x, g.fconst((d, d), 1.0 / np.sqrt(d))], s) for _ in range(3))
    scale = 1.0 / np.sqrt(d // heads)
    if split:
        hd = d // heads
        shp = g.ints([b, n, heads, hd]) if r.random() < 0.5 else g.ints([0, 0, heads, hd])
        if packed and by_split:
            t = g.node("Reshape", [qkv, g.ints([b, n, 3, heads, hd])], (b, n, 3, heads, hd))
            t = g.node("Transpose", [t], (3, b, heads, n, hd), perm=[2, 0, 3, 1, 4])
            parts = g.node("Split", [t, g.ints([1, 1, 1])], None, n_out=3, axis=0)
            qh, kh, vh = (g.node("Squeeze", [p, g.ints([0])], (b, heads, n, hd)) for p in parts)
            kt = g.node("Transpose", [kh], (b, heads, hd, n), perm=[0, 1, 3, 2])
        else:
            qh = g.node("Transpose", [g.node("Reshape", [q, shp], (b, n, heads, hd))], (b, heads, n, hd), perm=[0, 2, 1, 3])
            kt = g.node("Transpose", [g.node("Reshape", [k, shp], (b, n, heads, hd))], (b, heads, hd, n), perm=[0, 2, 3, 1])
            vh = g.node("Transpose", [g.node("Reshape", [v, shp], (b, n, heads, hd))], (b, heads, n, hd), perm=[0, 2, 1, 3])
        ss = (b, heads, n, n)
    else:
        qh, vh = q, v
        kt = g.node("Transpose", [k], (b, d, n), perm=[0, 2, 1])
        ss = (b, n, n)
    if r.random() < 0.3:
        qh = g.node("Mul", [qh, g.scalar(float(scale))], None)
        sc = g.node("MatMul", [qh, kt], ss)
    else:
        sc = g.node("MatMul", [qh, kt], ss)
        sc = g.node("Div", [sc, g.scalar(float(1 / scale))], ss) if r.random() < 0.5 else \
            g.node("Mul", [sc, g.scalar(float(scale))], ss)
    if r.random() < 0.4:
        # float16: masked scores read elsewhere (a body's LayerNorm, squares of squares) pass 65504
        # with a mask of -1e4 or -60 (seeds 12673, 17622, 18595, 18798); past it kiln keeps IEEE inf
        # and ONNX Runtime does not (its float16 Sqrt(inf) is 4716), so no reference: -4 instead
        mask = np.triu(np.full((n, n), -4.0 if g.root.half else -1e4, g.root.npdt), 1)
        sc = g.node("Add", [sc, g.const(mask)], ss)
    p = g.node("Softmax", [sc], ss, axis=-1)
    y = g.node("MatMul", [p, vh], ss[:-1] + (d // heads if split else d,))
    if split:
        y = g.node("Reshape", [g.node("Transpose", [y], (b, n, heads, d // heads), perm=[0, 2, 1, 3]), g.ints([b, n, d])], s)
    return y, s


def torch_mha_batch_first(g, x, s, heads):
    """torch MultiheadAttention(batch_first=True) as exported: x [b, n, d] transposed to sequence
    first, projections over its rows (MatMul, perhaps + bias), heads merged with the batch, the
    output projection a Gemm over the rows, then Reshape and Transpose back (kiln moves those
    Transposes onto the attention's views: fold_attention_views)."""
    r = g.rng
    b, n, d = s
    hd = d // heads
    xt = g.node("Transpose", [x], (n, b, d), perm=[1, 0, 2])

    def proj():
        y = g.node("MatMul", [xt, g.fconst((d, d), 1.0 / np.sqrt(d))], (n, b, d))
        if r.random() < 0.5:
            y = g.node("Add", [y, g.fconst((d,), 0.1)], (n, b, d))
        return y

    def heads_of(t):  # [n, b, d] -> [b, heads, n, hd]
        t = g.node("Reshape", [t, g.ints([n, b * heads, hd])], (n, b * heads, hd))
        t = g.node("Transpose", [t], (b * heads, n, hd), perm=[1, 0, 2])
        return g.node("Reshape", [t, g.ints([b, heads, n, hd])], (b, heads, n, hd))

    q, k, v = heads_of(proj()), heads_of(proj()), heads_of(proj())
    kt = g.node("Transpose", [k], (b, heads, hd, n), perm=[0, 1, 3, 2])
    sc = g.node("MatMul", [g.node("Mul", [q, g.scalar(float(1 / np.sqrt(hd)))], None), kt], (b, heads, n, n))
    p = g.node("Softmax", [sc], (b, heads, n, n), axis=-1)
    y = g.node("MatMul", [p, v], (b, heads, n, hd))
    y = g.node("Transpose", [y], (n, b, heads, hd), perm=[2, 0, 1, 3])
    y = g.node("Reshape", [y, g.ints([n * b, d])], (n * b, d))
    if r.random() < 0.25:  # a projection without bias: a MatMul of two matrices
        y = g.node("MatMul", [y, g.fconst((d, d), 1.0 / np.sqrt(d))], (n * b, d))
    else:
        tb = r.random() < 0.5
        y = g.node("Gemm", [y, g.fconst((d, d), 1.0 / np.sqrt(d)), g.fconst((d,), 0.1)], (n * b, d), transB=int(tb))
    y = g.node("Reshape", [y, g.ints([n, b, d])], (n, b, d))
    y = g.node("Transpose", [y], s, perm=[1, 0, 2])
    if r.random() < 0.5:  # the block's residual (kiln: a FusedMatMul over the rows with it)
        y = g.node("Add", [x, y] if r.random() < 0.5 else [y, x], s)
    return y, s


def elementwise(g, x, s, same=True):
    r = g.rng
    y = x
    for _ in range(int(r.integers(1, 5))):
        op = r.choice(["Add", "Mul", "Sub", "Div", "Relu", "Sigmoid", "Tanh", "Abs", "Neg", "act", "same", "Sqrt", "Exp"])
        if op in ("Add", "Mul", "Sub"):
            c = g.scalar(float(r.uniform(-1, 1))) if r.random() < 0.5 else g.fconst(s[-1:] if s else (), 0.5)
            y = g.node(op, [y, c] if r.random() < 0.6 else [c, y], s)
        elif op == "Div":
            y = g.node("Div", [y, g.node("Add", [g.node("Abs", [g.fconst(s[-1:] if s else (), 1.0)], None),
                                                  g.scalar(0.5)], None)], s)
        elif op == "same":
            other = pick(g, lambda t: t == tuple(s))
            if other:
                y = g.node(str(r.choice(["Add", "Mul", "Sub", "Max", "Min"])), [y, other[0]], s)
        elif op == "Sqrt":
            y = g.node("Sqrt", [g.node("Add", [g.node("Abs", [y], s), g.scalar(0.1)], s)], s)
        elif op == "Exp":
            y = g.node("Exp", [g.node("Tanh", [y], s)], s)
        elif op == "act":
            y = g.act(y, s)
        else:
            y = g.node(str(op), [y], s)
    return y, s


def const_fold(g, x, s, same=True):
    """x + f(constants): a constant subexpression fold_constants evaluates (its values may be read
    by bodies too: a folded value read from a body)."""
    r = g.rng
    cs = tuple(s[-1:]) if s else ()
    c = g.fconst(cs, 1.0)
    for _ in range(int(r.integers(1, 4))):
        op = str(r.choice(["Mul", "Add", "Neg", "Sqrt", "Abs"]))
        if op in ("Mul", "Add"):
            c = g.node(op, [c, g.fconst(cs, 1.0)], cs)
        elif op == "Sqrt":
            c = g.node("Sqrt", [g.node("Abs", [c], cs)], cs)
        else:
            c = g.node(op, [c], cs)
    return g.node(str(r.choice(["Add", "Mul"])), [x, c], s), s


def flatten(g, x, s, same=False):
    """Shape arithmetic (Shape/Gather/Concat -> Reshape) or Flatten to 2-D, merged reshapes."""
    if len(s) < 3:
        return None
    r = g.rng
    out_s = (s[0], int(np.prod(s[1:])))
    kind = r.integers(3)
    if kind == 0:
        shp = g.node("Shape", [x], None)
        first = g.node("Gather", [shp, g.ints([0])], None, axis=0)
        tgt = g.node("Concat", [first, g.ints([-1])], None, axis=0)
        y = g.node("Reshape", [x, tgt], out_s)
    elif kind == 1:
        y = g.node("Flatten", [x], out_s, axis=1)
    else:  # a reshape of a reshape
        mid = g.node("Reshape", [x, g.ints([s[0], s[1], -1])], (s[0], s[1], int(np.prod(s[2:]))))
        y = g.node("Reshape", [mid, g.ints([s[0], -1])], out_s)
    return y, out_s


def unflatten(g, x, s, same=False):
    """2-D [n, k] -> 3-D [n, a, b] or 4-D [n, c, h, w] when k factors, through Unsqueeze/Reshape chains."""
    if len(s) != 2:
        return None
    r = g.rng
    n, k = s
    facs = [f for f in range(2, k) if k % f == 0]
    if not facs:
        y = g.node("Unsqueeze", [x, g.ints([1])], (n, 1, k))
        return y, (n, 1, k)
    a = int(r.choice(facs))
    if r.random() < 0.5:
        out_s = (n, a, k // a)
    else:
        out_s = (n, a, k // a, 1)
    if r.random() < 0.5:
        mid = g.node("Unsqueeze", [x, g.ints([1])], (n, 1, k))
        y = g.node("Reshape", [mid, g.ints(list(out_s))], out_s)
    else:
        y = g.node("Reshape", [x, g.ints(list(out_s))], out_s)
    return y, out_s


def transposes(g, x, s, same=False):
    if len(s) < 2:
        return None
    r = g.rng
    y, cur = x, tuple(s)
    for _ in range(int(r.integers(1, 4))):
        perm = [int(i) for i in r.permutation(len(s))]
        cur = tuple(cur[i] for i in perm)
        y = g.node("Transpose", [y], cur, perm=perm)
    if same and cur != tuple(s):
        return None
    return y, cur


def detector(g, x, s, same=False):
    """The operators that name axes around convolutions (a detector's C2f block and neck: Split,
    Slice, Concat, Resize), which layout_nhwc renumbers inside channels-last regions."""
    if len(s) != 4:
        return None
    r = g.rng
    if r.random() < 0.6:  # after a convolution, so that a channels-last region reaches them
        x, s = conv(g, x, s)
    n, c, h, w = s
    kind = int(r.integers(4))
    if kind == 0 and c >= 2:  # C2f: split the channels, convolve one part, concatenate
        a = int(r.integers(1, c))
        axis = int(r.choice([1, -3]))
        if g.opset >= 13:
            parts = g.node("Split", [x, g.ints([a, c - a])], None, n_out=2, axis=axis)
        else:
            parts = g.node("Split", [x], None, n_out=2, axis=axis, split=[a, c - a])
        g.vals += [(parts[0], (n, a, h, w)), (parts[1], (n, c - a, h, w))]
        conv_out = conv(g, parts[1], (n, c - a, h, w), same=True)
        ins = [parts[0], conv_out[0]] + ([x] if r.random() < 0.5 else [])
        cout = a + (c - a) + (c if len(ins) == 3 else 0)
        out_s = (n, cout, h, w)
        return g.node("Concat", ins, out_s, axis=int(r.choice([1, -3]))), out_s
    if kind == 1:  # Slice: one or two axes, axes given (maybe negative, int32) or implied
        dt = np.int32 if r.random() < 0.3 else np.int64
        k = int(r.integers(1, 3))
        given = r.random() < 0.7
        axes = sorted(int(a) for a in r.choice(4, k, replace=False)) if given else list(range(k))
        starts, ends, steps, out_s = [], [], [], list(s)
        for a in axes:
            d = s[a]
            st = int(r.integers(0, d))
            en = int(r.integers(st + 1, d + 1)) if r.random() < 0.8 else 1 << 30
            step = int(r.choice([1, 1, 2]))
            starts.append(st), ends.append(en), steps.append(step)
            out_s[a] = len(range(st, min(en, d), step))
        ins = [x, g.const(np.array(starts, dt), "i"), g.const(np.array(ends, dt), "i")]
        if given or r.random() < 0.5:
            shown = [a - 4 if r.random() < 0.4 else a for a in axes]
            ins.append(g.const(np.array(shown, dt), "i"))
            if any(st != 1 for st in steps):
                ins.append(g.const(np.array(steps, dt), "i"))
        else:
            out_s = list(s)
            for a, st, en in zip(axes, starts, ends):
                out_s[a] = len(range(st, min(en, s[a])))
        out_s = tuple(out_s)
        return g.node("Slice", ins, out_s), out_s
    if kind == 2:  # Resize: nearest x2 by scales, or linear by sizes
        if r.random() < 0.5:
            out_s = (n, c, 2 * h, 2 * w)
            sc = g.const(np.array([1, 1, 2, 2], np.float32), "sc")
            return g.node("Resize", [x, "", sc], out_s, mode="nearest"), out_s
        out_s = (n, c, int(r.integers(1, 2 * h + 1)), int(r.integers(1, 2 * w + 1)))
        return g.node("Resize", [x, "", "", g.ints(list(out_s))], out_s, mode="linear"), out_s
    # Concat on a spatial axis, with itself or another value of the same shape
    other = pick(g, lambda t: t == tuple(s)) or (x, s)
    axis = int(r.choice([2, 3, -1, -2]))
    out_s = list(s)
    out_s[axis] *= 2
    out_s = tuple(out_s)
    return g.node("Concat", [x, other[0]], out_s, axis=axis), out_s


def cse(g, x, s, same=True):
    r = g.rng
    op = str(r.choice(["Relu", "Sigmoid", "Abs", "Neg", "Tanh"]))
    a = g.node(op, [x], s)
    b = g.node(op, [x], s)
    if r.random() < 0.5:
        c1, c2 = g.fconst(s[-1:] if s else (), 1.0), None
        a = g.node("Mul", [a, c1], s)
        w = numpy_helper.to_array(next(i for i in g.inits if i.name == c1))
        c2 = g.const(w.copy())  # an equal constant under another name
        b = g.node("Mul", [b, c2], s)
    return g.node("Sub" if r.random() < 0.5 else "Add", [a, b], s), s


def noops(g, x, s, same=True):
    r = g.rng
    y = x
    for _ in range(int(r.integers(1, 3))):
        k = int(r.integers(6))
        if k == 0:
            y = g.node("Identity", [y], s)
        elif k == 1:
            y = g.node("Dropout", [y], s)
        elif k == 2:
            y = g.node("Cast", [y], s, to=g.root.elem)
        elif k == 3:
            y = g.node("Reshape", [y, g.ints(list(s))], s)
        elif k == 4 and len(s) >= 1:
            y = g.node("Transpose", [y], s, perm=list(range(len(s))))
        else:
            y = g.node("Expand", [y, g.ints(list(s))], s)
    return y, s


def dynamic_quant_matmul(g, r):
    """quantize_dynamic's MatMul: DynamicQuantizeLinear(x) -> MatMulInteger -> Cast -> Mul by
    x_scale * W_scale (-> bias Add), the chain fuse_integer_matmul_scale folds, on a graph input
    (an intermediate would differ by rounding between levels and flip a quantised value), with
    the variants the pass takes (scale and zero point per tensor or per column, either Mul order,
    a bias or none) and near misses it must leave (the converted product read elsewhere, a bias
    that is not a constant [N], the scaled product read beside the Add). r: the block's own
    random stream. Returns (value, shape) or None (float16 graphs: the operators take float32)."""
    if g.half:
        return None
    inp = g.inputs[int(r.integers(len(g.inputs)))]
    x, s = inp.name, next(v[1] for v in g.vals if v[0] == inp.name)
    k = s[-1]
    m = int(r.integers(1, 9))
    out_s = tuple(s[:-1]) + (m,)
    xq, xs, xz = g.node("DynamicQuantizeLinear", [x], n_out=3)
    signed = r.random() < 0.5
    wq = g.const(r.integers(-128, 128, (k, m)).astype(np.int8) if signed
                 else r.integers(0, 256, (k, m)).astype(np.uint8), "wq")
    per_col = r.random() < 0.5
    ins = [xq, wq, xz]
    if r.random() < 0.7:  # W's zero point: one, or one per column
        zp = r.integers(-8, 8, (m,) if per_col else ()) if signed else r.integers(120, 136, (m,) if per_col else ())
        ins.append(g.const(zp.astype(np.int8 if signed else np.uint8), "wz"))
    prod = g.node("MatMulInteger", ins)
    conv = g.node("Cast", [prod], to=F)
    if r.random() < 0.15:  # the converted product read elsewhere: no fold
        g.extra_outputs.append((g.node("Neg", [conv]), out_s))
    ws = g.const(r.uniform(0.002, 0.02, (m,) if per_col else ()).astype(np.float32), "ws")
    scale = g.node("Mul", [xs, ws])
    y = g.node("Mul", [conv, scale] if r.random() < 0.5 else [scale, conv])
    u = r.random()
    if u < 0.5:  # the model's bias, a constant [N]
        y2 = g.node("Add", [y, g.fconst((m,), 0.1)] if r.random() < 0.5 else [g.fconst((m,), 0.1), y])
    elif u < 0.65:  # a bias of another shape: the Add stays
        y2 = g.node("Add", [y, g.fconst((1,) * (len(s) - 1) + (m,), 0.1)])
    else:
        y2 = y
    if y2 != y and r.random() < 0.2:  # the scaled product read beside the Add
        g.extra_outputs.append((g.node("Relu", [y]), out_s))
    return y2, out_s


def squeeze_excite(g, x, s, same=True):
    """A squeeze-excite block (fuse_squeeze_excite): the mean over the spatial axes
    (GlobalAveragePool, or ReduceMean kept or dropped), a product down to m channels and one back
    (1x1 Conv, or Flatten + Gemm / MatMul + Add on [N, C] and a Reshape back), an activation between
    (Relu, SiLU, HardSwish or none) and a gate (Sigmoid or HardSigmoid), times X from either side.
    Its intermediates are values like any (the extra readers that leave it unfused)."""
    if len(s) not in (3, 4) or s[1] < 1:
        return None
    r = g.rng
    n, c = s[0], s[1]
    m = int(r.integers(1, 9))
    sp = list(range(2, len(s)))
    ones = (1,) * (len(s) - 2)
    flat = r.random() < 0.35
    if r.random() < 0.5 and not flat:
        p = g.node("GlobalAveragePool", [x], (n, c) + ones)
    elif flat and r.random() < 0.5:
        p = g.reduce("ReduceMean", x, [a - len(s) if r.random() < 0.3 else a for a in sp], 0, (n, c))
    else:
        p = g.reduce("ReduceMean", x, sp, 1, (n, c) + ones)
        if flat:
            p = g.node("Flatten", [p], (n, c), axis=1)

    def product(v, cin, cout):
        if not flat:
            ins = [v, g.fconst((cout, cin) + ones, 1.0 / np.sqrt(cin))]
            if r.random() < 0.8:
                ins.append(g.fconst((cout,), 0.2))
            return g.node("Conv", ins, (n, cout) + ones, kernel_shape=[1] * (len(s) - 2))
        if r.random() < 0.5:
            tb = int(r.integers(2))
            ins = [v, g.fconst((cout, cin) if tb else (cin, cout), 1.0 / np.sqrt(cin))]
            if r.random() < 0.8:
                ins.append(g.fconst((cout,), 0.2))
            return g.node("Gemm", ins, (n, cout), transB=tb)
        y = g.node("MatMul", [v, g.fconst((cin, cout), 1.0 / np.sqrt(cin))], (n, cout))
        if r.random() < 0.8:
            b = g.fconst((cout,), 0.2)
            y = g.node("Add", [y, b] if r.random() < 0.5 else [b, y], (n, cout))
        return y

    hs = (n, m) if flat else (n, m) + ones
    h = product(p, c, m)
    kind = str(r.choice(["Relu", "Silu", "HardSwish", "none"]))
    if kind != "none":
        h = g.act(h, hs, kind)
    gs = (n, c) if flat else (n, c) + ones
    gt = product(h, m, c)
    gt = g.act(gt, gs, str(r.choice(["Sigmoid", "HardSigmoid"])))
    if flat:
        gt = g.node("Reshape", [gt, g.ints([-1, c] + [1] * (len(s) - 2))], (n, c) + ones)
    return g.node("Mul", [x, gt] if r.random() < 0.5 else [gt, x], s), s


BLOCKS = [conv, conv, matmul, matmul, gemm, layernorm, gelu_block, attention, elementwise, const_fold, flatten,
          unflatten, transposes, cse, noops, detector, squeeze_excite]
SAME_BLOCKS = [conv, matmul, layernorm, gelu_block, elementwise, cse, noops, attention]


def add_block(g, blocks=BLOCKS, same=False, x=None):
    r = g.rng
    for _ in range(20):
        blk = blocks[r.integers(len(blocks))]
        xv = x or pick(g)
        if xv is None:
            return None
        res = blk(g, xv[0], xv[1], same=same) if blk not in (gelu_block, const_fold) else blk(g, xv[0], xv[1])
        if res is not None:
            if same and tuple(res[1]) != tuple(xv[1]):
                continue
            g.pool.append((res[0], tuple(res[1])))
            return res
    return None


# ---------------------------------------------------------------- subgraphs

def outer_candidates(g):
    """Values a body of g may read: g's own and every enclosing graph's."""
    out, at = [], g
    while at is not None:
        out += at.vals
        at = at.parent
    return out


def read_outer_scalar(body, g):
    """In body: a scalar from an intermediate of g or an enclosing graph (an outer-scope read)."""
    c = outer_candidates(g)
    if not c:
        return None
    v, _ = c[body.rng.integers(len(c))]
    return body.reduce(str(body.rng.choice(["ReduceMean", "ReduceMax", "ReduceSum"])), v, None, 0, ())


def body_transform(body, x, s, g):
    """A shape-preserving computation of x in body: a pattern block or two, and reads of the
    enclosing graphs' intermediates (directly when one has x's shape, else through a scalar)."""
    r = body.rng
    body.pool.append((x, s))
    body.vals.append((x, s))
    y = x
    for _ in range(int(r.integers(1, 3))):
        res = add_block(body, SAME_BLOCKS, same=True, x=(y, s))
        if res is not None:
            y = res[0]
    same = [v for v in outer_candidates(g) if v[1] == tuple(s)]
    if same and r.random() < 0.7:
        y = body.node(str(r.choice(["Add", "Sub", "Mul"])), [y, same[r.integers(len(same))][0]], s)
    for _ in range(int(r.integers(0, 3))):
        sc = read_outer_scalar(body, g)
        if sc is not None:
            y = body.node("Add", [y, body.node("Mul", [sc, body.scalar(0.1)], ())], s)
    if body.depth < 2 and r.random() < 0.3:  # a control-flow node inside the body
        res = add_control(body)
        if res is not None and res[1] == tuple(s):
            y = body.node("Add", [y, res[0]], s)
    return y


def make_body(g, name, ins, outs):
    body_g = helper.make_graph(g.nodes, name, ins, outs, g.inits)
    return body_g


def tvi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, None if shape is None else [None] * len(shape))


def add_if(g):
    r = g.rng
    c = outer_candidates(g)
    if not c:
        return None
    v, s = c[r.integers(len(c))]
    # the condition: a graph input, or computed from an intermediate
    if r.random() < 0.5 and g.parent is None:
        cond = g.root.cond_input()
    else:
        w, _ = c[r.integers(len(c))]
        cond = g.node("Greater", [g.reduce("ReduceSum", w, None, 0, ()), g.scalar(float(r.uniform(-1, 1)))], None)
    branches = []
    for which in ("then", "else"):
        body = Graph(g.root, g)
        src = body.node("Identity", [v], s)  # the branch's own copy of the outer value
        y = body_transform(body, src, s, g)
        out = body.node("Identity", [y], s)
        branches.append(make_body(body, g.name(which), [], [tvi(out, g.root.elem, s)]))
    out = g.node("If", [cond], s, then_branch=branches[0], else_branch=branches[1])
    return out, s


def add_loop(g):
    r = g.rng
    c = outer_candidates(g)
    if not c:
        return None
    v, s = c[r.integers(len(c))]
    trips = int(r.integers(1, 4))
    body = Graph(g.root, g)
    i_n, cin, a_in = body.name("iter"), body.name("cond_in"), body.name("carried")
    y = body_transform(body, a_in, s, g)
    y = body.node("Mul", [y, body.scalar(0.5)], s)
    cout = body.node("Identity", [cin], None)
    scan_out = r.random() < 0.4
    outs = [tvi(cout, BOOL, ()), tvi(y, g.root.elem, s)]
    if scan_out:
        so = body.node("Neg", [y], s)
        outs.append(tvi(so, g.root.elem, s))
    bg = make_body(body, g.name("loop_body"), [tvi(i_n, I64, ()), tvi(cin, BOOL, ()), tvi(a_in, g.root.elem, s)], outs)
    m = g.const(np.array(trips, np.int64), "trips")
    cond = g.const(np.array(True), "true") if r.random() < 0.7 else ""
    res = g.node("Loop", [m, cond, v], None, n_out=2 if scan_out else 1, body=bg)
    if scan_out:
        final, stacked = res
        g.vals.append((final, s))
        g.vals.append((stacked, (trips,) + s))
        if g.parent is None:
            g.extra_outputs.append((stacked, (trips,) + s))
        return final, s
    g.vals.append((res, s))
    return res, s


def add_scan(g):
    r = g.rng
    c = [x for x in outer_candidates(g) if len(x[1]) >= 2]
    if not c:
        return None
    v, s = c[r.integers(len(c))]
    es = s[1:]
    body = Graph(g.root, g)
    st_in, x_in = body.name("state"), body.name("elem")
    y = body_transform(body, x_in, es, g)
    st_out = body.node("Add", [st_in, y], es)
    so = body.node("Relu", [y], es)
    bg = make_body(body, g.name("scan_body"), [tvi(st_in, g.root.elem, es), tvi(x_in, g.root.elem, es)], [tvi(st_out, g.root.elem, es), tvi(so, g.root.elem, es)])
    init = g.const(np.zeros(es, g.root.npdt), "zeros")
    final, stacked = g.node("Scan", [init, v], None, n_out=2, body=bg, num_scan_inputs=1)
    g.vals.append((final, es))
    g.vals.append((stacked, s))
    if g.parent is None:
        g.extra_outputs.append((stacked, s))
    return final, es


def add_control(g):
    kind = g.rng.integers(3)
    return (add_if, add_loop, add_scan)[kind](g)


# ---------------------------------------------------------------- the model

class Root(Graph):
    def __init__(self, seed):
        self.r = np.random.default_rng(seed)
        self.op = int(self.r.choice([14, 17, 18]))
        # one graph in five is float16 throughout (drawn apart, so a seed's graph is the same
        # either way): the fusions form for 16-bit types where the target has the kernel
        self.half = np.random.default_rng([seed, 16]).random() < 0.2
        self.elem = TensorProto.FLOAT16 if self.half else F
        self.npdt = np.float16 if self.half else np.float32
        super().__init__(None)
        self.inputs, self.feeds, self.extra_outputs = [], [], []
        self.cond = None

    def add_input(self, shape, symbolic):
        n = self.name("x")
        dims = list(shape)
        if symbolic:
            dims[0] = "batch"
        self.inputs.append(helper.make_tensor_value_info(n, self.elem, dims))
        self.feeds.append(self.r.standard_normal(shape).astype(self.npdt))
        self.pool.append((n, tuple(shape)))
        self.vals.append((n, tuple(shape)))
        return n

    def cond_input(self):
        if self.cond is None:
            self.cond = self.name("cond")
            self.inputs.append(helper.make_tensor_value_info(self.cond, BOOL, []))
            self.feeds.append(np.array(bool(self.r.integers(2))))
        return self.cond


def random_model(seed):
    g = Root(seed)
    r = g.r
    batch = int(r.integers(1, 3))
    symbolic = r.random() < 0.3
    kind = r.integers(3)
    if kind == 0:
        shape = (batch, int(r.integers(1, 6)), int(r.integers(3, 7)), int(r.integers(3, 7)))
    elif kind == 1:
        shape = (batch, int(r.integers(2, 6)), int(r.choice([4, 6, 8])))
    else:
        shape = (batch * 2, int(r.integers(2, 9)))
    g.add_input(shape, symbolic)
    if r.random() < 0.3:
        g.add_input(shape, symbolic)
    for _ in range(int(r.integers(2, 6))):
        add_block(g)
    # a dynamically quantised MatMul in one float32 graph in three, drawn apart so that every
    # other seed's graph stays what it was
    rq = np.random.default_rng([seed, 8])
    if rq.random() < 1 / 3:
        res = dynamic_quant_matmul(g, rq)
        if res is not None:
            g.extra_outputs.append(res)
    # readers of intermediates: subgraphs, extra nodes, graph outputs
    outputs = []
    for _ in range(int(r.integers(0, 3))):
        res = add_control(g)
        if res is not None:
            outputs.append(res)
    for _ in range(int(r.integers(0, 3))):
        v = pick(g, from_vals=True)
        if v and r.random() < 0.5:
            outputs.append((g.node(str(r.choice(["Neg", "Relu", "Abs"])), [v[0]], v[1]), v[1]))
        elif v:
            outputs.append(v)
    last = g.pool[-1]
    outputs.append(last)
    for v in g.pool[:-1]:
        if r.random() < 0.2:
            outputs.append(v)
    outputs += g.extra_outputs
    seen, outs = set(), []
    for name, s in outputs:
        if name in seen or name in (i.name for i in g.inputs):
            continue
        seen.add(name)
        outs.append(tvi(name, g.elem, s))
    graph = helper.make_graph(g.nodes, f"opt_fuzz_{seed}", g.inputs, outs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", g.op)], producer_name="kiln-opt-fuzz")
    model.ir_version = 8
    return model, g.feeds
