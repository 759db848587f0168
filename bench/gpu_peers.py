#!/usr/bin/env python3
"""kiln against PyTorch on the same GPU, side by side in one run: the workloads servers run.

Exports each workload once (random weights, fixed seed: timing does not depend on the values)
to ONNX with a symbolic batch, then for each (workload, batch, precision) alternates rounds of

  kiln      `kiln bench MODEL --provider cuda:precision=P[:activations=half] --dim batch=B --io device`
            (inputs and outputs bound once in device memory, CUDA graphs on: the model's own time)
  eager     PyTorch eager, device-resident input, cudnn.benchmark
  graph     PyTorch with the forward captured into a CUDA graph and replayed
  compile   torch.compile(mode="reduce-overhead") (inductor + CUDA graphs), with --compile

For convolutional networks PyTorch runs both NCHW and channels_last and keeps the faster.
Each number is the median over rounds of the round's median latency; a run of PyTorch is
timed with a synchronisation after it, as kiln bench times run_into (which returns complete).
kiln / best is kiln's latency over the best PyTorch column of the same row.

    bench/gpu_peers.py [--kiln build/kiln] [--work DIR] [--rounds R] [--seconds S]
                       [--only resnet50,bert_base,...] [--precisions fp16,bf16,fp32] [--compile]
                       [--format channels_last|contiguous] [--kiln-options conv_graph=1]
                       [--out FILE]

Writes bench/results/gpu-peers-DATE.md (or --out) with the device and the command. Needs a CUDA
device, torch, torchvision, transformers and onnx.
"""
import argparse
import copy
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchutil import gpu_name  # noqa: E402

# name: (constructor key, batches, items name, convolutional)
WORKLOADS = {
    "resnet50": ([1, 32, 256], "img", True),
    "bert_base": ([1, 32], "seq", False),
    "vit_b16": ([1, 64], "img", False),
    "yolov8s": ([1], "img", True),
}


def build(name, for_export=False):
    """(torch module, example inputs as a function of batch, input names, dynamic axes).
    for_export: transformers' attention written out (MatMul, Softmax, ...) as exporters see it;
    otherwise PyTorch's fastest (scaled_dot_product_attention)."""
    import torch
    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision
        m = torchvision.models.resnet50()
        return m, lambda b: (torch.randn(b, 3, 224, 224),), ["input"], {"input": {0: "batch"}, "output": {0: "batch"}}
    if name == "vit_b16":
        import torchvision
        m = torchvision.models.vit_b_16()
        return m, lambda b: (torch.randn(b, 3, 224, 224),), ["input"], {"input": {0: "batch"}, "output": {0: "batch"}}
    if name == "bert_base":
        from transformers import BertConfig, BertModel

        class Bert(torch.nn.Module):
            def __init__(s):
                super().__init__()
                cfg = BertConfig()  # bert-base-uncased's shape: 12 layers, 768 wide, 12 heads
                cfg._attn_implementation = "eager" if for_export else "sdpa"
                s.m = BertModel(cfg)

            def forward(s, ids, mask, tt):
                return s.m(input_ids=ids, attention_mask=mask, token_type_ids=tt).last_hidden_state

        def inputs(b):
            ids = torch.randint(0, 30522, (b, 128))
            return ids, torch.ones(b, 128, dtype=torch.long), torch.zeros(b, 128, dtype=torch.long)
        axes = {k: {0: "batch"} for k in ["input_ids", "attention_mask", "token_type_ids", "output"]}
        return Bert(), inputs, ["input_ids", "attention_mask", "token_type_ids"], axes
    if name == "yolov8s":
        from yolo_arch import YoloV8
        m = YoloV8(width=0.5, depth=0.34)
        return m, lambda b: (torch.randn(b, 3, 640, 640),), ["images"], {"images": {0: "batch"}, "output": {0: "batch"}}
    raise KeyError(name)


