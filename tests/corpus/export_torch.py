#!/usr/bin/env python3
"""NEEDS TORCH (not installed on the CI machine; run it where torch is, e.g. the GPU machine).

The corpus's exported part (issue 18, item 7): published architectures from torchvision, timm and
transformers that the zoo does not have, each exported with both of torch's exporters (TorchScript:
dynamo=False, opset 17; dynamo: dynamo=True, opset 18), written beside the wheel models in
build/corpus as torch_<model>_<exporter>/ in the backend-test layout with ONNX Runtime's outputs
(and their tolerances merged into build/corpus/zoo.json). Weights are the architectures' own
initialisation with a fixed seed: the machines that run this reach no model hub. A model whose
export fails is reported (it is the exporter's failure, not kiln's) and left out.

    export_torch.py [--out build/corpus] [--jobs N] [--timeout S] [--status FILE] [NAME...]
      --jobs N     N exports at a time, each in a process of its own (default 1: in this process)
      --timeout S  an export still running after S seconds is stopped and reported (each export then
                   runs in a process of its own)
      --status F   writes a line per export to F as it ends: "ok FOLDER SECONDS" or "failed NAME EXPORTER: why"
      --deadline T no export starts after T (seconds since the epoch) and one still running then is
                   stopped (each runs in a process of its own); zoo.json is rewritten after each export
Where torch is absent it says so and exits 0 having made nothing (the wheel corpus does not need it).
A folder appears only once its model and references are written (made as FOLDER.tmp, then renamed),
so a failed export never leaves a half-made test behind.
Then: build/kiln test --opt-level N build/corpus/torch_*  and  tests/corpus/report.py.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def image(b=1, s=224):
    import torch
    return torch.rand(b, 3, s, s)


def tv(name, **kw):
    def make():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kw).eval()
    return make


def tv_det(name, **kw):
    def make():
        import torchvision
        return getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None, **kw).eval()
    return make


def tv_seg(name):
    def make():
        import torchvision
        return getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None).eval()
    return make


def timm_model(name):
    def make():
        import timm
        return timm.create_model(name, pretrained=False).eval()
    return make


class DetWrap:
    """torchvision detectors take a list of images and return a list of dicts."""
    @staticmethod
    def make(inner):
        import torch

        class W(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = inner()

            def forward(self, x):
                out = self.m([x[0]])[0]
                return out["boxes"], out["scores"], out["labels"]
        return W().eval()


def bert_tiny():
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            cfg = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=128, num_labels=3)
            self.m = BertForSequenceClassification(cfg)

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).logits
    return W().eval()


def gpt2_kv(n_layer=2, n_head=4, n_embd=64):
    """A GPT-2 decoder step with its KV cache in and out (past length 7, one new token)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = GPT2LMHeadModel(GPT2Config(vocab_size=1000, n_layer=n_layer, n_head=n_head, n_embd=n_embd,
                                                n_positions=128))

        def forward(self, input_ids, attention_mask, *past):
            pkv = tuple((past[2 * i], past[2 * i + 1]) for i in range(n_layer))
            try:  # transformers 4.x: a cache object from the legacy tuples, or the tuples themselves
                from transformers.cache_utils import DynamicCache
                if hasattr(DynamicCache, "from_legacy_cache"):
                    pkv = DynamicCache.from_legacy_cache(pkv)
                else:  # transformers 5: filled layer by layer
                    cache = DynamicCache()
                    for i, (k, v) in enumerate(pkv):
                        cache.update(k, v, i)
                    pkv = cache
            except ImportError:
                pass
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, past_key_values=pkv, use_cache=True)
            pres = out.past_key_values
            if hasattr(pres, "to_legacy_cache"):
                pres = pres.to_legacy_cache()
            elif hasattr(pres, "layers"):  # transformers 5
                pres = [(layer.keys, layer.values) for layer in pres.layers]
            return (out.logits, *[t for kv in pres for t in kv])
    return W().eval()


