#!/usr/bin/env python3
"""Write the ONNX backend node tests of the installed (pinned) onnx package to disk.

Newer onnx wheels no longer ship the node tests as files; they build them in memory
(onnx.backend.test.loader.load_model_tests). This script writes each one in the standard
backend-test layout that `kiln test` reads:

    OUT/test_NAME/model.onnx
    OUT/test_NAME/test_data_set_K/input_I.pb, output_I.pb

Usage: write_node_tests.py OUT_DIR
"""
import os
import sys
import warnings


def serialise(value, name, type_proto, numpy_helper):
    """One input/output as the proto its declared type calls for: TensorProto, SequenceProto
    or OptionalProto (the type decides, as the values alone are ambiguous)."""
    import numpy as np
    from onnx import TensorProto
    if isinstance(value, TensorProto):  # already serialised (e.g. float8 casts)
        t = TensorProto()
        t.CopyFrom(value)
        t.name = name
        return t
    kind = type_proto.WhichOneof("value") if type_proto is not None else "tensor_type"
    if kind == "sequence_type":
        return numpy_helper.from_list(list(value), name=name)
    if kind == "optional_type":
        elem = type_proto.optional_type.elem_type
        elem_kind = elem.WhichOneof("value")
        opt = value
        if opt is not None and elem_kind == "tensor_type":
            opt = np.asarray(opt)
        elif opt is not None and elem_kind == "sequence_type":
            opt = list(opt)
        return numpy_helper.from_optional(opt, name=name)
    return numpy_helper.from_array(np.asarray(value), name=name)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    out = sys.argv[1]
    warnings.filterwarnings("ignore")
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.loader import load_model_tests

    cases = load_model_tests(kind="node")
    os.makedirs(out, exist_ok=True)
    written = 0
    for case in cases:
        d = os.path.join(out, case.name)
        os.makedirs(d, exist_ok=True)
        model = case.model
        with open(os.path.join(d, "model.onnx"), "wb") as f:
            f.write(model.SerializeToString())
        ins = list(model.graph.input)
        outs = list(model.graph.output)
        for k, (inputs, outputs) in enumerate(case.data_sets or []):
            ds = os.path.join(d, f"test_data_set_{k}")
            os.makedirs(ds, exist_ok=True)
            for i, v in enumerate(inputs):
                vi = ins[i] if i < len(ins) else None
                p = serialise(v, vi.name if vi else f"input_{i}", vi.type if vi else None, numpy_helper)
                with open(os.path.join(ds, f"input_{i}.pb"), "wb") as f:
                    f.write(p.SerializeToString())
            for i, v in enumerate(outputs):
                vi = outs[i] if i < len(outs) else None
                p = serialise(v, vi.name if vi else f"output_{i}", vi.type if vi else None, numpy_helper)
                with open(os.path.join(ds, f"output_{i}.pb"), "wb") as f:
                    f.write(p.SerializeToString())
        written += 1
    print(f"wrote {written} node tests to {out} (onnx {onnx.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
