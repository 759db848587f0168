#!/usr/bin/env python3
"""Packs built corpus models into a folder small enough to carry to the GPU machine (which has no
package registry, so fetch_corpus.py cannot run there): every model of the CI set, then as many of
the others as fit in --max-mb, smallest first (the most models for the room). Each model folder is
copied as fetch_corpus.py built it (model.onnx, test_data_set_K/, .stamp), with zoo.json cut down
to the packed models, gpu_run.sh beside them, and PACKED.txt listing what is in and what was left
out with sizes.

    pack.py [--corpus build/corpus] [--max-mb 40] OUT
    # on the GPU machine:  bash OUT/gpu_run.sh path/to/kiln OUT results/

Exit status: 0 packed; 1 a CI model is not built in --corpus, the CI set alone does not fit, or OUT
exists and is not empty.
"""
import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def folder_bytes(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(dirpath, f))
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=os.path.join(ROOT, "build", "corpus"), help="built corpus (fetch_corpus.py --out)")
    ap.add_argument("--manifest", default=os.path.join(HERE, "manifest.json"))
    ap.add_argument("--max-mb", type=float, default=40.0, help="size limit of OUT in MiB (default 40)")
    ap.add_argument("out")
    a = ap.parse_args()
    if a.max_mb <= 0:
        ap.error("--max-mb must be positive")
    with open(a.manifest) as f:
        models = json.load(f)["models"]
    with open(os.path.join(a.corpus, "zoo.json")) as f:
        zoo = json.load(f)
    if os.path.exists(a.out) and os.listdir(a.out):
        print(f"pack.py: {a.out} exists and is not empty", file=sys.stderr)
        return 1
    limit = int(a.max_mb * 1024 * 1024)
    built, missing = {}, []
    for name in models:
        path = os.path.join(a.corpus, name)
        if os.path.isfile(os.path.join(path, "model.onnx")):
            built[name] = folder_bytes(path)
        else:
            missing.append(name)
    ci = [n for n, e in models.items() if e.get("ci")]
    absent_ci = [n for n in ci if n not in built]
    if absent_ci:
        print(f"pack.py: CI models not built in {a.corpus}: {', '.join(absent_ci)} "
              f"(run tests/corpus/fetch_corpus.py --out {a.corpus})", file=sys.stderr)
        return 1
    # room for the small files written beside the models (zoo.json, gpu_run.sh, PACKED.txt)
    extra = 64 * 1024
    chosen = list(ci)
    used = sum(built[n] for n in ci) + extra
    if used > limit:
        print(f"pack.py: the CI set alone is {used / 2**20:.1f} MiB, over --max-mb {a.max_mb}", file=sys.stderr)
        return 1
    left = []
    for n in sorted((n for n in built if n not in ci), key=lambda n: (built[n], n)):
        if used + built[n] <= limit:
            chosen.append(n)
            used += built[n]
        else:
            left.append(n)
    os.makedirs(a.out, exist_ok=True)
    for n in chosen:
        shutil.copytree(os.path.join(a.corpus, n), os.path.join(a.out, n))
    with open(os.path.join(a.out, "zoo.json"), "w") as f:
        json.dump({n: zoo[n] for n in chosen if n in zoo}, f, indent=1, sort_keys=True)
    shutil.copy2(os.path.join(HERE, "gpu_run.sh"), os.path.join(a.out, "gpu_run.sh"))
    with open(os.path.join(a.out, "PACKED.txt"), "w") as f:
        f.write(f"kiln corpus, packed by tests/corpus/pack.py --max-mb {a.max_mb} from {a.corpus}\n")
        f.write(f"{len(chosen)} models, {used / 2**20:.1f} MiB (the CI set: {len(ci)})\n\n")
        for n in chosen:
            f.write(f"in   {n:32s} {built[n] / 2**20:7.2f} MiB{'  (CI)' if n in ci else ''}\n")
        for n in left:
            f.write(f"out  {n:32s} {built[n] / 2**20:7.2f} MiB  (no room)\n")
        for n in missing:
            f.write(f"out  {n:32s}     -      (not built in {a.corpus})\n")
        f.write("\nOn the GPU machine: bash gpu_run.sh KILN_BIN . RESULTS_DIR\n")
    print(f"pack.py: {len(chosen)} models ({len(ci)} CI), {used / 2**20:.1f} MiB in {a.out}; "
          f"{len(left)} left out for room, {len(missing)} not built")
    return 0


if __name__ == "__main__":
    sys.exit(main())
