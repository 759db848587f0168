#!/usr/bin/env python3
"""NEEDS TORCH (not installed on the CI machine; run it where torch is, e.g. the GPU machine).

The corpus's exported part (issue 18, item 7): published architectures from torchvision, timm and
transformers that the zoo does not have, each exported with both of torch's exporters (TorchScript:
dynamo=False, opset 17; dynamo: dynamo=True, opset 18), written beside the wheel models in
build/corpus as torch_<model>_<exporter>/ in the backend-test layout with ONNX Runtime's outputs
(and their tolerances merged into build/corpus/zoo.json). Weights are the architectures' own
initialisation with a fixed seed: the machines that run this reach no model hub. A model whose
export fails is reported (it is the exporter's failure, not kiln's) and left out.

    export_torch.py [--out build/corpus] [NAME...]
Where torch is absent it says so and exits 0 having made nothing (the wheel corpus does not need it).
Then: build/kiln test --opt-level N build/corpus/torch_*  and  tests/corpus/report.py.
"""
import argparse
import json
import os
import sys

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
    folder = os.path.join(out, f"torch_{name}_{exporter}")
    os.makedirs(os.path.join(folder, "test_data_set_0"), exist_ok=True)
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
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    for i, v in enumerate(sess.get_inputs()):
        with open(os.path.join(folder, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feed[v.name], v.name).SerializeToString())
    for i, (o, val) in enumerate(zip(sess.get_outputs(), sess.run(None, feed))):
        with open(os.path.join(folder, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(val), o.name).SerializeToString())
    return os.path.basename(folder)


def main():
    ap = argparse.ArgumentParser(description="export the corpus's torch models (needs torch)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "corpus"))
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("export_torch.py: torch is not installed here: the exported part of the corpus is skipped "
              "(the wheel models need no torch: fetch_corpus.py)")
        return 0
    os.makedirs(args.out, exist_ok=True)
    zoo_path = os.path.join(args.out, "zoo.json")
    tol = json.load(open(zoo_path)) if os.path.exists(zoo_path) else {}
    failed = []
    for name in args.names or MODELS:
        for exporter in ("torchscript", "dynamo"):
            try:
                folder = export(name, exporter, args.out)
                tol[folder] = {"rtol": MODELS[name][2], "atol": MODELS[name][3]}
                print(f"export_torch.py: {folder}")
            except Exception as e:  # the exporter's failure: reported, the model left out
                failed.append(f"{name} ({exporter}): {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    with open(zoo_path, "w") as f:
        json.dump(tol, f, indent=1)
    for line in failed:
        print(f"export_torch.py: export failed: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
