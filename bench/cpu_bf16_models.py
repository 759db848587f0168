#!/usr/bin/env python3
"""kiln's CPU precision=bf16 on whole models: kiln bf16, OpenVINO bf16 and kiln fp32 side by side.

Models: ResNet-50 (torchvision's v1.5 layout), BERT-base (12 layers, 768 wide, sequence 128, the
transformers export's graph: LayerNormalization, Erf GELU, attention as MatMul/Softmax with the
additive mask) and ViT-B/16 (timm's layout: patch Conv, class token, pre-LN blocks, head). Where
torch is installed, bench/cpu_models.py exports ResNet-50 and BERT-base; this script builds all
three directly with onnx.helper (bench/onnx_builders.py's layer-by-layer form: seeded random
weights at the frameworks' initialisation scales, as the zoo's models have), so it runs on machines
without torch. --model NAME=PATH adds any .onnx (fed
its test_data_set_0 where there is one beside it, as the zoo's models have).

For each model and thread count, in one process, alternating rounds (each round the median of its
runs, the result the median of the rounds): kiln with cpu:precision=bf16, OpenVINO with
INFERENCE_PRECISION_HINT=bf16 (its default on CPUs with avx512_bf16), kiln fp32, and OpenVINO f32
and ONNX Runtime fp32 for reference. Accuracy of every runtime against ONNX Runtime fp32: relative
L2 (||got - ref|| / ||ref||) and max |got - ref| / max |ref| over the outputs.

    bench/cpu_bf16_models.py [--build build] [--work /tmp/kiln-bf16-models] [--threads 1,2]
                             [--rounds 5] [--seconds 1.0] [--only resnet50,bert_base,vit_base]
                             [--model NAME=PATH ...] [--no-peers] [--clock wall|process] [--half] [--out FILE]

Needs numpy, onnx, onnxruntime; OpenVINO optional (`pip install openvino`).
Writes bench/results/cpu-bf16-DATE.md (or --out).
"""
import argparse
import datetime
import os
import statistics
import sys
import time

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import onnx_builders  # noqa: E402
from benchutil import cpu_name, random_feeds, timed  # noqa: E402
from op_sweep import Kiln, KilnSession  # noqa: E402


BUILDERS = {"resnet50": onnx_builders.resnet50, "bert_base": onnx_builders.bert_base, "vit_base": onnx_builders.vit_base}


# ------------------------------------------------------------------ runners

CLOCK = time.perf_counter


def dataset_feeds(path):
    """The inputs of test_data_set_0 beside the model (the zoo's layout), or None: random feeds give
    symbolic dims 1 (a sequence of one token) and ids past a small vocabulary."""
    from onnx import numpy_helper
    d = os.path.join(os.path.dirname(path), "test_data_set_0")
    if not os.path.isdir(d):
        return None
    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in inits]
    feeds = {}
    for i, n in enumerate(names):
        f = os.path.join(d, f"input_{i}.pb")
        if not os.path.exists(f):
            return None
        t = onnx.TensorProto()
        t.ParseFromString(open(f, "rb").read())
        feeds[t.name or n] = numpy_helper.to_array(t)
    return feeds