def gpt2_kv_inputs(n_layer=2, n_head=4, n_embd=64, past=7):
    import torch
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (1, 1), generator=g)
    mask = torch.ones(1, past + 1, dtype=torch.int64)
    kv = [torch.randn(1, n_head, past, n_embd // n_head, generator=g) * 0.5 for _ in range(2 * n_layer)]
    names = ["input_ids", "attention_mask"] + [f"past_{i // 2}_{'kv'[i % 2]}" for i in range(2 * n_layer)]
    return (ids, mask, *kv), names


def t5_encoder():
    import torch
    from transformers import T5Config, T5EncoderModel

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = T5EncoderModel(T5Config(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4))

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    return W().eval()


def tokens(n=16):
    import torch
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, 1000, (1, n), generator=g), torch.ones(1, n, dtype=torch.int64)), ["input_ids", "attention_mask"]


# name -> (make the module, make (inputs, input names), rtol, atol, note)
MODELS = {
    "resnet18": (tv("resnet18"), lambda: ((image(),), ["x"]), 1e-3, 1e-4, "torchvision ResNet-18"),
    "mobilenet_v2": (tv("mobilenet_v2"), lambda: ((image(),), ["x"]), 1e-3, 1e-4, "torchvision MobileNetV2"),
    "shufflenet_v2_x0_5": (tv("shufflenet_v2_x0_5"), lambda: ((image(),), ["x"]), 1e-3, 1e-4, "channel shuffle"),
    "squeezenet1_1": (tv("squeezenet1_1"), lambda: ((image(),), ["x"]), 1e-3, 1e-4, "fire modules"),
    "regnet_y_400mf": (tv("regnet_y_400mf"), lambda: ((image(),), ["x"]), 1e-3, 1e-4, "grouped convs, SE"),
    "convnext_tiny": (tv("convnext_tiny"), lambda: ((image(),), ["x"]), 1e-3, 1e-3, "depthwise 7x7, LayerNorm"),
    "swin_t": (tv("swin_t"), lambda: ((image(),), ["x"]), 1e-3, 1e-3, "shifted windows (Roll, masks)"),
    "lraspp_mobilenet_v3_large": (tv_seg("lraspp_mobilenet_v3_large"), lambda: ((image(1, 256),), ["x"]), 1e-3, 1e-3,
                                  "segmentation, Resize"),
    "ssdlite320_mobilenet_v3_large": (lambda: DetWrap.make(tv_det("ssdlite320_mobilenet_v3_large")),
                                      lambda: ((image(1, 320),), ["x"]), 1e-3, 1e-3,
                                      "detector with its post-processing: box decoding, TopK, NonMaxSuppression"),
    "fasterrcnn_mobilenet_v3_large_320_fpn": (lambda: DetWrap.make(tv_det("fasterrcnn_mobilenet_v3_large_320_fpn")),
                                              lambda: ((image(1, 320),), ["x"]), 1e-3, 1e-3,
                                              "two-stage detector: RoIAlign, NonMaxSuppression, TopK"),
    "timm_mobilevit_xxs": (timm_model("mobilevit_xxs"), lambda: ((image(1, 256),), ["x"]), 1e-3, 1e-3, "conv + attention"),
    "timm_levit_128s": (timm_model("levit_128s"), lambda: ((image(),), ["x"]), 1e-3, 1e-3, "attention with biases"),
    "bert_tiny_cls": (bert_tiny, tokens, 1e-3, 1e-4, "BERT encoder + classifier, attention mask"),
    "t5_tiny_encoder": (t5_encoder, tokens, 1e-3, 1e-4, "T5 relative position buckets, RMSNorm"),
    "gpt2_tiny_kv": (gpt2_kv, gpt2_kv_inputs, 1e-3, 1e-4, "decoder step with KV cache in and out"),
}


