#!/usr/bin/env python3
"""kiln against PyTorch on the same GPU, per zoo architecture, batch 1, in one run.

PyTorch builds the same architectures the zoo was exported from (bench/zoo_arch.py, the constructors
of ../shared/models/make_zoo.py: torchvision, timm, transformers, torch.nn's LSTM and GRU (cuDNN's
recurrences), random weights: timing does not depend on the values) and runs them with CUDA graphs (torch.cuda.CUDAGraph: capture once, replay),
in float32 (TF32 off, as kiln's fp32), float16, and for the CNNs float16 channels_last (NHWC, the
layout cuDNN's tensor-core convolutions prefer). Each PyTorch run copies its input from host
memory (pageable, like a caller's buffers) and its output back, as `kiln run` does (kiln_session_run with host tensors), so the two
columns time the same work: host input in, model, host output out.

kiln runs `kiln run MODEL --repeat N` with the data set's inputs: fp32 (the default) and
fp16 with activations=half (level 3's lower_precision).

    bench/torch_compare.py [--kiln build/kiln] [--zoo DIR] [--rounds R] [--runs N] [--out FILE]

Rounds alternate kiln and PyTorch; each number is the median over rounds of the round's median.
Needs a CUDA device, torch, torchvision, timm, transformers, onnx.
"""
import argparse
import datetime
import math
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_arch import torch_models  # noqa: E402  (the zoo's architectures, shared with gpu_peers.py)


