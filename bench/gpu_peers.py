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

With --zoo DIR, one more workload per zoo model (DIR/NAME/model.onnx, ../shared/models/README.md)
that bench/zoo_arch.py builds in PyTorch (the constructors make_zoo.py exported, shared with
torch_compare.py): kiln runs the zoo's file, at the batch it fixes or batch 1 where symbolic
(--batches overrides that), `--dim` for every symbolic dimension (others as the file's first
data set has them: bert_mini's seq=128, lstm_gru's time=50), and PyTorch gets inputs of the same
shapes and dtypes (the data set's token ids repeated along the batch; integer inputs stay integers
at fp16/bf16, float ones are cast with the module). What PyTorch cannot run (a precision, a
capture, a compile) is a "-" and a note under the table, not the end of the run.
--check-zoo times nothing: it builds each zoo model and its inputs on the CPU and checks them and
its outputs against the ONNX file's inputs and outputs (count, dtype, shape).

    bench/gpu_peers.py [--kiln build/kiln] [--work DIR] [--rounds R] [--seconds S]
                       [--only resnet50,bert_base,...,zoo,bert_mini] [--zoo DIR] [--check-zoo]
                       [--precisions fp16,bf16,fp32] [--compile]
                       [--format channels_last|contiguous] [--kiln-options conv_graph=1]
                       [--out FILE]

Writes bench/results/gpu-peers-DATE.md (or --out) with the device and the command. Needs a CUDA
device, torch, torchvision, transformers and onnx (timm too with --zoo).
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


class Workload:
    """What one table row times. model(): the ONNX file kiln runs (exported on first use);
    dims(b): {symbol: size} for kiln's --dim; make(b): (the PyTorch module, on the CPU in float32,
    and its inputs as CPU tensors, of the shapes and dtypes the ONNX file takes at batch b);
    batches: the batches to time, None where the file's batch is symbolic and no list is given
    (then --batches, or 1); label(b): the row's name."""

    def __init__(self, name, batches, unit, conv, model, dims, make, label=None):
        self.name, self.batches, self.unit, self.conv = name, batches, unit, conv
        self.model, self.dims, self.make = model, dims, make
        self.label = label or (lambda b: name)


def exported_workload(name, work):
    batches, unit, conv = WORKLOADS[name]

    def make(b):
        m, inputs, _, _ = build(name)
        return m, list(inputs(b))
    return Workload(name, batches, unit, conv, lambda: export(name, work), lambda b: {"batch": b}, make)


def zoo_workloads(zoo_dir):
    """One workload per zoo model that bench/zoo_arch.py builds, in its order; the folders it has no
    constructor for are printed and left out."""
    import numpy as np
    from zoo_arch import onnx_signature, torch_models, zoo_batch, zoo_dims, zoo_inputs
    models = torch_models()
    present = sorted(n for n in os.listdir(zoo_dir) if os.path.isfile(os.path.join(zoo_dir, n, "model.onnx")))
    left = [n for n in present if n not in models]
    if left:
        print(f"zoo: no PyTorch constructor in bench/zoo_arch.py for {', '.join(left)}: left out", flush=True)
    out = {}
    for name, (ctor, conv) in models.items():
        if name not in present:
            continue
        d = os.path.join(zoo_dir, name)
        b = zoo_batch(d)
        ins, _ = onnx_signature(os.path.join(d, "model.onnx"))
        image = len(ins[0][1]) == 4 and np.issubdtype(ins[0][2], np.floating)

        def make(batch, ctor=ctor, d=d):
            import torch
            torch.manual_seed(0)
            return ctor(), [torch.from_numpy(x) for x in zoo_inputs(d, zoo_dims(d, batch))]

        def label(batch, name=name, d=d, b=b):
            more = [f"{k}={v}" for k, v in zoo_dims(d, batch).items() if k != b]
            return " ".join([name] + more)
        out[name] = Workload(name, [b] if isinstance(b, int) else None, "img" if image else "seq", conv,
                             lambda d=d: os.path.join(d, "model.onnx"), lambda batch, d=d: zoo_dims(d, batch),
                             make, label)
    return out


