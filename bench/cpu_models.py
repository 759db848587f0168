#!/usr/bin/env python3
"""Whole models on the CPU: kiln against ONNX Runtime and OpenVINO at several thread counts.

ResNet-50 (torchvision) and BERT-base (transformers, sequence 128) are exported once with torch
(random weights, fixed seed: latency does not depend on the values) into --work, unless
MODEL.onnx is already there (export on a machine with torch, copy the folder to one without).
Any other .onnx given with --model NAME=PATH runs too (random inputs of its declared shapes,
symbolic dims 1). For every model and thread count the runtimes run side by side in one
process, alternating rounds (kiln, ORT, OpenVINO f32, ...), each round the median of its runs,
the result the median of the rounds; kiln through libkiln (ctypes, as bench/op_sweep.py), ORT
and OpenVINO with the same intra-op thread count, one stream, latency hint, fp32 forced
(INFERENCE_PRECISION_HINT=f32). --ov-default adds OpenVINO at its default precision (bf16 on
CPUs with avx512_bf16/AMX), for reference only. Reports kiln/best-peer and each runtime's
scaling from 1 thread.

    bench/cpu_models.py [--build build] [--work /tmp/kiln-cpu-models] [--threads 1,4,16]
                        [--rounds 5] [--seconds 1.0] [--only resnet50,bert_base]
                        [--model NAME=PATH ...] [--ov-default] [--kiln-base BUILD] [--out FILE]

--kiln-base BUILD times a second kiln build (its libkiln.so) in the same rounds, column kiln_base
(not a peer): a change measured before/after under the same machine load. Every runtime's outputs
are checked against ONNX Runtime's once (column "max err": the largest |kiln - ORT| over the
outputs, relative to ORT's largest magnitude).

Needs onnx and onnxruntime; torch + torchvision + transformers to export; OpenVINO optional
(`pip install openvino==2026.4.1`). Writes bench/results/cpu-models-DATE.md.
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
from benchutil import cpu_name, random_feeds, timed  # noqa: E402
from op_sweep import Kiln, KilnSession  # noqa: E402

import onnxruntime as ort  # noqa: E402


def export(name, path):
    import torch
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50().eval()
        args, names = (torch.randn(1, 3, 224, 224),), ["input"]
    elif name == "bert_base":
        from transformers import BertConfig, BertModel

        class Bert(torch.nn.Module):  # keyword arguments: transformers 5 reordered forward's
            def __init__(self):
                super().__init__()
                self.m = BertModel(BertConfig())  # bert-base-uncased's shape: 12 layers, 768 wide

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = Bert().eval()
        ids = torch.randint(0, 30522, (1, 128))
        args, names = (ids, torch.ones(1, 128, dtype=torch.int64)), ["input_ids", "attention_mask"]
    else:
        raise SystemExit(f"no exporter for {name}")
    with torch.no_grad():
        torch.onnx.export(m, args, path, input_names=names, opset_version=17, dynamo=False)


def feeds_for(path):
    m = onnx.load(path, load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    # a model folder in the zoo's layout: its own first data set (valid token ids, token types)
    data = os.path.join(os.path.dirname(path), "test_data_set_0")
    if os.path.isdir(data):
        from onnx import numpy_helper
        names = [i.name for i in m.graph.input if i.name not in inits]
        feeds = {}
        for k, name in enumerate(names):
            f = os.path.join(data, f"input_{k}.pb")
            if not os.path.isfile(f):
                break
            t = onnx.TensorProto()
            with open(f, "rb") as fh:
                t.ParseFromString(fh.read())
            feeds[t.name or name] = numpy_helper.to_array(t)
        if len(feeds) == len(names):
            return feeds
    return random_feeds(m)


CLOCK = time.perf_counter


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/kiln-cpu-models")
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.0, help="time per runtime per round")
    ap.add_argument("--only", default="resnet50,bert_base")
    ap.add_argument("--model", action="append", default=[], help="NAME=PATH of another .onnx")
    ap.add_argument("--ov-default", action="store_true")
    ap.add_argument("--kiln-base", default=None, help="another kiln build folder, timed as kiln_base")
    ap.add_argument("--out", default=None)
    ap.add_argument("--clock", default="wall", choices=["wall", "process"],
                    help="process: the process's CPU time per run (1 thread on a shared machine: other processes' "
                         "load does not count; wrong for several threads, which spin)")
    a = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if a.clock == "process" else time.perf_counter

    cores = os.cpu_count() or 1
    threads = [t for t in (int(x) for x in a.threads.split(",")) if t <= cores] or [cores]
    os.makedirs(a.work, exist_ok=True)
    models = []
    for name in [n for n in a.only.split(",") if n]:
        path = os.path.join(a.work, f"{name}.onnx")
        if not os.path.exists(path):
            print(f"exporting {name} -> {path}", flush=True)
            export(name, path)
        models.append((name, path))
    for spec in a.model:
        name, path = spec.split("=", 1)
        models.append((name, path))
    k = Kiln(os.path.join(a.build, "libkiln.so"))
    # a second build: its own copy of the library, so the loader does not hand back the first
    kb = None
    if a.kiln_base:
        import shutil
        import tempfile
        libb = os.path.join(tempfile.mkdtemp(prefix="kiln-base-"), "libkiln-base.so")
        shutil.copy(os.path.realpath(os.path.join(a.kiln_base, "libkiln.so")), libb)
        kb = Kiln(libb)
    try:
        import openvino as ov
    except ImportError:
        ov = None
        print("OpenVINO not installed: ORT is the only peer", file=sys.stderr)

    rows = []
    for name, path in models:
        feeds = feeds_for(path)
        for th in threads:
            runners = {}
            model_bytes = open(path, "rb").read()
            ks = KilnSession(k, model_bytes, th, "cpu", feeds)
            kouts = ks.run_alloc()
            ks.bind_outputs(kouts)
            runners["kiln"] = ks.run
            kbs = None
            if kb is not None:
                kbs = KilnSession(kb, model_bytes, th, "cpu", feeds)
                kbs.bind_outputs(kbs.run_alloc())
                runners["kiln_base"] = kbs.run
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = th, 1
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            runners["ort"] = lambda s=sess: s.run(None, feeds)
            oouts = sess.run(None, feeds)
            scale = max(float(np.max(np.abs(o))) for o in oouts) or 1.0
            err = max(float(np.max(np.abs(np.asarray(x, np.float64) - o))) for x, o in zip(kouts, oouts)) / scale
            if ov is not None:
                core = ov.Core()
                for label, hint in [("ov", "f32")] + ([("ov_default", None)] if a.ov_default else []):
                    cfg = {"INFERENCE_NUM_THREADS": th, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
                    if hint:
                        cfg["INFERENCE_PRECISION_HINT"] = hint
                    try:
                        req = core.compile_model(core.read_model(path), "CPU", cfg).create_infer_request()
                    except RuntimeError as e:  # a model OpenVINO cannot read: ORT stays the peer
                        print(f"{name}: OpenVINO cannot run it: {str(e).strip().splitlines()[-1][:160]}", file=sys.stderr)
                        continue
                    runners[label] = lambda r=req: r.infer(feeds)
            for fn in runners.values():  # warm-up
                for _ in range(3):
                    fn()
            meds = {n: [] for n in runners}
            for _ in range(a.rounds):
                for n, fn in runners.items():
                    time.sleep(0.2)  # idle spinning threads of the previous runtime
                    meds[n].append(timed(fn, a.seconds, clock=CLOCK))
            res = {n: statistics.median(v) for n, v in meds.items()}
            ks.close()
            if kbs is not None:
                kbs.close()
            best = min(v for n, v in res.items() if n in ("ort", "ov"))
            rows.append((name, th, res, res["kiln"] / best, err))
            print(f"{name:12s} t{th:<3d} " + "  ".join(f"{n} {v:8.3f} ms" for n, v in res.items()) +
                  f"  kiln/best {res['kiln'] / best:5.2f}  max err {err:.1e}", flush=True)

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = a.out or os.path.join(ROOT, "bench", "results", f"cpu-models-{date}.md")
    cols = ["kiln"] + (["kiln_base"] if kb else []) + ["ort"] + (["ov"] if ov else []) + \
        (["ov_default"] if ov and a.ov_default else [])
    scol = [c for c in cols if c in ("kiln", "ort", "ov")]
    clock_name = "the process's CPU time" if a.clock == "process" else "wall clock"
    with open(out, "w") as f:
        f.write(f"# Whole models on the CPU: kiln vs onnxruntime {ort.__version__}"
                + (f" and OpenVINO {ov.__version__}" if ov else "") + f" ({date})\n\n")
        f.write(f"machine: {cpu_name()}, {cores} cores; {a.rounds} alternating rounds, median of the rounds' "
                f"medians ({clock_name}); OpenVINO f32 forced "
                f"(ov_default: its default precision, not a peer)\n\n")
        f.write(f"command: `python3 bench/cpu_models.py {' '.join(sys.argv[1:])}`\n\n")
        f.write("| model | threads | " + " | ".join(f"{c} ms" for c in cols) + " | kiln/best | " +
                ("kiln/kiln_base | " if kb else "") +
                " | ".join(f"{c} speed-up from 1 thread" for c in scol) + " | max err |\n")
        f.write("|---|---:|" + "---:|" * (len(cols) + 1 + (1 if kb else 0) + len(scol) + 1) + "\n")
        # a runtime that could not run a model (OpenVINO's reader) has no column value there
        base = {(r[0], c): r[2].get(c) for r in rows if r[1] == threads[0] for c in cols}
        for name, th, res, ratio, err in rows:
            f.write(f"| {name} | {th} | " + " | ".join(f"{res[c]:.3f}" if c in res else "-" for c in cols) +
                    f" | {ratio:.2f} | " + (f"{res['kiln'] / res['kiln_base']:.2f} | " if kb else "") +
                    " | ".join(f"{base[(name, c)] / res[c]:.2f}" if c in res and base.get((name, c)) else "-"
                               for c in scol) + f" | {err:.1e} |\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
