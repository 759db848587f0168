#!/usr/bin/env python3
"""Proof of equivalence of kiln's optimisation levels (called by scripts/equivalence.sh).

For every test folder (model.onnx + test_data_set_N/input_I.pb, output_I.pb: the ONNX node tests
and the model zoo) it checks two things at each level 1, 2 and 3:

  1. the level's outputs against level 0's, element by element, at the test's tolerance
     (kiln run --output-dir at each level; both runs on one thread, same inputs);
  2. the level's outputs against the reference outputs (kiln test --opt-level N): a test that
     passes at level 0 must pass at every level.

A folder whose level-0 run fails (an operator kiln lacks, an output .npy cannot hold such as
strings or sequences), or whose model draws unseeded random numbers, is skipped for check 1 and
counts once as skipped. Ends with
"N passed, N failed, N skipped" where each (folder, data set, level) comparison counts once.
"""
import argparse
import concurrent.futures as cf
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

try:
    import onnx
    from onnx import numpy_helper
except ImportError:  # pragma: no cover
    print("equivalence: the onnx Python package is needed")
    print("0 passed, 1 failed, 0 skipped")
    sys.exit(1)

LEVELS = (1, 2, 3)


def find_tests(roots):
    out = []
    for root in roots:
        if os.path.isfile(os.path.join(root, "model.onnx")):
            out.append(root)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            if "model.onnx" in filenames:
                out.append(dirpath)
                dirnames[:] = []
    return sorted(out)


def tolerance(test_dir):
    """rtol, atol of the folder: its zoo.json entry, else kiln test's defaults."""
    zoo = os.path.join(os.path.dirname(test_dir), "zoo.json")
    if os.path.isfile(zoo):
        with open(zoo) as f:
            entry = json.load(f).get(os.path.basename(test_dir), {})
        return float(entry.get("rtol", 1e-3)), float(entry.get("atol", 1e-5))
    return 1e-3, 1e-5