def export(name, exporter, out):
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch
    from onnx import numpy_helper
    make, make_inputs, _, _, _ = MODELS[name]
    torch.manual_seed(0)
    model = make()
    inputs, names = make_inputs()
    final = os.path.join(out, f"torch_{name}_{exporter}")
    folder = final + ".tmp"
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    path = os.path.join(folder, "model.onnx")
    with torch.no_grad():
        if exporter == "dynamo":
            torch.onnx.export(model, inputs, path, input_names=names, dynamo=True, opset_version=18,
                              external_data=False)
        else:
            torch.onnx.export(model, inputs, path, input_names=names, dynamo=False, opset_version=17)
    m = onnx.load(path)
    graph_inputs = [v.name for v in m.graph.input if v.name not in {i.name for i in m.graph.initializer}]
    feed = {}
    for i, (n, t) in enumerate(zip(names, inputs)):
        if n not in graph_inputs:  # an input the exporter folded away (a constant mask)
            continue
        feed[n] = t.numpy()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = int(os.environ.get("EXPORT_TORCH_ORT_THREADS", "0"))  # 0: ORT's default
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for i, v in enumerate(sess.get_inputs()):
        with open(os.path.join(folder, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feed[v.name], v.name).SerializeToString())
    for i, (o, val) in enumerate(zip(sess.get_outputs(), sess.run(None, feed))):
        with open(os.path.join(folder, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(val), o.name).SerializeToString())
    shutil.rmtree(final, ignore_errors=True)
    os.replace(folder, final)
    return os.path.basename(final)


def export_logged(name, exporter, out):
    """export() with its time; (folder, seconds) or raises. The half-made folder is removed."""
    t = time.monotonic()
    try:
        folder = export(name, exporter, out)
    finally:
        shutil.rmtree(os.path.join(out, f"torch_{name}_{exporter}.tmp"), ignore_errors=True)
    return folder, time.monotonic() - t


class ExportFailed(Exception):
    """An export that failed in its own process (--jobs): the message is that process's verdict."""


def export_in_child(name, exporter, out, timeout):
    """One export in a process of its own (--jobs): (folder, seconds) or raises ExportFailed."""
    t = time.monotonic()
    cmd = [sys.executable, os.path.abspath(__file__), "--out", out, "--single", exporter, name]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        shutil.rmtree(os.path.join(out, f"torch_{name}_{exporter}.tmp"), ignore_errors=True)
        raise ExportFailed(f"TimeoutExpired: still exporting after {timeout:.0f} s, stopped")
    done = [line for line in r.stdout.splitlines() if line.startswith("export_torch.py: single ok ")]
    if r.returncode == 0 and done:
        return done[-1].split()[3], time.monotonic() - t
    why = [line for line in r.stdout.splitlines() if line.startswith("export_torch.py: single failed: ")]
    shutil.rmtree(os.path.join(out, f"torch_{name}_{exporter}.tmp"), ignore_errors=True)
    if why:
        raise ExportFailed(why[-1][len("export_torch.py: single failed: "):])
    tail = (r.stdout.strip().splitlines() or ["no output"])[-1]
    raise ExportFailed(f"the export process ended with status {r.returncode}: {tail}")


# the slowest exports first (both exporters: swin_t 63 + 122 s, convnext_tiny 53 + 85 s, mobilevit 35 + 68 s,
# the others 15-50 s each, two at a time on a loaded 2-core machine): --jobs starts them first so
# that they do not finish last
SLOW_FIRST = ["swin_t", "convnext_tiny", "timm_mobilevit_xxs", "timm_levit_128s", "shufflenet_v2_x0_5", "mobilenet_v2",
              "regnet_y_400mf", "lraspp_mobilenet_v3_large", "t5_tiny_encoder", "bert_tiny_cls",
              "ssdlite320_mobilenet_v3_large", "fasterrcnn_mobilenet_v3_large_320_fpn"]