def short(e):
    """An exception in one line for a note: its type and first line (the second where the first
    only introduces it, as torch.compile's "backend='inductor' raised:")."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip()] or [""]
    text = lines[0] + (" " + lines[1] if lines[0].endswith(":") and len(lines) > 1 else "")
    return f"{type(e).__name__}: {text}"[:300]


def kiln_round(kiln, model, dims, precision, seconds, work, options="", device="cuda"):
    if device == "cpu":  # the hidden check path: kiln's CPU provider, host I/O
        prov, io = "cpu", "host"
    else:
        prov = f"cuda:precision={precision}" + (":activations=half" if precision in ("fp16", "bf16") else "") + options
        io = "device"
    js = os.path.join(work, "bench.json")
    cmd = [kiln, "bench", model, "--provider", prov]
    for k, v in dims.items():
        cmd += ["--dim", f"{k}={v}"]
    cmd += ["--io", io, "--duration", str(seconds), "--json", js]
    env = dict(os.environ, KILN_CACHE_DIR=os.path.join(work, "cache"))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip() or r.stdout.strip() or f"exit {r.returncode}").splitlines()[-1])
    with open(js) as f:
        return json.load(f)["latency_ms"]["p50"]


def torch_time(fn, seconds, sync):
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 10:
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


class TorchRunner:
    """One workload, batch and precision in PyTorch: eager, CUDA graph and (optionally) compiled
    callables, each per memory format for convolutional networks. What PyTorch cannot do (a
    precision an operator lacks, a capture, a compile) leaves that callable out and says why in
    self.notes: the row keeps the others and kiln's number."""

    def __init__(self, w, batch, precision, use_compile, only_format=None, device="cuda"):
        import torch
        cuda = device == "cuda"
        if cuda:
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
        self.sync = torch.cuda.synchronize if cuda else (lambda: None)
        if use_compile:
            # each runner compiles against dynamo's recompile limit from zero: the same forward
            # code at other batches, precisions or formats would otherwise reach it and run eager
            torch._dynamo.reset()
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
        m, inputs = w.make(batch)
        self.fns, self.notes = {}, []
        formats = [torch.contiguous_format] + ([torch.channels_last] if w.conv else [])
        if w.conv and only_format:
            formats = [torch.channels_last if only_format == "channels_last" else torch.contiguous_format]
        for fmt in formats:
            tag = "" if fmt is torch.contiguous_format else " (channels_last)"
            # a copy per format: converting one module in place changed the weights' strides under
            # the compiled function of the other format (its guards then failed)
            mm = copy.deepcopy(m).to(device, dt).eval().to(memory_format=fmt)
            xs = [x.to(device) for x in inputs]
            # float inputs in the module's precision, integer ids and masks stay integers
            xs = [x.to(dt).contiguous(memory_format=fmt) if x.is_floating_point() and x.dim() == 4 else
                  x.to(dt) if x.is_floating_point() else x for x in xs]

            def eager(mm=mm, xs=xs):
                with torch.no_grad():
                    return mm(*xs)
            try:
                if cuda:
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        for _ in range(3):
                            eager()
                    torch.cuda.current_stream().wait_stream(s)
                else:
                    eager()
                self.sync()
            except Exception as e:
                self.notes.append(f"PyTorch {precision}{tag} failed: {short(e)}")
                continue
            self.fns["eager" + tag] = eager
            if cuda:
                try:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        eager()
                    self.fns["graph" + tag] = g.replay
                except Exception as e:
                    self.notes.append(f"CUDA graph{tag} capture failed: {short(e)}")
            if use_compile:
                try:
                    c = torch.compile(mm, mode="reduce-overhead")

                    def comp(c=c, xs=xs):
                        with torch.no_grad():
                            return c(*xs)
                    for _ in range(5):
                        comp()
                    self.sync()
                    self.fns["compile" + tag] = comp
                except Exception as e:
                    self.notes.append(f"torch.compile{tag} failed: {short(e)}")

    def round(self, seconds):
        res = {}
        for k, f in list(self.fns.items()):
            try:
                res[k] = torch_time(f, seconds, self.sync)
            except Exception as e:  # dropped from later rounds; its earlier rounds' times stay
                del self.fns[k]
                self.notes.append(f"{k} failed while timed: {short(e)}")
        return res


