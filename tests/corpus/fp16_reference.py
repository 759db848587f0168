#!/usr/bin/env python3
"""A float64 reference for an fp16 graph (issue 18): every node that reads fp16 values computes in
float64 on those exact values, and each fp16 output is rounded to fp16 once, at the node's output,
as the graph says. That is the best result any fp16 runtime can give node by node; onnx.reference
does the arithmetic (numpy, float64).

Why not ONNX Runtime: on the x86 CPU it has no fp16 kernels for much of such a graph and inserts
Casts to run those nodes in float32, then removes the Cast pairs that meet (fp16 -> float -> fp16),
so roundings the graph asks for never happen (the first Conv of ppocr_v6_rec_tiny_fp16 reads the
float32 input unrounded): its "fp16" output is mixed precision, 3x further from this reference than
kiln's or than a float32-per-node evaluation of the same graph (tests/corpus/README.md).

    fp16_reference.py MODEL.onnx TEST_DATA_SET_DIR...   # prints each data set's largest difference
                                                         # between output_N.pb and this reference
    fp16_reference.py --exact MODEL.onnx DIR...         # the same against the exact evaluation

The exact evaluation (--exact) rounds nothing between nodes: the fp16 weights and inputs, float64
arithmetic throughout. A runtime that fuses nodes (one rounding for a whole chain) lands between the
two, so how far apart they are is the least a tolerance for such a model must allow.
"""
import os
import sys

import numpy as np


def float64_graph(model, exact=False):
    """MODEL with every node that reads fp16 computing in float64 (Casts in, a Cast to fp16 after
    each fp16 output, or with EXACT none: values stay float64 between nodes); nodes in topological
    order (onnx.reference runs them in the order given)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper, shape_inference

    m = shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)}
    for t in m.graph.initializer:
        types[t.name] = t.data_type
    for n in m.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    types[n.output[0]] = a.t.data_type
    F16, F64 = TensorProto.FLOAT16, TensorProto.DOUBLE
    rounded = F64 if exact else F16  # the type of a node's fp16 output once computed
    inits = {t.name: t for t in m.graph.initializer}
    nodes, cast_done = [], set()

    def as_f64(name):
        if name not in cast_done:
            nodes.append(helper.make_node("Cast", [name], [name + "__f64"], to=F64))
            cast_done.add(name)
        return name + "__f64"

    for n in m.graph.node:
        if n.domain not in ("", "ai.onnx"):
            raise ValueError(f"node {n.name!r}: operator {n.domain}:{n.op_type} has no float64 reference")
        reads16 = any(i and types.get(i) == F16 for i in n.input)
        if not reads16 or n.op_type in ("Cast", "Shape", "Identity"):
            nodes.append(n)
            continue
        if n.op_type == "BatchNormalization":
            if len(n.output) != 1 or any(i not in inits for i in n.input[1:5]):
                raise ValueError(f"node {n.name!r}: only inference BatchNormalization with constant statistics")
            # x * a + b, a = scale / sqrt(var + eps), b = bias - mean * a, in float64: onnx.reference's
            # opset 9-13 BatchNormalization uses the batch's statistics whenever momentum is set, and
            # the schema's default sets it
            eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
            sc, bi, mu, var = (numpy_helper.to_array(inits[i]).astype(np.float64) for i in n.input[1:5])
            a = sc / np.sqrt(var + np.float64(np.float32(eps)))
            b = bi - mu * a
            rank = next(len(v.type.tensor_type.shape.dim) for v in m.graph.value_info if v.name == n.output[0])
            shape = (-1,) + (1,) * (rank - 2)
            y = n.output[0]
            m.graph.initializer.extend([numpy_helper.from_array(a.reshape(shape), y + "__bn_a"),
                                        numpy_helper.from_array(b.reshape(shape), y + "__bn_b")])
            x = as_f64(n.input[0]) if types.get(n.input[0]) == F16 else n.input[0]
            nodes.append(helper.make_node("Mul", [x, y + "__bn_a"], [y + "__bn_m"]))
            nodes.append(helper.make_node("Add", [y + "__bn_m", y + "__bn_b"], [y + "__o64"]))
            nodes.append(helper.make_node("Cast", [y + "__o64"], [y], to=rounded))
            continue
        new = onnx.NodeProto()
        new.CopyFrom(n)
        del new.input[:]
        del new.output[:]
        for i in n.input:
            new.input.append(as_f64(i) if i and types.get(i) == F16 else i)
        post = []
        for o in n.output:
            if o and types.get(o) == F16:
                new.output.append(o + "__o64")
                post.append(helper.make_node("Cast", [o + "__o64"], [o], to=rounded))
            else:
                new.output.append(o)
        nodes.append(new)
        nodes.extend(post)
    known = {i.name for i in m.graph.input} | {t.name for t in m.graph.initializer} | {""}
    order = []
    while nodes:
        rest = []
        for n in nodes:
            if all(i in known for i in n.input):
                order.append(n)
                known.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(nodes):
            raise ValueError(f"node {rest[0].name!r}: an input no node makes")
        nodes = rest
    del m.graph.node[:]
    m.graph.node.extend(order)
    return m


class Float64Reference:
    """run(feed) -> outputs of MODEL (an fp16 graph) computed node by node in float64 (EXACT: with
    no rounding between nodes)."""

    def __init__(self, model, exact=False):
        from onnx.reference import ReferenceEvaluator
        self.graph = float64_graph(model, exact)
        self.names = [o.name for o in model.graph.output]
        self.ev = ReferenceEvaluator(self.graph)

    def run(self, feed):
        return self.ev.run(self.names, feed)


def main():
    import onnx
    from onnx import numpy_helper
    args = sys.argv[1:]
    exact = bool(args) and args[0] == "--exact"
    args = args[1:] if exact else args
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    model = onnx.load(args[0])
    ref = Float64Reference(model, exact)
    inits = {i.name for i in model.graph.initializer}
    inputs = [v.name for v in model.graph.input if v.name not in inits]

    def read(path):
        t = onnx.TensorProto()
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
        return numpy_helper.to_array(t)
    for ds in args[1:]:
        feed = {n: read(os.path.join(ds, f"input_{i}.pb")) for i, n in enumerate(inputs)}
        for i, y in enumerate(ref.run(feed)):
            want = read(os.path.join(ds, f"output_{i}.pb"))
            print(f"{ds}: output {i}: largest difference {np.abs(y.astype(np.float64) - want).max():.6g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
