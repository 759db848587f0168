#!/usr/bin/env python3
"""Whole-model fp32 A/B of kiln builds against ONNX Runtime and OpenVINO f32, in one process.

bench/cpu_bf16_models.py times one kiln build against the peers; comparing two builds took two
runs of it, minutes apart, while the peers' own times moved by up to 9% between runs on the shared
2-core box. Here every kiln build (its libkiln.so loaded side by side, ctypes, local symbols), ONNX
Runtime fp32 and OpenVINO f32 (INFERENCE_PRECISION_HINT=f32) run in turn in each round (the order
rotating from round to round), each for --seconds of runs whose median is the round's time. Per
runtime: the median over rounds; per kiln build: the median over rounds of the round's ratio to the
faster peer of that round (a change of load hits a round's runtimes alike), and to the first build;
rounds in which any runtime took over 1.15x its best round (another process held a core) are left
out and counted.

    python3 bench/cpu_fp32_ab.py --build before=DIR --build after=DIR [--threads 2] [--rounds 7]
                                 [--seconds 0.8] [--model /tmp/kiln-bf16-models/resnet50.onnx]

The model is built by bench/cpu_bf16_models.py (its --work folder) when missing. Used for
bench/results/cpu-resnet-2t-2026-12-03b.md.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import cpu_bf16_models as cbm  # noqa: E402
from benchutil import random_feeds, timed  # noqa: E402
from op_sweep import Kiln, KilnSession  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="append", required=True, help="NAME=BUILD_DIR (the first is the base)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=0.8)
    ap.add_argument("--model", default="/tmp/kiln-bf16-models/resnet50.onnx")
    ap.add_argument("--no-ov", action="store_true")
    a = ap.parse_args()
    import onnxruntime as ort

    path = a.model
    if not os.path.exists(path):
        name = os.path.basename(path).rsplit(".", 1)[0]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        onnx.save(cbm.BUILDERS[name](), path)
    feeds = random_feeds(path)
    model_bytes = open(path, "rb").read()
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    ref = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)

    runners, acc, sessions, kilns = {}, {}, [], []
    for spec in a.build:
        label, build = spec.split("=", 1)
        k = Kiln(os.path.join(build, "libkiln.so"))
        kilns.append(label)
        ks = KilnSession(k, model_bytes, a.threads, "cpu", feeds)
        outs = ks.run_alloc()
        ks.bind_outputs(outs)
        runners[label], acc[label] = ks.run, cbm.errors(outs, ref)
        sessions.append(ks)
    peers = []
    if not a.no_ov:
        import openvino as ov
        core = ov.Core()
        cfg = {"INFERENCE_NUM_THREADS": a.threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
               "INFERENCE_PRECISION_HINT": "f32"}
        req = core.compile_model(core.read_model(path), "CPU", cfg).create_infer_request()
        res = req.infer(feeds)
        acc["ov_f32"] = cbm.errors([res[o] for o in req.model_outputs], ref)
        runners["ov_f32"] = lambda r=req: r.infer(feeds)
        peers.append("ov_f32")
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = a.threads, 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    runners["ort_fp32"] = lambda s=sess: s.run(None, feeds)
    acc["ort_fp32"] = (0.0, 0.0)
    peers.append("ort_fp32")
    for fn in runners.values():  # warm-up
        for _ in range(3):
            fn()
    names = list(runners)
    rounds = []
    t0 = time.strftime("%H:%M:%S", time.gmtime())
    for r in range(a.rounds):
        rd = {}
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            time.sleep(0.2)  # let the previous runtime's spinning threads idle
            rd[n] = timed(runners[n], a.seconds)
        rounds.append(rd)
        print(f"round {r}: " + "  ".join(f"{n} {rd[n]:.2f}" for n in names), f"load {os.getloadavg()[0]:.2f}",
              flush=True)
    for ks in sessions:
        ks.close()
    t1 = time.strftime("%H:%M:%S", time.gmtime())
    # a round where another process held a core shows in every runtime of it: rounds with any
    # runtime over 1.15x its own best are left out (their count is printed)
    best = {n: min(rd[n] for rd in rounds) for n in names}
    clean = [rd for rd in rounds if all(rd[n] <= 1.15 * best[n] for n in names)]
    dropped = len(rounds) - len(clean)
    if not clean:
        print("no round without a runtime over 1.15x its best: the box was loaded throughout; all rounds used")
        clean, dropped = rounds, 0
    rounds = clean
    med = {n: statistics.median(rd[n] for rd in rounds) for n in names}
    print(f"\n{os.path.basename(path)}, {a.threads} threads, {a.rounds} rounds of {a.seconds} s "
          f"({dropped} left out: a runtime over 1.15x its best), "
          f"{t0}-{t1} UTC, load {os.getloadavg()[0]:.2f} at the end")
    print("| runtime | ms (median of rounds) | / best peer (median of rounds' ratios) | / "
          f"{kilns[0]} (median of rounds' ratios) | rel L2 vs ORT |")
    print("|---|---:|---:|---:|---:|")
    for n in names:
        bp = statistics.median(rd[n] / min(rd[p] for p in peers) for rd in rounds)
        b0 = statistics.median(rd[n] / rd[kilns[0]] for rd in rounds)
        print(f"| {n} | {med[n]:.2f} | {bp:.3f} | {b0:.3f} | {acc[n][0]:.1e} |")


if __name__ == "__main__":
    main()