def write_table(rows, out, cmd):
    """The results so far as a markdown table (rewritten after every row: a call cut short by its
    time limit still leaves the rows it finished), then the rows' notes: what failed and why."""
    date = datetime.date.today().isoformat()
    notes = []
    with open(out, "w") as f:
        f.write(f"# kiln against PyTorch on the GPU, {date}\n\n")
        f.write(f"Device: {gpu_name()}. torch {__import__('torch').__version__}. Command: `{cmd}`.\n\n")
        f.write("Latency in ms (median of rounds of medians; throughput = batch / latency). kiln: `kiln bench "
                "--io device` (device buffers bound once, CUDA graphs). PyTorch: device tensors, cudnn.benchmark, "
                "best memory format. kiln / best < 1 means kiln is faster.\n\n")
        f.write("| workload | batch | precision | kiln ms | kiln items/s | PyTorch eager | PyTorch CUDA graph | "
                "torch.compile | best PyTorch items/s | kiln / best |\n|---|---|---|---|---|---|---|---|---|---|\n")
        for name, unit, b, prec, k, t, err in rows:
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
                notes.append(f"- {name} b{b} {prec}: {err}\n")
        f.write("\n`cl`: PyTorch's faster format was channels_last. `-`: that way did not run (see the notes).\n")
        if notes:
            f.write("\nNotes:\n\n" + "".join(notes))