def export(name, work):
    import torch
    path = os.path.join(work, f"{name}.onnx")
    if os.path.isfile(path):
        return path
    m, inputs, in_names, axes = build(name, for_export=True)
    m.eval()
    # nn.MultiheadAttention's fused inference path has no ONNX export: the exporter must see its parts
    torch.backends.mha.set_fastpath_enabled(False)
    with torch.no_grad():
        torch.onnx.export(m, inputs(1), path, input_names=in_names, output_names=["output"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    return path


def kiln_round(kiln, model, batch, precision, seconds, work, options=""):
    prov = f"cuda:precision={precision}" + (":activations=half" if precision in ("fp16", "bf16") else "") + options
    js = os.path.join(work, "bench.json")
    cmd = [kiln, "bench", model, "--provider", prov, "--dim", f"batch={batch}", "--io", "device",
           "--duration", str(seconds), "--json", js]
    env = dict(os.environ, KILN_CACHE_DIR=os.path.join(work, "cache"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip() or r.stdout.strip()).splitlines()[-1])
    with open(js) as f:
        return json.load(f)["latency_ms"]["p50"]


def torch_time(fn, seconds):
    import torch
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 10:
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


class TorchRunner:
    """One workload, batch and precision in PyTorch: eager, CUDA graph and (optionally) compiled
    callables, each per memory format for convolutional networks."""

    def __init__(self, name, batch, precision, use_compile, only_format=None):
        import torch
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
        m, inputs, _, _ = build(name)
        self.fns = {}
        formats = [torch.contiguous_format] + ([torch.channels_last] if WORKLOADS[name][2] else [])
        if WORKLOADS[name][2] and only_format:
            formats = [torch.channels_last if only_format == "channels_last" else torch.contiguous_format]
        for fmt in formats:
            # a copy per format: converting one module in place changed the weights' strides under
            # the compiled function of the other format (its guards then failed)
            mm = copy.deepcopy(m).to("cuda", dt).eval().to(memory_format=fmt)
            xs = [x.to("cuda") for x in inputs(batch)]
            xs = [x.to(dt).contiguous(memory_format=fmt) if x.is_floating_point() else x for x in xs]
            tag = "" if fmt is torch.contiguous_format else " (channels_last)"

            def eager(mm=mm, xs=xs):
                with torch.no_grad():
                    return mm(*xs)
            self.fns["eager" + tag] = eager
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    eager()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                eager()
            self.fns["graph" + tag] = g.replay
            if use_compile:
                c = torch.compile(mm, mode="reduce-overhead")

                def comp(c=c, xs=xs):
                    with torch.no_grad():
                        return c(*xs)
                for _ in range(5):
                    comp()
                self.fns["compile" + tag] = comp

    def round(self, seconds):
        return {k: torch_time(f, seconds) for k, f in self.fns.items()}


def write_table(rows, out, cmd):
    """The results so far as a markdown table (rewritten after every row: a call cut short by its
    time limit still leaves the rows it finished)."""
    date = datetime.date.today().isoformat()
    with open(out, "w") as f:
        f.write(f"# kiln against PyTorch on the GPU, {date}\n\n")
        f.write(f"Device: {gpu_name()}. torch {__import__('torch').__version__}. Command: `{cmd}`.\n\n")
        f.write("Latency in ms (median of rounds of medians; throughput = batch / latency). kiln: `kiln bench "
                "--io device` (device buffers bound once, CUDA graphs). PyTorch: device tensors, cudnn.benchmark, "
                "best memory format. kiln / best < 1 means kiln is faster.\n\n")
        f.write("| workload | batch | precision | kiln ms | kiln items/s | PyTorch eager | PyTorch CUDA graph | "
                "torch.compile | best PyTorch items/s | kiln / best |\n|---|---|---|---|---|---|---|---|---|---|\n")
        for name, b, prec, k, t, err in rows:
            unit = WORKLOADS[name][1]

            def best_of(prefix):
                v = [(x, n) for n, x in t.items() if n.startswith(prefix)]
                return min(v) if v else (None, None)

            cols = []
            for p in ("eager", "graph", "compile"):
                x, n = best_of(p)
                cols.append("-" if x is None else f"{x:.3f}" + (" cl" if n and "channels_last" in n else ""))
            best = min(t.values()) if t else None
            kcol = f"{k:.3f}" if k else "failed"
            f.write(f"| {name} | {b} | {prec} | {kcol} | {b * 1000 / k:.0f} {unit}/s | " if k else
                    f"| {name} | {b} | {prec} | {kcol} | - | ")
            f.write(" | ".join(cols) + " | ")
            f.write(f"{b * 1000 / best:.0f} {unit}/s | " if best else "- | ")
            f.write(f"{k / best:.2f} |\n" if k and best else "- |\n")
            if err:
                f.write(f"\n{name} b{b} {prec}: {err}\n\n")
        f.write("\n`cl`: PyTorch's faster format was channels_last.\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--work", default="/tmp/kiln-gpu-peers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--batches", default=None, help="override every workload's batches, e.g. 1,32")
    ap.add_argument("--precisions", default="fp16")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--format", choices=["channels_last", "contiguous"], default=None,
                    help="PyTorch's memory format for the convolutional workloads (default: both, the faster counts); "
                         "one halves the torch.compile time")
    ap.add_argument("--kiln-options", default="", help="more cuda provider options for kiln, e.g. conv_graph=1")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    date = datetime.date.today().isoformat()
    out = a.out or os.path.join(ROOT, "bench", "results", f"gpu-peers-{date}.md")
    cmd = "bench/gpu_peers.py " + " ".join(sys.argv[1:])
    rows = []
    for name in a.only.split(","):
        batches, unit, _ = WORKLOADS[name]
        if a.batches:
            batches = [int(b) for b in a.batches.split(",")]
        try:
            model = export(name, a.work)
        except Exception as e:  # an export failure is a row, not the end of the table
            rows.append((name, None, None, None, {}, f"export failed: {e}"))
            continue
        for prec in a.precisions.split(","):
            for b in batches:
                kiln_t, torch_t, err = [], {}, None
                try:
                    runner = TorchRunner(name, b, prec, a.compile, a.format)
                except Exception as e:
                    runner, err = None, f"PyTorch: {e}"
                for _ in range(a.rounds):
                    try:
                        kiln_t.append(kiln_round(a.kiln, model, b, prec, a.seconds, a.work,
                                                 "".join(":" + o for o in a.kiln_options.split(",") if o)))
                    except RuntimeError as e:
                        err = f"kiln: {e}"
                        break
                    if runner:
                        for k, v in runner.round(a.seconds).items():
                            torch_t.setdefault(k, []).append(v)
                del runner
                k = statistics.median(kiln_t) if kiln_t else None
                t = {n: statistics.median(v) for n, v in torch_t.items()}
                rows.append((name, b, prec, k, t, err))
                write_table(rows, out, cmd)
                best = min(t.values()) if t else None
                print(f"{name} b{b} {prec}: kiln {k} ms; " + ", ".join(f"{n} {v:.4f}" for n, v in t.items()) +
                      (f"; kiln/best {k / best:.2f}" if k and best else "") + (f"; {err}" if err else ""), flush=True)

    write_table(rows, out, cmd)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
