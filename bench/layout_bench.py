#!/usr/bin/env python3
"""Channels first or last for CUDA convolutions: kiln with and without layout_nhwc, beside PyTorch.

For each CNN of the zoo and each batch size it runs `kiln run MODEL --dim batch=B --provider
cuda:precision=P --repeat N` with KILN_LAYOUT=nchw and KILN_LAYOUT=nhwc in
alternating rounds, and reports the median run latency of each and the ratio nhwc/nchw (below 1:
channels last is faster). `kiln run` times kiln_session_run alone with host inputs and outputs
(random inputs of the model's shapes), as a user calls it, in steady state: KILN_CUDA_STAND_INS=never,
so a warm start's first runs (on kiln's stand-in kernels while the libraries start) are not in the
median. When torch and torchvision are there,
the same architecture (torchvision's, random weights) is timed in PyTorch with CUDA graphs, NCHW
and channels_last, device-resident inputs: a peer's ratio beside kiln's, not a like-for-like time.

    bench/layout_bench.py [--kiln build/kiln] [--precision fp16] [--batches 1,8,32] [--rounds R]
                          [--runs N] [--out FILE] [MODEL_DIR ...]

Defaults: efficientnet_b0 and mobilenet_v3_small under ../shared/models (or $KILN_ZOO), fp16 with
half activations, batches 1, 8, 32, 3 rounds of 30 runs. Results go to
bench/results/layout-cuda-<date>.md with the device and the command.
"""
import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys

from benchutil import gpu_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNNS = ("efficientnet_b0", "mobilenet_v3_small")


def kiln_round(kiln, model_dir, batch, precision, layout, runs):
    provider = f"cuda:precision={precision}" + (":activations=half" if precision in ("fp16", "bf16") else "")
    args = [kiln, "run", os.path.join(model_dir, "model.onnx"), "--provider", provider, "--dim", f"batch={batch}",
            "--repeat", str(runs), "--log", "warning"]
    env = dict(os.environ, KILN_LAYOUT=layout, KILN_CUDA_STAND_INS="never",
               KILN_CACHE_DIR=os.environ.get("KILN_CACHE_DIR", "/tmp/kiln-layout-bench-cache"))
    out = subprocess.run(args, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip() or out.stdout.strip()).splitlines()[-1])
    m = re.search(r"run ([0-9.]+) ms", out.stdout)
    if not m:
        raise RuntimeError("no run time in kiln's output")
    return float(m.group(1))


def torch_times(name, batch, precision, runs):
    """PyTorch NCHW and channels_last latencies (ms) with CUDA graphs, or None without torch."""
    try:
        import torch
        import torchvision
    except ImportError:
        return None
    if not hasattr(torchvision.models, name) or not torch.cuda.is_available():
        return None
    dtype = {"fp16": torch.half, "bf16": torch.bfloat16}.get(precision, torch.float)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = precision == "tf32"  # fp32 means full float32, as in kiln
    res = {}
    for fmt in ("nchw", "nhwc"):
        m = getattr(torchvision.models, name)().eval().to(dtype).cuda()
        x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)
        if fmt == "nhwc":
            m = m.to(memory_format=torch.channels_last)
            x = x.to(memory_format=torch.channels_last)
        with torch.no_grad():
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    m(x)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                m(x)
            g.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(runs):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                g.replay()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
        res[fmt] = statistics.median(times)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default=None)
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    zoo = os.environ.get("KILN_ZOO", os.path.join(ROOT, "..", "shared", "models"))
    models = a.models or [os.path.join(zoo, n) for n in CNNS]
    batches = [int(b) for b in a.batches.split(",")]
    rows = []
    for d in models:
        name = os.path.basename(os.path.normpath(d))
        for b in batches:
            first, last, err = [], [], None
            try:
                for _ in range(a.rounds):
                    first.append(kiln_round(a.kiln, d, b, a.precision, "nchw", a.runs))
                    last.append(kiln_round(a.kiln, d, b, a.precision, "nhwc", a.runs))
            except RuntimeError as e:
                err = str(e)
            t = torch_times(name, b, a.precision, a.runs * 2)
            f = statistics.median(first) if first and not err else None
            l = statistics.median(last) if last and not err else None
            rows.append((name, b, f, l, t, err))
            kr = f"{l / f:.3f}" if f and l else "-"
            tr = f"{t['nhwc'] / t['nchw']:.3f}" if t else "-"
            print(f"{name:20s} batch {b:3d}  kiln NCHW {f or float('nan'):8.3f} NHWC {l or float('nan'):8.3f} "
                  f"ratio {kr}   torch ratio {tr}" + (f"   ({err})" if err else ""), flush=True)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = a.out or os.path.join(ROOT, "bench", "results", f"layout-cuda-{date}.md")
    with open(out, "w") as fo:
        fo.write(f"# Channels first vs last for CUDA convolutions ({date})\n\n")
        fo.write(f"device: {gpu_name() or 'unknown GPU'}; precision {a.precision}; kiln: {a.rounds} interleaved rounds of {a.runs} "
                 f"runs of `kiln run` (host inputs and outputs, CUDA graphs), medians; PyTorch: torchvision's "
                 f"architecture, CUDA graphs, device-resident input, median of {a.runs * 2} replays\n\n")
        fo.write(f"command: `python3 bench/layout_bench.py {' '.join(sys.argv[1:])}`\n\n")
        fo.write("| model | batch | kiln NCHW ms | kiln NHWC ms | kiln NHWC/NCHW | torch NCHW ms | torch NHWC ms "
                 "| torch NHWC/NCHW |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
        for name, b, f, l, t, err in rows:
            cells = [f"{f:.3f}" if f else "-", f"{l:.3f}" if l else "-",
                     f"{l / f:.3f}" if f and l else (err or "-")]
            cells += [f"{t['nchw']:.3f}", f"{t['nhwc']:.3f}", f"{t['nhwc'] / t['nchw']:.3f}"] if t else ["-"] * 3
            fo.write(f"| {name} | {b} | " + " | ".join(cells) + " |\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