def check_zoo(zoo):
    """For each zoo workload, at its batch and (where symbolic) batch 2: the inputs have the ONNX
    file's count, dtypes and shapes, and the PyTorch module (CPU, float32) takes them and returns
    the file's outputs in count and shape. Returns the number of mismatches."""
    import torch
    from zoo_arch import onnx_signature
    bad = 0
    for name, w in zoo.items():
        ins, outs = onnx_signature(w.model())
        for b in (w.batches or [1, 2]):
            dims = w.dims(b)
            m, xs = w.make(b)
            problems = []
            if len(xs) != len(ins):
                problems.append(f"{len(xs)} inputs, the file has {len(ins)}")
            for (n, shape, dt), x in zip(ins, xs):
                want = [dims.get(d, d) if isinstance(d, str) else d for d in shape]
                if list(x.shape) != want or x.numpy().dtype != dt:
                    problems.append(f"input {n}: {list(x.shape)} {x.numpy().dtype}, the file wants {want} {dt}")
            try:
                with torch.no_grad():
                    y = m.eval()(*xs)
                ys = list(y) if isinstance(y, (tuple, list)) else [y]
                if len(ys) != len(outs):
                    problems.append(f"{len(ys)} outputs, the file has {len(outs)}")
                for (n, shape, dt), t in zip(outs, ys):
                    want = [dims.get(d, "?") if isinstance(d, str) else (d if d is not None else "?") for d in shape]
                    got = list(t.shape)
                    if len(got) != len(want) or any(g != v for g, v in zip(got, want) if v != "?") or \
                            t.numpy().dtype != dt:
                        problems.append(f"output {n}: {got} {t.numpy().dtype}, the file declares {want} {dt}")
            except Exception as e:
                problems.append(f"forward failed: {short(e)}")
            print(f"{w.label(b)} b{b}: " + ("ok (" + ", ".join(f"{n} {list(x.shape)} {x.dtype}" for (n, _, _), x in
                                                              zip(ins, xs)) + ")" if not problems else
                                            "MISMATCH: " + "; ".join(problems)), flush=True)
            bad += bool(problems)
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--work", default="/tmp/kiln-gpu-peers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--zoo", default=None, help="a zoo folder (NAME/model.onnx, see ../shared/models/README.md): "
                    "one workload per model bench/zoo_arch.py builds, named as the folder; 'zoo' in --only is all of them")
    ap.add_argument("--only", default=None, help="workloads, comma-separated: " + ",".join(WORKLOADS) +
                    ", zoo (with --zoo), or a zoo model's name (default: the four, and the zoo with --zoo)")
    ap.add_argument("--batches", default=None, help="override every workload's batches, e.g. 1,32 (a zoo file "
                    "that fixes its batch keeps it; a symbolic one is timed at 1 without this)")
    ap.add_argument("--precisions", default="fp16")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--format", choices=["channels_last", "contiguous"], default=None,
                    help="PyTorch's memory format for the convolutional workloads (default: both, the faster counts); "
                         "one halves the torch.compile time")
    ap.add_argument("--kiln-options", default="", help="more cuda provider options for kiln, e.g. conv_graph=1")
    ap.add_argument("--check-zoo", action="store_true", help="no timing: build each zoo model in PyTorch on the CPU "
                    "with its inputs and check them and its outputs against the ONNX file's inputs and outputs")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help=argparse.SUPPRESS)  # checks without a GPU
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    zoo = zoo_workloads(a.zoo) if a.zoo else {}
    if a.check_zoo:
        if not a.zoo:
            ap.error("--check-zoo needs --zoo DIR")
        bad = check_zoo(zoo)
        print(f"{len(zoo)} zoo models checked, {bad} mismatches")
        sys.exit(1 if bad else 0)
    names = []
    for n in (a.only.split(",") if a.only else list(WORKLOADS) + (["zoo"] if a.zoo else [])):
        if n == "zoo" and not a.zoo:
            ap.error("--only zoo needs --zoo DIR")
        if n not in WORKLOADS and n not in zoo and n != "zoo":
            ap.error(f"unknown workload '{n}': {', '.join(list(WORKLOADS) + list(zoo))}")
        names += list(zoo) if n == "zoo" else [n]
    os.makedirs(a.work, exist_ok=True)
    date = datetime.date.today().isoformat()
    out = a.out or os.path.join(ROOT, "bench", "results", f"gpu-peers-{date}.md")
    cmd = "bench/gpu_peers.py " + " ".join(sys.argv[1:])
    rows = []
    for name in names:
        w = zoo[name] if name in zoo else exported_workload(name, a.work)
        batches = w.batches if name in zoo and w.batches else \
            [int(b) for b in a.batches.split(",")] if a.batches else w.batches or [1]
        try:
            model = w.model()
        except Exception as e:  # an export failure is a row, not the end of the table
            rows.append((name, w.unit, None, None, None, {}, f"export failed: {e}"))
            continue
        for prec in a.precisions.split(","):
            for b in batches:
                kiln_t, torch_t, notes = [], {}, []
                try:
                    runner = TorchRunner(w, b, prec, a.compile, a.format, a.device)
                except Exception as e:
                    runner = None
                    notes.append(f"PyTorch: {short(e)}")
                kiln_ok = True
                for _ in range(a.rounds):
                    try:
                        if kiln_ok:
                            kiln_t.append(kiln_round(a.kiln, model, w.dims(b), prec, a.seconds, a.work,
                                                     "".join(":" + o for o in a.kiln_options.split(",") if o),
                                                     a.device))
                    except RuntimeError as e:  # PyTorch's columns are still worth having
                        notes.append(f"kiln: {e}")
                        kiln_ok = False
                    if runner:
                        for k, v in runner.round(a.seconds).items():
                            torch_t.setdefault(k, []).append(v)
                if runner:
                    notes += runner.notes
                del runner
                k = statistics.median(kiln_t) if kiln_t else None
                t = {n: statistics.median(v) for n, v in torch_t.items()}
                err = "; ".join(notes) or None
                rows.append((w.label(b), w.unit, b, prec, k, t, err))
                write_table(rows, out, cmd)
                best = min(t.values()) if t else None
                parts = [f"kiln {k} ms", ", ".join(f"{n} {v:.4f}" for n, v in t.items()),
                         f"kiln/best {k / best:.2f}" if k and best else "", err or ""]
                print(f"{w.label(b)} b{b} {prec}: " + "; ".join(x for x in parts if x), flush=True)

    write_table(rows, out, cmd)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