def errors(outs, ref):
    num = sum(float(np.sum((np.asarray(o, np.float64) - r) ** 2)) for o, r in zip(outs, ref))
    den = sum(float(np.sum(np.asarray(r, np.float64) ** 2)) for r in ref)
    mx = max(float(np.max(np.abs(np.asarray(o, np.float64) - r))) for o, r in zip(outs, ref))
    scale = max(float(np.max(np.abs(r))) for r in ref) or 1.0
    return np.sqrt(num / (den or 1.0)), mx / scale


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/kiln-bf16-models")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per runtime per round")
    ap.add_argument("--only", default="resnet50,bert_base,vit_base")
    ap.add_argument("--model", action="append", default=[], help="NAME=PATH of another .onnx")
    ap.add_argument("--no-peers", action="store_true", help="kiln only (accuracy against ORT still)")
    ap.add_argument("--clock", default="wall", choices=["wall", "process"],
                    help="process: the process's CPU time per run (1 thread on a shared machine: other "
                         "processes' load does not count; wrong for several threads, which spin)")
    ap.add_argument("--half", action="store_true",
                    help="also kiln with cpu:precision=bf16:activations=half (the residual stream in bf16 "
                         "too, as OpenVINO's bf16; not exact): column kiln_bf16h")
    ap.add_argument("--before", default=None,
                    help="another build (its libkiln.so loaded beside --build's): its kiln_bf16 (and kiln_bf16h "
                         "with --half) in the same rotation, columns *_before, and after / before ratios")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if a.clock == "process" else time.perf_counter

    import onnxruntime as ort
    cores = os.cpu_count() or 1
    threads = [t for t in (int(x) for x in a.threads.split(",")) if t <= cores] or [cores]
    os.makedirs(a.work, exist_ok=True)
    models = []
    for name in [n for n in a.only.split(",") if n]:
        path = os.path.join(a.work, f"{name}.onnx")
        if not os.path.exists(path):
            print(f"building {name} -> {path}", flush=True)
            onnx.save(BUILDERS[name](), path)
        models.append((name, path))
    for spec in a.model:
        models.append(tuple(spec.split("=", 1)))
    k = Kiln(os.path.join(a.build, "libkiln.so"))
    kb = Kiln(os.path.join(a.before, "libkiln.so")) if a.before else None
    ov = None
    if not a.no_peers:
        try:
            import openvino as ov
        except ImportError:
            print("OpenVINO not installed: no OpenVINO columns", file=sys.stderr)

    rows = []
    for name, path in models:
        feeds = dataset_feeds(path) or random_feeds(path)
        model_bytes = open(path, "rb").read()
        so = ort.SessionOptions()
        so.intra_op_num_threads = max(threads)
        ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)
        for th in threads:
            runners, acc, sessions = {}, {}, []
            kiln_runs = [("kiln_bf16", "cpu:precision=bf16"), ("kiln_fp32", "cpu")]
            if a.half:
                kiln_runs.insert(1, ("kiln_bf16h", "cpu:precision=bf16:activations=half"))
            kiln_runs = [(l, p, k) for l, p in kiln_runs]
            if kb:  # the before build's sessions between the after build's and the peers
                kiln_runs[2 if a.half else 1:2 if a.half else 1] = [
                    (l + "_before", p, kb) for l, p, _ in kiln_runs if l in ("kiln_bf16", "kiln_bf16h")]
            for label, prov, lib in kiln_runs:
                ks = KilnSession(lib, model_bytes, th, prov, feeds)
                outs = ks.run_alloc()
                ks.bind_outputs(outs)
                runners[label], acc[label] = ks.run, errors(outs, ref)
                sessions.append(ks)
            if ov is not None:
                core = ov.Core()
                for label, hint in [("ov_bf16", "bf16"), ("ov_f32", "f32")]:
                    cfg = {"INFERENCE_NUM_THREADS": th, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
                           "INFERENCE_PRECISION_HINT": hint}
                    req = core.compile_model(core.read_model(path), "CPU", cfg).create_infer_request()
                    res = req.infer(feeds)
                    acc[label] = errors([res[o] for o in req.model_outputs], ref)
                    runners[label] = lambda r=req: r.infer(feeds)
            if not a.no_peers:
                so = ort.SessionOptions()
                so.intra_op_num_threads, so.inter_op_num_threads = th, 1
                sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
                runners["ort_fp32"] = lambda s=sess: s.run(None, feeds)
                acc["ort_fp32"] = (0.0, 0.0)
            for fn in runners.values():  # warm-up
                for _ in range(3):
                    fn()
            meds = {n: [] for n in runners}
            for _ in range(a.rounds):
                for n, fn in runners.items():
                    time.sleep(0.2)  # let the previous runtime's spinning threads idle
                    meds[n].append(timed(fn, a.seconds, clock=CLOCK))
            res = {n: statistics.median(v) for n, v in meds.items()}
            for ks in sessions:
                ks.close()
            rows.append((name, th, res, acc))
            print(f"{name:10s} t{th} " + "  ".join(f"{n} {v:8.2f} ms" for n, v in res.items()) + "  |  " +
                  "  ".join(f"{n} L2 {e[0]:.1e} max {e[1]:.1e}" for n, e in acc.items() if n != "ort_fp32"), flush=True)

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = a.out or os.path.join(ROOT, "bench", "results", f"cpu-bf16-{date}.md")
    cols = [c for c in ["kiln_bf16_before", "kiln_bf16", "kiln_bf16h_before", "kiln_bf16h", "ov_bf16", "kiln_fp32",
                        "ov_f32", "ort_fp32"]
            if any(c in r[2] for r in rows)]
    with open(out, "w") as f:
        f.write(f"# kiln CPU precision=bf16 on whole models ({date})\n\n")
        f.write(f"machine: {cpu_name()}, {cores} cores; onnxruntime {ort.__version__}"
                + (f", OpenVINO {ov.__version__}" if ov else "") +
                f"; {a.rounds} alternating rounds, median of the rounds' medians (ms per run, "
                + ("the process's CPU time" if a.clock == "process" else "wall clock") + ")\n\n")
        f.write(f"command: `python3 bench/cpu_bf16_models.py {' '.join(sys.argv[1:])}`\n\n")
        before = "kiln_bf16_before" in cols
        half = "kiln_bf16h" in cols
        f.write("| model | threads | " + " | ".join(f"{c} ms" for c in cols) + " | kiln_bf16 / ov_bf16 |" +
                (" kiln_bf16h / ov_bf16 |" if half else "") + " kiln_bf16 / kiln_fp32 |" +
                (" bf16 before / ov_bf16 |" + (" bf16h before / ov_bf16 |" if half else "") +
                 " bf16 after / before |" + (" bf16h after / before |" if half else "") if before else "") + "\n")
        f.write("|---|---:|" + "---:|" * (len(cols) + 2 + half + (2 + 2 * half if before else 0)) + "\n")
        for name, th, res, _ in rows:
            f.write(f"| {name} | {th} | " + " | ".join(f"{res[c]:.2f}" if c in res else "-" for c in cols) +
                    (f" | {res['kiln_bf16'] / res['ov_bf16']:.2f}" if "ov_bf16" in res else " | -") +
                    ((f" | {res['kiln_bf16h'] / res['ov_bf16']:.2f}" if "ov_bf16" in res else " | -") if half else "") +
                    f" | {res['kiln_bf16'] / res['kiln_fp32']:.2f} |" +
                    ((f" {res['kiln_bf16_before'] / res['ov_bf16']:.2f} |" if "ov_bf16" in res else " - |") +
                     ((f" {res['kiln_bf16h_before'] / res['ov_bf16']:.2f} |" if "ov_bf16" in res else " - |") if half else "") +
                     f" {res['kiln_bf16'] / res['kiln_bf16_before']:.3f} |" +
                     (f" {res['kiln_bf16h'] / res['kiln_bf16h_before']:.3f} |" if half else "") if before else "") + "\n")
        f.write("\nAccuracy against ONNX Runtime fp32 (same inputs): relative L2 = ||got - ref|| / ||ref||, "
                "max = max |got - ref| / max |ref|\n\n")
        acols = [c for c in ["kiln_bf16_before", "kiln_bf16", "kiln_bf16h_before", "kiln_bf16h", "ov_bf16", "kiln_fp32",
                             "ov_f32"] if any(c in r[3] for r in rows)]
        f.write("| model | " + " | ".join(f"{c} rel L2 | {c} max" for c in acols) + " |\n")
        f.write("|---|" + "---:|" * (2 * len(acols)) + "\n")
        seen = set()
        for name, th, _, acc in rows:
            if name in seen:
                continue
            seen.add(name)
            f.write(f"| {name} | " + " | ".join(f"{acc[c][0]:.1e} | {acc[c][1]:.1e}" if c in acc else "- | -"
                                                for c in acols) + " |\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
