#!/usr/bin/env python3
"""Packs built corpus models into a folder small enough to carry to the GPU machine (which has no
package registry, so fetch_corpus.py cannot run there): every model of the CI set, then as many of
the others as fit in --max-mb, smallest first (the most models for the room). Each model folder is
copied as fetch_corpus.py built it (model.onnx, test_data_set_K/, .stamp), with zoo.json cut down
to the packed models, gpu_run.sh beside them, and PACKED.txt listing what is in and what was left
out with sizes.

    pack.py [--corpus build/corpus] [--max-mb 40] OUT
    # on the GPU machine:  bash OUT/gpu_run.sh path/to/kiln OUT results/

With --xz (the pack of tests/corpus/gpu_full.sh) each model folder is stored as OUT/models/NAME.tar.xz
and --max-mb counts those compressed sizes (the models shrink to about 0.8 of their size; some, with
runs of equal bytes, to 0.2); zoo.json, packed.json (in and out, with both sizes) and PACKED.txt
lie beside. --skip-ci leaves the CI set out (it ran on the GPU already): the others are taken
smallest first. --skip leaves out the models of earlier packs (their packed.json, or names), so the
models one pack had no room for go into the next: the GPU machine takes one pack a call.
`pack.py --unpack PACK DEST` unpacks such a pack into DEST (model folders and
zoo.json), as gpu_full.sh does on the GPU machine.

    pack.py --xz --skip-ci --max-mb 50 .devsrc/corpus_gpu      # then gpu_full.sh .devsrc/corpus_gpu OUT
    pack.py --xz --skip-ci --max-mb 55 --skip .devsrc/corpus_gpu/packed.json .devsrc/corpus_gpu2   # the rest

Exit status: 0 packed; 1 a CI model is not built in --corpus, the CI set alone does not fit, or OUT
exists and is not empty.
"""
import argparse
import io
import json
import lzma
import os
import shutil
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def folder_bytes(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(dirpath, f))
    return total