def read_inputs(model_dir):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(os.path.join(model_dir, "model.onnx"), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    names = [i.name for i in m.graph.input if i.name not in inits]
    arrays = []
    for k in range(len(names)):
        t = onnx.TensorProto()
        with open(os.path.join(model_dir, "test_data_set_0", f"input_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        arrays.append(numpy_helper.to_array(t))
    return names, arrays


def kiln_round(kiln, model_dir, names, provider, runs):
    args = [kiln, "run", os.path.join(model_dir, "model.onnx"), "--provider", provider, "--repeat", str(runs)]
    for k, n in enumerate(names):
        args += ["--input", f"{n}={os.path.join(model_dir, 'test_data_set_0', f'input_{k}.pb')}"]
    # steady state: a warm start's first runs use stand-in kernels while the libraries start
    out = subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, KILN_CUDA_STAND_INS="never"))
    if out.returncode != 0:
        raise RuntimeError((out.stderr or out.stdout).strip().splitlines()[-1])
    m = re.search(r"run ([0-9.]+) ms", out.stdout)
    return float(m.group(1))


class TorchRunner:
    """One model in one variant, captured into a CUDA graph; run() copies in, replays, copies out."""

    def __init__(self, ctor, arrays, variant):
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.torch = torch
        model = ctor().eval().cuda()
        half = variant != "fp32"
        if half:
            model = model.half()
        cl = variant == "fp16_nhwc"
        if cl:
            model = model.to(memory_format=torch.channels_last)
        self.host = [torch.from_numpy(a) for a in arrays]
        io32 = variant == "fp16_io32"  # the ONNX model's interface: float32 in and out, halved on the device
        if half and not io32:
            self.host = [h.half() if h.is_floating_point() else h for h in self.host]
        # pageable host memory, as a kiln caller's malloc'ed buffers (pinned would favour PyTorch)
        self.dev = [h.cuda() for h in self.host]
        if cl:
            self.dev = [d.contiguous(memory_format=torch.channels_last) if d.dim() == 4 else d for d in self.dev]
        if io32:
            inner = model

            def model(*xs):
                out = inner(*[x.half() if x.is_floating_point() else x for x in xs])
                outs = list(out) if isinstance(out, (tuple, list)) else [out]
                return [o.float() if o.is_floating_point() else o for o in outs]
        self.model = model
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(s):
            for _ in range(3):
                model(*self.dev)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(self.graph):
            out = model(*self.dev)
        self.outs = list(out) if isinstance(out, (tuple, list)) else [out]

    def run(self):
        for d, h in zip(self.dev, self.host):
            d.copy_(h, non_blocking=True)
        self.graph.replay()
        return [o.cpu() for o in self.outs]

    def time(self, runs):
        import time
        ts = []
        for _ in range(runs):
            t0 = time.perf_counter()
            self.run()
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--zoo", default=os.environ.get("KILN_ZOO", os.path.join(ROOT, "..", "shared", "models")))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--out")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    import torch
    zoo = torch_models()
    names = a.models or list(zoo)
    kiln_variants = [("fp32", "cuda"), ("fp16 half", "cuda:precision=fp16:activations=half")]
    rows = []
    for name in names:
        ctor, cnn = zoo[name]
        d = os.path.join(a.zoo, name)
        in_names, arrays = read_inputs(d)
        tv = ["fp32", "fp16", "fp16_io32"] + (["fp16_nhwc"] if cnn else [])
        runners = {}
        for v in tv:
            try:
                runners[v] = TorchRunner(ctor, arrays, v)
            except Exception as e:  # a variant PyTorch cannot capture is reported, not fatal
                print(f"{name}: torch {v}: {e}", file=sys.stderr)
        res = {k: [] for k, _ in kiln_variants}
        res.update({"torch " + v: [] for v in runners})
        for r in range(a.rounds):
            for k, prov in kiln_variants:
                try:
                    res[k].append(kiln_round(a.kiln, d, in_names, prov, a.runs))
                except RuntimeError as e:
                    print(f"{name}: kiln {k}: {e}", file=sys.stderr)
            for v, tr in runners.items():
                tr.run()
                res["torch " + v].append(tr.time(a.runs))
        med = {k: statistics.median(v) if v else None for k, v in res.items()}
        rows.append((name, med))
        print(name, " ".join(f"{k}={v:.3f}" for k, v in med.items() if v), flush=True)
        del runners
        torch.cuda.empty_cache()

    cols = ["fp32", "torch fp32", "fp16 half", "torch fp16", "torch fp16_nhwc"]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    gpu = torch.cuda.get_device_name(0)
    lines = [f"# kiln against PyTorch {torch.__version__} on one {gpu} ({date})", "",
             f"command: `python3 bench/torch_compare.py {' '.join(sys.argv[1:])}`", "",
             "Batch 1, host input in and host output out in both (kiln run; PyTorch: copy in from pageable "
             "memory, CUDA graph replay, .cpu() out). kiln fp32 and PyTorch fp32 with TF32 off; kiln fp16 with "
             "activations=half; PyTorch fp16 = model.half() with fp16 inputs and outputs copied, nhwc = "
             "channels_last; PyTorch fp16 io32 = model.half() with float32 inputs and outputs copied (halved and "
             "widened inside the graph), the interface of the ONNX model kiln runs, so both copy the same bytes. "
             f"Milliseconds, median of {a.rounds} rounds of {a.runs} runs each.", "",
             "| model | kiln fp32 | torch fp32 | kiln/torch fp32 | kiln fp16 | torch fp16 | torch fp16 NHWC | "
             "kiln fp16 / best torch fp16 | torch fp16 io32 | kiln fp16 / torch fp16 io32 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def f(x):
        return "-" if x is None else f"{x:.3f}"
    r32, r16, r16io = [], [], []
    for name, m in rows:
        best16 = min([x for x in (m.get("torch fp16"), m.get("torch fp16_nhwc")) if x] or [float("nan")])
        q32 = m["fp32"] / m["torch fp32"] if m.get("fp32") and m.get("torch fp32") else None
        q16 = m["fp16 half"] / best16 if m.get("fp16 half") and not math.isnan(best16) else None
        q16io = m["fp16 half"] / m["torch fp16_io32"] if m.get("fp16 half") and m.get("torch fp16_io32") else None
        if q32: r32.append(q32)
        if q16: r16.append(q16)
        if q16io: r16io.append(q16io)
        lines.append(f"| {name} | {f(m.get('fp32'))} | {f(m.get('torch fp32'))} | {f(q32)} | {f(m.get('fp16 half'))} | "
                     f"{f(m.get('torch fp16'))} | {f(m.get('torch fp16_nhwc'))} | {f(q16)} | "
                     f"{f(m.get('torch fp16_io32'))} | {f(q16io)} |")
    geo = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
    lines += ["", f"Geometric means, kiln/PyTorch (below 1: kiln faster): fp32 {geo(r32):.3f}, fp16 {geo(r16):.3f}, "
              f"fp16 against PyTorch with float32 I/O {geo(r16io):.3f}."]
    text = "\n".join(lines) + "\n"
    print(text)
    out = a.out or os.path.join(ROOT, "bench", "results", f"torch-compare-{date}.md")
    with open(out, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