def first_line(e):
    """An exception in one line: its type and first line, and so for its cause (torch's exporter
    wraps the real error in a TorchExportError whose first line says only "step 1/3 failed")."""
    if isinstance(e, ExportFailed):
        return str(e)
    parts = []
    while e is not None and len(parts) < 3:
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip()
        parts.append(f"{type(e).__name__}: {text.splitlines()[0] if text else ''}")
        e = e.__cause__
    return " <- ".join(parts)


def main():
    ap = argparse.ArgumentParser(description="export the corpus's torch models (needs torch)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "corpus"))
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=None)
    ap.add_argument("--status", default=None)
    ap.add_argument("--deadline", type=float, default=None)
    ap.add_argument("--single", choices=["torchscript", "dynamo"], help=argparse.SUPPRESS)
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("export_torch.py: torch is not installed here: the exported part of the corpus is skipped "
              "(the wheel models need no torch: fetch_corpus.py)")
        return 0
    for n in args.names:
        if n not in MODELS:
            ap.error(f"no model {n!r} (known: {', '.join(MODELS)})")
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    if args.single:  # one export, for a parent running several (--jobs): its verdict on stdout
        torch.set_num_threads(int(os.environ.get("EXPORT_TORCH_THREADS", "1")))
        try:
            folder, secs = export_logged(args.names[0], args.single, out)
        except Exception as e:
            print(f"export_torch.py: single failed: {first_line(e)}")
            return 1
        print(f"export_torch.py: single ok {folder} {secs:.1f}")
        return 0
    names = args.names or list(MODELS)
    todo = [(n, x) for n in sorted(names, key=lambda n: SLOW_FIRST.index(n) if n in SLOW_FIRST else len(SLOW_FIRST))
            for x in ("dynamo", "torchscript")]
    zoo_path = os.path.join(out, "zoo.json")
    tol = json.load(open(zoo_path)) if os.path.exists(zoo_path) else {}
    if args.status:
        open(args.status, "w").close()
    failed, lock = [], threading.Lock()

    def record(name, exporter, done, why):
        """Each export's verdict as it comes: zoo.json and the status file stay whole if this
        process is stopped later (gpu_full.sh runs the folders made so far)."""
        with lock:
            if done:
                folder, secs = done
                tol[folder] = {"rtol": MODELS[name][2], "atol": MODELS[name][3]}
                with open(zoo_path + ".tmp", "w") as f:
                    json.dump(tol, f, indent=1)
                os.replace(zoo_path + ".tmp", zoo_path)
                line = f"ok {folder} {secs:.1f}"
                print(f"export_torch.py: {folder} ({secs:.1f} s)", flush=True)
            else:
                failed.append(f"{name} ({exporter}): {why}")
                line = f"failed {name} {exporter}: {why}"
            if args.status:
                with open(args.status, "a") as f:
                    f.write(line + "\n")

    def one(job):
        name, exporter = job
        timeout = args.timeout
        if args.deadline is not None:
            left = args.deadline - time.time()
            if left <= 5:
                record(name, exporter, None, "not started: the time given to the exports (--deadline) was over")
                return
            timeout = left if timeout is None else min(timeout, left)
        try:
            if args.jobs > 1 or args.deadline is not None or args.timeout is not None:
                done = export_in_child(name, exporter, out, timeout)
            else:
                done = export_logged(name, exporter, out)
            record(name, exporter, done, None)
        except Exception as e:  # the exporter's failure: reported, the model left out
            record(name, exporter, None, first_line(e))

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, todo))
    with open(zoo_path + ".tmp", "w") as f:
        json.dump(tol, f, indent=1)
    os.replace(zoo_path + ".tmp", zoo_path)
    for line in failed:
        print(f"export_torch.py: export failed: {line}")
    print(f"export_torch.py: {len(todo) - len(failed)} of {len(todo)} exported in {time.monotonic() - start:.0f} s "
          f"(jobs {args.jobs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
