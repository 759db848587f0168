#!/usr/bin/env python3
"""ResNet-50 and BERT-base built with onnx.helper, for machines without torch.

bench/cpu_models.py exports these two with torch (torchvision's resnet50, transformers' BertModel)
when torch is installed. Where it is not (the 2-core AVX2 EPYC developers' machine of 2026-12-04:
torch's PyPI wheel pulls several GB of CUDA libraries), this script writes graphs of the same
shapes and operator sequence as those exports (bench/onnx_builders.py's torch-export form:
resnet50(fold_bn=True), BatchNormalization folded into the Conv bias; bert_base(export_form=True);
opset 17, random weights with a fixed seed: latency does not depend on the values) into the folder
cpu_models.py reads:

    python3 bench/make_cpu_models.py [--work /tmp/kiln-cpu-models] [--only resnet50,bert_base]

Inputs: resnet50 'input' [1,3,224,224]; bert_base 'input_ids' and 'attention_mask' int64 [1,128],
output 'last_hidden_state' [1,128,768].
"""
import argparse
import os
import sys

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_builders  # noqa: E402

BUILDERS = {"resnet50": lambda: onnx_builders.resnet50(fold_bn=True),
            "bert_base": lambda: onnx_builders.bert_base(export_form=True)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="/tmp/kiln-cpu-models")
    ap.add_argument("--only", default="resnet50,bert_base")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    for name in a.only.split(","):
        model = BUILDERS[name]()
        model.producer_name = "kiln-make_cpu_models"
        onnx.checker.check_model(model)
        path = os.path.join(a.work, f"{name}.onnx")
        onnx.save(model, path)
        print(f"{name}: {len(model.graph.node)} nodes -> {path} ({os.path.getsize(path) / 1e6:.0f} MB)")


if __name__ == "__main__":
    main()
