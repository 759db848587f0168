#!/usr/bin/env python3
"""Randomised differential testing of kiln's optimiser: writes random valid ONNX graphs built from
every pass's patterns, with reference outputs from ONNX Runtime (CPU, no graph optimisation; a
graph with uint8 x int8 integer products: its exact uint8 x uint8 twin's, u8s8_twin), in the ONNX
backend-test layout that `kiln test --compare-levels` reads (each level against level 0,
level 0 against the reference).

    opt_fuzz.py OUT_DIR [--seeds A-B] [--no-regressions]

Seed S always gives the same graph (for a given version of this file). The regression models
(regressions.py) are written too, as OUT_DIR/regress_<name>. OUT_DIR/zoo.json gives the tolerances.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402
import regressions  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4
RTOL16, ATOL16 = 2e-2, 2e-2  # float16 graphs: kiln and ONNX Runtime round intermediates differently


class ReferenceFailed(Exception):
    """ONNX Runtime could not run a graph onnx.checker accepts: no reference, the seed is skipped."""


def _to_float32(g):
    """The float16 graph g made float32 in place (types, initializers, Cast targets), bodies too."""
    from onnx import TensorProto
    for i, t in enumerate(g.initializer):
        if t.data_type == TensorProto.FLOAT16:
            g.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    for n in g.node:
        for a in n.attribute:
            if a.name == "to" and a.i == TensorProto.FLOAT16:
                a.i = TensorProto.FLOAT
            if a.type == onnx.AttributeProto.GRAPH:
                _to_float32(a.g)


def float16_trouble(model, inputs, outs, run):
    """Why a float16 graph's reference cannot be trusted, or None: its float32 twin's outputs reach
    magnitudes where a cube or a square of square passes 65504 (past which kiln keeps IEEE inf and
    ONNX Runtime's float16 kernels do not, seeds 12673, 28434), or the two differ past the float16
    tolerance (rounding amplified, as a LayerNorm over a near-constant row does)."""
    m32 = onnx.ModelProto()
    m32.CopyFrom(model)
    _to_float32(m32.graph)
    outs32 = run(m32.SerializeToString(), [x.astype(np.float32) if x.dtype == np.float16 else x for x in inputs])
    for a, b in zip(outs, outs32):
        a = np.asarray(a, np.float64)
        b = np.asarray(b, np.float64)
        if not np.all(np.isfinite(b)) or (b.size and np.max(np.abs(b)) > 30):
            return "its float32 twin reaches magnitudes past 30 (a cube passes 65504 in float16)"
        if a.shape != b.shape or not np.all(np.abs(a - b) <= ATOL16 / 2 + RTOL16 / 2 * np.abs(b)):
            return "it differs from its float32 twin past half the float16 tolerance in ONNX Runtime itself"
    return None


# The integer products whose operand B may be int8 beside a uint8 A: op -> (B's input, B's zero
# point's input). A is input 0 of each.
U8S8_PRODUCTS = {"MatMulInteger": (1, 3), "ConvInteger": (1, 3), "QLinearMatMul": (3, 5), "QLinearConv": (3, 5)}


def u8s8_twin(model):
    """The model with each uint8 x int8 integer product's int8 operand B and its zero point moved to
    uint8 by +128 (Cast to int32, Add 128, Cast to uint8; an absent zero point becomes 128), so the
    same exact sums, or None when it has no such product. ONNX Runtime's u8 x s8 kernels on x86
    CPUs without VNNI (AVX2's vpmaddubsw) add pairs of u8*s8 products in saturating int16, so with
    full-range int8 weights (dynamic_quant_matmul's) its outputs there are not the products (up to
    thousands off: 79 graphs of seeds 0-999 failed level 0 on an AVX2 EPYC, kiln's outputs the
    int64 definition's); its u8 x u8 kernels widen to int16 first (vpmaddwd), exact there too
    (the twins' outputs matched onnx.reference's)."""
    from onnx import TensorProto, helper
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {}

    def collect(g):
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            types[vi.name] = vi.type.tensor_type.elem_type
        for t in g.initializer:
            types[t.name] = t.data_type
        for n in g.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        types[n.output[0]] = a.t.data_type
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    collect(a.g)

    collect(inferred.graph)
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    count = [0]

    def shifted(src, nodes):
        """nodes that make src + 128 as uint8 (src int8, or "" for an absent zero point: 128)"""
        count[0] += 1
        base = f"_u8s8_twin_{count[0]}"
        if not src:
            nodes.append(helper.make_node("Constant", [], [base], value=numpy_helper.from_array(np.array(128, np.uint8))))
            return base
        nodes.append(helper.make_node("Constant", [], [base + "_c"], value=numpy_helper.from_array(np.array(128, np.int32))))
        nodes.append(helper.make_node("Cast", [src], [base + "_i"], to=TensorProto.INT32))
        nodes.append(helper.make_node("Add", [base + "_i", base + "_c"], [base + "_s"]))
        nodes.append(helper.make_node("Cast", [base + "_s"], [base], to=TensorProto.UINT8))
        return base

    def rewrite(g):
        changed = False
        new_nodes = []
        for old in list(g.node):
            n = onnx.NodeProto()
            n.CopyFrom(old)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    changed |= rewrite(a.g)
            spec = U8S8_PRODUCTS.get(n.op_type) if n.domain in ("", "ai.onnx") else None
            if spec and types.get(n.input[0]) == TensorProto.UINT8 and len(n.input) > spec[0] \
                    and types.get(n.input[spec[0]]) == TensorProto.INT8:
                bi, zi = spec
                ins = list(n.input) + [""] * (zi + 1 - len(n.input))
                ins[bi] = shifted(ins[bi], new_nodes)
                ins[zi] = shifted(ins[zi], new_nodes)
                del n.input[:]
                n.input.extend(ins)
                changed = True
            new_nodes.append(n)
        del g.node[:]
        g.node.extend(new_nodes)
        return changed

    return twin if rewrite(twin.graph) else None


def write(out, name, model, inputs):
    import onnxruntime as ort
    onnx.checker.check_model(model)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    data = model.SerializeToString()
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(data)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4  # a failure is reported below, as a skipped seed
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    def run(data, inputs):
        sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        return sess.run(None, dict(zip([i.name for i in sess.get_inputs()], inputs)))

    try:
        # the reference of a graph with uint8 x int8 products: its exact twin's (u8s8_twin)
        twin = u8s8_twin(model)
        sess = ort.InferenceSession(twin.SerializeToString() if twin else data, opts,
                                    providers=["CPUExecutionProvider"])
        in_names = [i.name for i in sess.get_inputs()]
        out_names = [o.name for o in sess.get_outputs()]
        outs = sess.run(None, dict(zip(in_names, inputs)))
        half = any(i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 for i in model.graph.input)
        trouble = float16_trouble(model, inputs, outs, run) if half else None
    except Exception as e:
        import shutil
        shutil.rmtree(d, ignore_errors=True)
        raise ReferenceFailed(str(e).splitlines()[0][:300])
    if trouble:
        import shutil
        shutil.rmtree(d, ignore_errors=True)
        raise ReferenceFailed("float16: " + trouble)
    ds = os.path.join(d, "test_data_set_0")
    os.makedirs(ds, exist_ok=True)
    for i, (n, v) in enumerate(zip(in_names, inputs)):
        with open(os.path.join(ds, f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(v), n).SerializeToString())
    for i, (n, v) in enumerate(zip(out_names, outs)):
        with open(os.path.join(ds, f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(v), n).SerializeToString())


def parse_seeds(s):
    a, _, b = s.partition("-")
    return range(int(a), int(b or a) + 1)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="random graphs for kiln test --compare-levels")
    ap.add_argument("out")
    ap.add_argument("--seeds", default="0-999", help="A-B: the seeds to write (default 0-999)")
    ap.add_argument("--no-regressions", action="store_true")
    a = ap.parse_args(argv)
    out, seeds = a.out, parse_seeds(a.seeds)
    os.makedirs(out, exist_ok=True)
    zoo = {}
    if not a.no_regressions:
        for build in regressions.REGRESSIONS:
            name = "regress_" + build.__name__
            model, inputs = build(np.random.default_rng(7))
            write(out, name, model, inputs)
            zoo[name] = {"rtol": RTOL, "atol": ATOL}
    n = 0
    skipped = []
    for seed in seeds:
        name = f"g{seed:06d}"
        model, inputs = gen.random_model(seed)
        try:
            write(out, name, model, inputs)
        except ReferenceFailed as e:
            print(f"SKIP {name}: no trustworthy reference: {e}")
            skipped.append(name)
            continue
        except Exception as e:  # a generator bug, not a kiln one: say which seed
            sys.stderr.write(f"opt_fuzz: seed {seed}: the generated graph is invalid: {e}\n")
            return 1
        half = model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
        zoo[name] = {"rtol": RTOL16, "atol": ATOL16} if half else {"rtol": RTOL, "atol": ATOL}
        n += 1
    with open(os.path.join(out, "zoo.json"), "w") as f:
        json.dump(zoo, f, indent=0, sort_keys=True)
    with open(os.path.join(out, "skipped.txt"), "w") as f:
        f.write("".join(s + "\n" for s in skipped))
    print(f"opt_fuzz: wrote {n} random graphs and {len(zoo) - n} regression models to {out}; "
          f"{len(skipped)} seeds skipped (no reference)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
