#!/usr/bin/env python3
"""Per layer class: kiln's KILN_PROFILE node times against OpenVINO's performance counters.

kiln: `BUILD/kiln bench MODEL --provider PROV --threads T` with KILN_PROFILE (per node the median of
its runs after the first). OpenVINO: the model compiled with PERF_COUNT on (INFERENCE_PRECISION_HINT
bf16 unless --ov-f32), RUNS inferences, per layer of its runtime model the mean of execTimeMcs.
Both grouped by class: convolutions by (input shape, weight shape -> output shape, +res where a
residual is added; kiln's shapes marked bf where the value is bfloat16, OpenVINO's with its
primitive), other layers by type and input shape; each class the sum over its layers. Each side
runs under flock /tmp/kiln-bench.lock (the shared box's benchmark lock), OpenVINO in a process of
its own. Used for bench/results/cpu-bf16-resnet-2026-12-03b.md.

    python3 bench/ov_layer_profile.py MODEL BUILD [--provider cpu:precision=bf16] [--threads 1] [--runs 200]
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import kiln_node_profile, random_feeds  # noqa: E402


def kiln_classes(model, build, prov, threads, iters):
    per, info, runs = kiln_node_profile(build, model, prov, threads, iters)
    run = statistics.median(runs)
    cls = collections.defaultdict(lambda: [0.0, 0])
    for node, v in per.items():
        a = info[node]
        op = a["op"].split(".")[-1]
        ins = [s.replace("bfloat16", "bf").replace("float", "") for s in a["inputs"]]
        if "Conv" in op:
            key = "Conv " + " ".join(ins[:2]) + " -> " + ",".join(a.get("outputs", [])).replace("bfloat16", "bf").replace("float", "") + (" +res" if len(a["inputs"]) > 3 else "")
        else:
            key = op + " " + (ins[0] if ins else "")
        cls[key][0] += statistics.median(v)
        cls[key][1] += 1
    return cls, run


def ov_classes(model, threads, runs, hint):
    import numpy as np
    import openvino as ov
    core = ov.Core()
    cfg = {"INFERENCE_NUM_THREADS": threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
           "INFERENCE_PRECISION_HINT": hint, "PERF_COUNT": True}
    cm = core.compile_model(core.read_model(model), "CPU", cfg)
    req = cm.create_infer_request()
    feeds = random_feeds(model)
    for _ in range(10):
        req.infer(feeds)
    tot = collections.defaultdict(float)
    import time
    t0 = time.perf_counter()
    for _ in range(runs):
        req.infer(feeds)
        for p in req.profiling_info:
            tot[p.node_name] += p.real_time.total_seconds() * 1e3
    wall = (time.perf_counter() - t0) * 1e3 / runs
    cls = collections.defaultdict(lambda: [0.0, 0])
    rt = cm.get_runtime_model()
    for op in rt.get_ordered_ops():
        name = op.get_friendly_name()
        if name not in tot:
            continue
        info = op.get_rt_info()
        ltype = info["layerType"].astype(str) if "layerType" in info else op.get_type_name()
        orig = info["originalLayersNames"].astype(str) if "originalLayersNames" in info else ""
        shapes = [str(op.input(i).get_partial_shape()).replace(" ", "") for i in range(op.get_input_size())]
        if ltype == "Convolution":
            key = "Conv " + " ".join(shapes[:2]) + " -> " + str(op.output(0).get_partial_shape()).replace(" ", "")
            key += " +res" if "add" in orig.lower() else ""
        else:
            key = ltype + " " + (shapes[0] if shapes else "")
        key += " " + (info["primitiveType"].astype(str) if "primitiveType" in info else "")
        cls[key][0] += tot[name] / runs
        cls[key][1] += 1
    return cls, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("build")
    ap.add_argument("--provider", default="cpu:precision=bf16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--ov-f32", action="store_true")
    a = ap.parse_args()
    kc, krun = kiln_classes(a.model, a.build, a.provider, a.threads, a.runs)
    oc, orun = subprocess_ov(a)
    print(f"kiln {a.provider} run {krun:.2f} ms (sum of classes {sum(v[0] for v in kc.values()):.2f}); "
          f"OpenVINO {'f32' if a.ov_f32 else 'bf16'} {orun:.2f} ms a run with counters "
          f"(sum {sum(v[0] for v in oc.values()):.2f}); {a.threads} threads, load {os.getloadavg()[0]:.1f}")
    print("\n| kiln class | layers | kiln ms |")
    print("|---|---:|---:|")
    for k, v in sorted(kc.items(), key=lambda kv: -kv[1][0]):
        print(f"| {k} | {v[1]} | {v[0]:.3f} |")
    print("\n| OpenVINO class | layers | OV ms |")
    print("|---|---:|---:|")
    for k, v in sorted(oc.items(), key=lambda kv: -kv[1][0]):
        if v[0] >= 0.001:
            print(f"| {k} | {v[1]} | {v[0]:.3f} |")


def subprocess_ov(a):
    # OpenVINO in its own process under the lock (its threads must not overlap the other helper's timings)
    if os.environ.get("OV_LAYER_CHILD"):
        return None
    out = subprocess.run(["flock", "/tmp/kiln-bench.lock", sys.executable, "-c",
                          "import json,sys; sys.path.insert(0, %r); import ov_layer_profile as m; "
                          "c, w = m.ov_classes(%r, %d, %d, %r); print(json.dumps([{k: v for k, v in c.items()}, w]))"
                          % (os.path.dirname(os.path.abspath(__file__)), a.model, a.threads, a.runs,
                             "f32" if a.ov_f32 else "bf16")],
                         capture_output=True, text=True, check=True)
    c, w = json.loads(out.stdout.strip().splitlines()[-1])
    return c, w


if __name__ == "__main__":
    main()
