#!/usr/bin/env python3
"""Runs every corpus model (build/corpus, made by fetch_corpus.py) with kiln at levels 0-3 on the
CPU and with --compare-levels (levels 1-3 against level 0), and prints the README's results table
(markdown) on stdout; each failure's message follows the table.

    report.py [--kiln build/kiln] [--out build/corpus] [--provider P] [NAME...]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# operators worth naming in the table (the others are the common ones every CNN has)
NOTABLE = ["If", "Loop", "Scan", "LSTM", "GRU", "RNN", "LayerNormalization", "Attention", "Erf",
           "ConvTranspose", "Resize", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
           "MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM", "NonMaxSuppression", "TopK",
           "Range", "ArgMax", "Where", "LogSoftmax", "HardSwish", "HardSigmoid", "Softmax", "Split",
           "ReduceMax", "GlobalMaxPool", "Einsum", "CumSum", "Expand", "Pad"]


def ops_of(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    ops = collections.Counter()

    def walk(g):
        for n in g.node:
            ops[n.op_type] += 1
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)
                for sub in a.graphs:
                    walk(sub)
    walk(m.graph)
    fp16 = any(i.data_type == onnx.TensorProto.FLOAT16 for i in m.graph.initializer)
    names = [f"{o}×{ops[o]}" if ops[o] > 1 else o for o in NOTABLE if ops[o]]
    if fp16:
        names.append("fp16 weights")
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=0)
    return f"opset {opset}; {sum(ops.values())} nodes; " + ", ".join(names)


def run(cmd, env):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "corpus"))
    ap.add_argument("--provider", default=None)
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    manifest = json.load(open(os.path.join(HERE, "manifest.json")))
    names = args.names or list(manifest["models"])
    for n, e in manifest["models"].items():
        if "variant" in e:
            e["wheel"] = manifest["models"][e["variant"]["of"]]["wheel"]
    env = dict(os.environ, KILN_CACHE_DIR=tempfile.mkdtemp(prefix="kiln_corpus_"))
    prov = ["--provider", args.provider] if args.provider else []
    print("| model | package (version) | size | operators of note | L0 | L1 | L2 | L3 | levels 1-3 = L0 |")
    print("|---|---|---|---|---|---|---|---|---|")
    notes = {}  # message -> the levels that gave it
    for n in names:
        e = manifest["models"][n]
        pin = manifest["wheels"][e["wheel"]]
        folder = os.path.join(args.out, n)
        model = os.path.join(folder, "model.onnx")
        if not os.path.exists(model):
            print(f"| {n} | {e['wheel']} {pin['version']} | | not built | | | | | |")
            continue
        size = os.path.getsize(model) / 1e6
        cells = []
        for level in range(4):
            out = run([args.kiln, "test", "--opt-level", str(level), *prov, folder], env)
            fail = [l for l in out.splitlines() if l.startswith("FAIL")]
            cells.append("fail" if fail or "1 passed" not in out else "pass")
            for l in fail:
                notes.setdefault(f"`{n}`: {l[5:].strip()}", []).append(str(level))
        out = run([args.kiln, "test", "--compare-levels", *prov, folder], env)
        m = re.search(r"^(\d+) passed, (\d+) failed, (\d+) skipped", out, re.M)
        cmp = f"{m.group(1)} pass, {m.group(2)} fail, {m.group(3)} skip" if m else "no result"
        for l in out.splitlines():
            if l.startswith("FAIL"):
                notes.setdefault(f"`{n}`: {l[5:].strip()}", []).append("compare-levels")
        ci = " (CI)" if e.get("ci") else ""
        print(f"| {n}{ci} | {e['wheel']} {pin['version']} | {size:.1f} MB | {ops_of(model)} | "
              + " | ".join(cells) + f" | {cmp} |", flush=True)
    if notes:
        print("\nFailures:\n")
        for msg, levels in notes.items():
            print(f"- levels {','.join(levels)}: {msg}")


if __name__ == "__main__":
    sys.exit(main())