RANDOM_OPS = {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike"}


def unseeded_random(m):
    """Whether the model draws random numbers without a seed (its outputs differ run to run)."""
    def nodes(graph):
        for n in graph.node:
            yield n
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    yield from nodes(a.g)
                for g in a.graphs:
                    yield from nodes(g)
    all_nodes = list(nodes(m.graph))
    for f in m.functions:
        all_nodes += list(f.node)
    return any(n.op_type in RANDOM_OPS and not any(a.name == "seed" for a in n.attribute) for n in all_nodes)


def io_names(model_path):
    m = onnx.load(model_path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    ins = [i.name for i in m.graph.input if i.name not in inits]
    outs = [o.name for o in m.graph.output]
    return ins, outs, unseeded_random(m)


def npy_name(name):
    return re.sub(r"[/:]", "_", name) + ".npy"


def provider_args(provider):
    """kiln's --provider flag, or nothing for the default provider (the CPU)."""
    return ["--provider", provider] if provider else []


def run_level(kiln, test_dir, data_set, ins, level, out_dir, timeout, cache_dir, provider=None):
    os.makedirs(out_dir, exist_ok=True)
    args = [kiln, "run", os.path.join(test_dir, "model.onnx"), "--opt-level", str(level), "--threads", "1",
            "--output-dir", out_dir] + provider_args(provider)
    for i, name in enumerate(ins):
        f = os.path.join(data_set, "input_%d.pb" % i)
        if os.path.isfile(f):
            args += ["--input", "%s=%s" % (name, f)]
    try:
        # a compiled-model cache of the folder's own, removed with it: a shared one would
        # grow by thousands of entries and every run would pay for scanning them
        env = dict(os.environ, KILN_CACHE_DIR=cache_dir)
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    if r.returncode != 0:
        return False, (r.stderr.strip() or r.stdout.strip() or "exit %d" % r.returncode).splitlines()[-1]
    return True, ""


def compare(a, b, rtol, atol):
    """None when equal within tolerance, else the reason."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return "got %s%s, level 0 gave %s%s" % (a.dtype, list(a.shape), b.dtype, list(b.shape))
    if a.dtype.kind in "fc":
        af, bf = a.astype(np.float64), b.astype(np.float64)
        nan_a, nan_b = np.isnan(af), np.isnan(bf)
        if (nan_a != nan_b).any():
            return "NaN in %d places where level 0 has none (or the reverse)" % int((nan_a != nan_b).sum())
        inf_b = np.isinf(bf)
        if (af[inf_b] != bf[inf_b]).any():
            return "infinities differ"
        ok = ~(nan_b | inf_b)
        err = np.abs(af[ok] - bf[ok])
        bad = err > atol + rtol * np.abs(bf[ok])
        if bad.any():
            i = int(np.argmax(err))
            return "%d of %d elements differ, max error %.3g (got %.9g, level 0 %.9g; rtol %g, atol %g)" % (
                int(bad.sum()), a.size, float(err[i]), float(af[ok][i]), float(bf[ok][i]), rtol, atol)
        return None
    if not np.array_equal(a, b):
        return "%d of %d elements differ" % (int((a != b).sum()), a.size)
    return None


def check_folder(kiln, test_dir, timeout, provider=None):
    """[(label, status, reason)] with status 'pass' | 'fail' | 'skip'."""
    name = os.path.basename(test_dir)
    try:
        ins, outs, random = io_names(os.path.join(test_dir, "model.onnx"))
    except Exception as e:  # a model onnx cannot read: nothing to compare
        return [(name, "skip", "onnx cannot read the model: %s" % e)]
    if random:
        return [(name, "skip", "unseeded random operator: outputs differ between any two runs")]
    rtol, atol = tolerance(test_dir)
    sets = sorted(d for d in os.listdir(test_dir) if d.startswith("test_data_set_"))
    results = []
    tmp = tempfile.mkdtemp(prefix="kiln_eq_", dir=os.environ.get("KILN_EQ_TMP"))
    try:
        for ds in sets:
            data_set = os.path.join(test_dir, ds)
            base = os.path.join(tmp, ds, "0")
            ok, why = run_level(kiln, test_dir, data_set, ins, 0, base, timeout, os.path.join(tmp, "cache"), provider)
            if not ok:
                results.append(("%s/%s" % (name, ds), "skip", "level 0 does not run: %s" % why))
                continue
            ref = {}
            for o in outs:
                p = os.path.join(base, npy_name(o))
                ref[o] = np.load(p, allow_pickle=False) if os.path.isfile(p) else None
            for level in LEVELS:
                label = "%s/%s level %d" % (name, ds, level)
                d = os.path.join(tmp, ds, str(level))
                ok, why = run_level(kiln, test_dir, data_set, ins, level, d, timeout, os.path.join(tmp, "cache"), provider)
                if not ok:
                    results.append((label, "fail", "level 0 runs but level %d fails: %s" % (level, why)))
                    continue
                reason = None
                for o in outs:
                    if ref[o] is None:
                        continue
                    p = os.path.join(d, npy_name(o))
                    if not os.path.isfile(p):
                        reason = "output '%s' missing" % o
                        break
                    r = compare(np.load(p, allow_pickle=False), ref[o], rtol, atol)
                    if r:
                        reason = "output '%s': %s" % (o, r)
                        break
                results.append((label, "fail" if reason else "pass", reason or ""))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def reference_runs(kiln, roots, expected, provider=None):
    """kiln test at every level: the tests that pass at level 0 must pass at each level."""
    passed = {}
    for level in (0,) + LEVELS:
        args = [kiln, "test", "--opt-level", str(level)] + provider_args(provider) + \
            (["--expected-failures", expected] if expected else []) + roots
        r = subprocess.run(args, capture_output=True, text=True)
        failing = set()
        for line in r.stdout.splitlines():
            m = re.match(r"^FAIL (\S+?):", line)
            if m:
                failing.add(m.group(1))
        passed[level] = failing
    results = []
    for level in LEVELS:
        regressions = sorted(passed[level] - passed[0])
        for t in regressions:
            results.append(("%s (reference) level %d" % (t, level), "fail", "passes kiln test at level 0, fails at level %d" % level))
        results.append(("kiln test against the references, level %d" % level, "fail" if regressions else "pass",
                        "%d regressions" % len(regressions) if regressions else ""))
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--expected-failures", default=None)
    ap.add_argument("--provider", default=None,
                    help="kiln's --provider for every run, e.g. cuda,cpu (default: kiln's default, the CPU)")
    ap.add_argument("roots", nargs="+")
    a = ap.parse_args()
    tests = find_tests(a.roots)
    counts = {"pass": 0, "fail": 0, "skip": 0}
    with cf.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = [pool.submit(check_folder, a.kiln, t, a.timeout, a.provider) for t in tests]
        for f in futures:
            for label, status, reason in f.result():
                counts[status] += 1
                if status == "fail":
                    print("FAIL %s: %s" % (label, reason), flush=True)
    for label, status, reason in reference_runs(a.kiln, a.roots, a.expected_failures, a.provider):
        counts[status] += 1
        if status == "fail":
            print("FAIL %s: %s" % (label, reason), flush=True)
    if a.provider:
        print("(provider %s at every level)" % a.provider)
    print("(%d folders; level 0 runs that could not be compared are counted as skipped)" % len(tests))
    print("%d passed, %d failed, %d skipped" % (counts["pass"], counts["fail"], counts["skip"]))
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
