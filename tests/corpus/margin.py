#!/usr/bin/env python3
"""How much of each model's tolerance kiln's outputs use: for every test folder (model.onnx,
test_data_set_K/, zoo.json beside), runs `kiln run` on each data set's inputs with the given provider
and level, and prints the largest |got - want| / (atol + rtol * |want|) over every output element
(kiln test's rule, with its one-ulp floor for fp16/bf16 outputs; an integer or bool output counts
its differing elements instead). A pass of kiln test is a ratio <= 1; a ratio near 1 on the CPU
says the model has no room for another backend's rounding, one of 0.01 says it has.

    margin.py --kiln build/kiln [--provider cpu] [--opt-level 3] [--jobs N] [--deadline T] FOLDER...
Prints "margin MODEL RATIO OUTPUT DETAIL" per model (sorted, largest ratio first; RATIO "error" when
kiln run failed, with why) and exits 0 (a measurement, not a verdict).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor


def tolerance(folder):
    try:
        e = json.load(open(os.path.join(os.path.dirname(os.path.abspath(folder)), "zoo.json"))).get(os.path.basename(folder), {})
    except (OSError, ValueError):
        e = {}
    return e.get("rtol", 1e-3), e.get("atol", 1e-5)


def measure(kiln, folder, provider, level, timeout):
    """(ratio, output, detail) over every data set of FOLDER; ratio None when kiln run failed."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    rtol, atol = tolerance(folder)
    worst = (0.0, "", "")
    k = 0
    while os.path.isdir(os.path.join(folder, f"test_data_set_{k}")):
        ds = os.path.join(folder, f"test_data_set_{k}")
        args = [kiln, "run", os.path.join(folder, "model.onnx"), "--provider", provider, "--opt-level", str(level),
                "--threads", "1"]
        i = 0
        while os.path.exists(os.path.join(ds, f"input_{i}.pb")):
            t = onnx.TensorProto()
            path = os.path.join(ds, f"input_{i}.pb")
            t.ParseFromString(open(path, "rb").read())
            args += ["--input", f"{t.name}={path}"]
            i += 1
        with tempfile.TemporaryDirectory() as tmp:
            try:
                r = subprocess.run(args + ["--output-dir", tmp], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                return None, "", f"data set {k}: kiln run took more than {timeout:.0f} s"
            if r.returncode != 0:
                return None, "", f"data set {k}: kiln run: " + " ".join(r.stdout.strip().splitlines()[-1:])[:300]
            o = 0
            while os.path.exists(os.path.join(ds, f"output_{o}.pb")):
                t = onnx.TensorProto()
                t.ParseFromString(open(os.path.join(ds, f"output_{o}.pb"), "rb").read())
                want = numpy_helper.to_array(t)
                path = os.path.join(tmp, t.name.replace("/", "_").replace(":", "_") + ".npy")  # as kiln run names it
                if not os.path.exists(path):
                    return None, t.name, f"data set {k}: kiln wrote no {t.name}.npy"
                got = np.load(path)
                if got.shape != want.shape:
                    return None, t.name, f"data set {k}: shape {got.shape}, want {want.shape}"
                if want.dtype.kind == "f":
                    rt = rtol
                    if want.dtype == np.float16:
                        rt = max(rt, 1 / 1024)
                    g, w = got.astype(np.float64), want.astype(np.float64)
                    fin = np.isfinite(w)
                    if not np.array_equal(np.isnan(g), np.isnan(w)) or not np.array_equal(g[np.isinf(w)], w[np.isinf(w)]):
                        return float("inf"), t.name, f"data set {k}: NaN or infinity where the reference has none"
                    ratio = float(np.max(np.abs(g[fin] - w[fin]) / (atol + rt * np.abs(w[fin])), initial=0.0))
                    detail = f"data set {k}"
                else:
                    bad = int(np.count_nonzero(got != want))
                    ratio = float("inf") if bad else 0.0
                    detail = f"data set {k}: {bad} of {want.size} differ" if bad else f"data set {k}: exact"
                if ratio > worst[0] or not worst[1]:
                    worst = (ratio, t.name, detail)
                o += 1
        k += 1
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--provider", default="cpu")
    ap.add_argument("--opt-level", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--deadline", type=float, default=None, help="seconds since the epoch: no model starts after it")
    ap.add_argument("folders", nargs="+")
    a = ap.parse_args()

    def one(folder):
        folder = os.path.normpath(folder)  # "dir/": its zoo.json is beside it, not in it
        name = os.path.basename(folder)
        if a.deadline is not None and time.time() > a.deadline - 5:
            return name, None, "", "not measured: the time given (--deadline) was over"
        timeout = a.timeout if a.deadline is None else max(5.0, min(a.timeout, a.deadline - time.time()))
        try:
            return (name, *measure(a.kiln, folder, a.provider, a.opt_level, timeout))
        except Exception as e:  # a measurement tool: the reason, not a traceback
            return name, None, "", f"{type(e).__name__}: {e}"

    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = list(pool.map(one, a.folders))
    results.sort(key=lambda r: (0, 0) if r[1] is None else (1, -r[1]))
    for name, ratio, output, detail in results:
        shown = "error" if ratio is None else f"{ratio:.3g}"
        print(f"margin {name} {shown} {output or '-'} {detail}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