def folder_xz(path, name):
    """The model folder as one .tar.xz (bytes): names under NAME/, sorted, no owners or times, so
    the same folder always gives the same bytes."""
    buf = io.BytesIO()
    with lzma.open(buf, "wb", preset=9) as xz, tarfile.open(fileobj=xz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirs, files in os.walk(path):
            dirs.sort()
            for f in sorted(files):
                full = os.path.join(dirpath, f)
                info = tar.gettarinfo(full, arcname=os.path.join(name, os.path.relpath(full, path)))
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                with open(full, "rb") as fh:
                    tar.addfile(info, fh)
    return buf.getvalue()


def unpack(pack, dest):
    """Unpacks a --xz pack: every models/NAME.tar.xz into DEST/NAME, zoo.json beside them."""
    models = os.path.join(pack, "models")
    if not os.path.isdir(models):
        print(f"pack.py: {pack} is not a pack made with --xz (no models/ folder)", file=sys.stderr)
        return 1
    os.makedirs(dest, exist_ok=True)
    n = 0
    for f in sorted(os.listdir(models)):
        if not f.endswith(".tar.xz"):
            continue
        name = f[:-len(".tar.xz")]
        with tarfile.open(os.path.join(models, f), "r:xz") as tar:
            for m in tar.getmembers():  # the pack's own files: plain files under NAME/ only
                if not m.isfile() or m.name.split("/")[0] != name or ".." in m.name.split("/") or m.name.startswith("/"):
                    print(f"pack.py: {f}: unexpected member {m.name!r}", file=sys.stderr)
                    return 1
            tar.extractall(dest)
        n += 1
    shutil.copy2(os.path.join(pack, "zoo.json"), os.path.join(dest, "zoo.json"))
    print(f"pack.py: {n} models unpacked into {dest}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=os.path.join(ROOT, "build", "corpus"), help="built corpus (fetch_corpus.py --out)")
    ap.add_argument("--manifest", default=os.path.join(HERE, "manifest.json"))
    ap.add_argument("--max-mb", type=float, default=40.0, help="size limit of OUT in MiB (default 40)")
    ap.add_argument("--xz", action="store_true", help="each model folder as models/NAME.tar.xz; --max-mb counts compressed sizes")
    ap.add_argument("--skip-ci", action="store_true", help="leave the CI set out")
    ap.add_argument("--skip", action="append", default=[], metavar="PACKED_JSON|NAME,...",
                    help="leave out these models: an earlier pack's packed.json (its 'in' models) or names; repeatable")
    ap.add_argument("--unpack", metavar="PACK", help="unpack a --xz pack into OUT instead")
    ap.add_argument("out")
    a = ap.parse_args()
    if a.unpack:
        return unpack(a.unpack, a.out)
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
    ci = [n for n, e in models.items() if e.get("ci")]
    skip = set()
    for item in a.skip:
        if item.endswith(".json"):
            with open(item) as f:
                skip.update(json.load(f)["in"])
        else:
            skip.update(n for n in item.split(",") if n)
    unknown = sorted(skip - set(models))
    if unknown:
        print(f"pack.py: --skip names models the manifest does not have: {', '.join(unknown)}", file=sys.stderr)
        return 1
    if skip & set(ci) and not a.skip_ci:
        print("pack.py: --skip leaves out CI models: give --skip-ci too (a pack without --skip-ci holds the CI set)",
              file=sys.stderr)
        return 1
    built, missing = {}, []
    for name in models:
        if (a.skip_ci and name in ci) or name in skip:
            continue
        path = os.path.join(a.corpus, name)
        if os.path.isfile(os.path.join(path, "model.onnx")):
            built[name] = folder_bytes(path)
        else:
            missing.append(name)
    absent_ci = [n for n in ci if n not in built]
    if absent_ci and not a.skip_ci:
        print(f"pack.py: CI models not built in {a.corpus}: {', '.join(absent_ci)} "
              f"(run tests/corpus/fetch_corpus.py --out {a.corpus})", file=sys.stderr)
        return 1
    # what each model takes in the pack: its folder, or its folder's .tar.xz
    xz = {}
    size = dict(built)
    if a.xz:
        for n in built:
            xz[n] = folder_xz(os.path.join(a.corpus, n), n)
            size[n] = len(xz[n])
    # room for the small files written beside the models (zoo.json, gpu_run.sh, PACKED.txt, packed.json)
    extra = 64 * 1024
    chosen = [] if a.skip_ci else list(ci)
    used = sum(size[n] for n in chosen) + extra
    if used > limit:
        print(f"pack.py: the CI set alone is {used / 2**20:.1f} MiB, over --max-mb {a.max_mb}", file=sys.stderr)
        return 1
    left = []
    for n in sorted((n for n in built if n not in ci), key=lambda n: (size[n], n)):
        if used + size[n] <= limit:
            chosen.append(n)
            used += size[n]
        else:
            left.append(n)
    os.makedirs(a.out, exist_ok=True)
    if a.xz:
        os.makedirs(os.path.join(a.out, "models"))
        for n in chosen:
            with open(os.path.join(a.out, "models", n + ".tar.xz"), "wb") as f:
                f.write(xz[n])
    else:
        for n in chosen:
            shutil.copytree(os.path.join(a.corpus, n), os.path.join(a.out, n))
        shutil.copy2(os.path.join(HERE, "gpu_run.sh"), os.path.join(a.out, "gpu_run.sh"))
    with open(os.path.join(a.out, "zoo.json"), "w") as f:
        json.dump({n: zoo[n] for n in chosen if n in zoo}, f, indent=1, sort_keys=True)
    skipped_ci = [n for n in ci if a.skip_ci]
    with open(os.path.join(a.out, "packed.json"), "w") as f:
        entry = lambda n: {"bytes": built[n], "packed_bytes": size[n]}  # noqa: E731
        json.dump({"max_mb": a.max_mb, "xz": a.xz, "corpus": a.corpus,
                   "in": {n: entry(n) for n in chosen},
                   "out": dict([(n, dict(entry(n), why="no room")) for n in left] +
                               [(n, {"why": "CI set, left out (--skip-ci)"}) for n in skipped_ci] +
                               [(n, {"why": "--skip (an earlier pack)"}) for n in sorted(skip - set(ci))] +
                               [(n, {"why": f"not built in {a.corpus}"}) for n in missing])}, f, indent=1)
    unit = "MiB packed (xz)" if a.xz else "MiB"
    with open(os.path.join(a.out, "PACKED.txt"), "w") as f:
        f.write(f"kiln corpus, packed by tests/corpus/pack.py --max-mb {a.max_mb}{' --xz' if a.xz else ''}"
                f"{' --skip-ci' if a.skip_ci else ''}{''.join(' --skip ' + x for x in a.skip)} from {a.corpus}\n")
        f.write(f"{len(chosen)} models, {used / 2**20:.1f} {unit} (the CI set: {0 if a.skip_ci else len(ci)})\n\n")
        for n in chosen:
            f.write(f"in   {n:32s} {built[n] / 2**20:7.2f} MiB" + (f" {size[n] / 2**20:7.2f} packed" if a.xz else "")
                    + f"{'  (CI)' if n in ci else ''}\n")
        for n in left:
            f.write(f"out  {n:32s} {built[n] / 2**20:7.2f} MiB" + (f" {size[n] / 2**20:7.2f} packed" if a.xz else "")
                    + "  (no room)\n")
        for n in skipped_ci:
            f.write(f"out  {n:32s}     -      (CI set: --skip-ci)\n")
        for n in sorted(skip - set(ci)):
            f.write(f"out  {n:32s}     -      (--skip: an earlier pack)\n")
        for n in missing:
            f.write(f"out  {n:32s}     -      (not built in {a.corpus})\n")
        if a.xz:
            f.write("\nOn the GPU machine: bash tests/corpus/gpu_full.sh THIS_FOLDER RESULTS_DIR\n")
        else:
            f.write("\nOn the GPU machine: bash gpu_run.sh KILN_BIN . RESULTS_DIR\n")
    print(f"pack.py: {len(chosen)} models ({0 if a.skip_ci else len(ci)} CI), {used / 2**20:.1f} {unit} in {a.out}; "
          f"{len(left)} left out for room, {len(skip - set(ci))} by --skip, {len(missing)} not built")
    return 0

if __name__ == "__main__":
    sys.exit(main())
