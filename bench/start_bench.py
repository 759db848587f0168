#!/usr/bin/env python3
"""Start-up time with the compiled-model cache: for every zoo model, the wall time from process
start to first output of `kiln run` on test_data_set_0 (when its outputs are printed; the session's
teardown and the process exit after that are not counted), with a cold cache (a fresh, empty
KILN_CACHE_DIR: hash, load, optimise, compile, store) and a warm one (the same directory again:
hash, load the compiled file), and with the cache off (KILN_CACHE=0: hash nothing, store
nothing) for reference.

The model files are read once before timing, so every variant finds them in the OS page cache;
"cold" means kiln's compiled cache, not the disk. Each variant runs --rounds times, alternating
(off, cold, warm, off, cold, warm, ...) so all see the same machine state; the table gives
medians. Besides the process wall time it reports what `kiln run` measured itself: session
creation and the run.

    bench/start_bench.py [--kiln build/kiln] [--provider cpu] [--threads N] [--rounds R] [MODEL_DIR ...]

Defaults: every model under ../shared/models, provider cpu, all cores, 5 rounds. Results go to
bench/results/start-<provider>-<date>.md with the machine and the command. With --provider cuda
the CUDA context creation is part of every variant; the CUDA backend reports it separately.
"""
import argparse
import datetime
import glob
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchutil import cpu_name, input_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(kiln, model_dir, names, provider, threads, env):
    args = [kiln, "run", os.path.join(model_dir, "model.onnx"), "--provider", provider, "--threads", str(threads),
            "--log", "info"]
    for i, n in enumerate(names):
        args += ["--input", f"{n}={os.path.join(model_dir, 'test_data_set_0', f'input_{i}.pb')}"]
    # the time to first output: when `kiln run` has printed its outputs (it flushes them before
    # the session's teardown and the process exit, which the wall time until exit also counts)
    with tempfile.TemporaryFile(mode="w+") as err:
        t = time.perf_counter()
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        lines = []
        first = None
        for line in p.stdout:
            lines.append(line)
            if line.startswith("session created in"):
                first = (time.perf_counter() - t) * 1e3
        p.wait()
        err.seek(0)
        out = subprocess.CompletedProcess(args, p.returncode, "".join(lines), err.read())
    wall = first if first is not None else (time.perf_counter() - t) * 1e3
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip() or out.stdout.strip())
    m = re.search(r"session created in ([0-9.]+) ms; run ([0-9.]+) ms", out.stdout)
    outcome = "hit" if "cache hit" in out.stderr else "miss" if ("cache miss" in out.stderr or "cache rebuilt" in out.stderr) else "off"
    # CUDA: driver initialisation and context creation, which no cache can save (0 on the CPU)
    ctx = re.search(r"driver initialised and devices queried in ([0-9.]+) ms, context created in ([0-9.]+) ms", out.stderr)
    dev_init = float(ctx.group(1)) + float(ctx.group(2)) if ctx else 0.0
    return wall, float(m.group(1)), float(m.group(2)), outcome, dev_init


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "kiln"))
    ap.add_argument("--provider", default="cpu")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None, help="results file (default bench/results/start-<provider>-<date>.md)")
    ap.add_argument("models", nargs="*")
    a = ap.parse_args()
    models = a.models or sorted(d for d in glob.glob(os.path.join(ROOT, "..", "shared", "models", "*"))
                                if os.path.isfile(os.path.join(d, "model.onnx")))
    if not models:
        sys.exit("no models: give model folders or put the zoo at ../shared/models")
    base_env = dict(os.environ)
    base_env.pop("KILN_LOG", None)
    rows = []
    work = tempfile.mkdtemp(prefix="kiln-start-bench-")
    try:
        for d in models:
            name = os.path.basename(os.path.normpath(d))
            path = os.path.join(d, "model.onnx")
            with open(path, "rb") as f:  # into the page cache
                size = len(f.read())
            names = input_names(path)
            res = {"off": [], "cold": [], "warm": []}
            compiled = 0
            for r in range(a.rounds):
                env = dict(base_env, KILN_CACHE="0")
                res["off"].append(run_once(a.kiln, d, names, a.provider, a.threads, env))
                cache = os.path.join(work, f"{name}-{r}")
                env = dict(base_env, KILN_CACHE_DIR=cache)
                cold = run_once(a.kiln, d, names, a.provider, a.threads, env)
                warm = run_once(a.kiln, d, names, a.provider, a.threads, env)
                if cold[3] != "miss" or warm[3] != "hit":
                    raise RuntimeError(f"{name}: expected a miss then a hit, got {cold[3]} then {warm[3]}")
                res["cold"].append(cold)
                res["warm"].append(warm)
                compiled = sum(os.path.getsize(os.path.join(cache, f)) for f in os.listdir(cache) if f.endswith(".kiln"))
                shutil.rmtree(cache, ignore_errors=True)
            med = {k: [statistics.median(x[i] for x in v) for i in (0, 1, 2, 4)] for k, v in res.items()}
            rows.append((name, size, compiled, med))
            print(f"{name:22s} off {med['off'][0]:8.1f} ms  cold {med['cold'][0]:8.1f} ms  warm {med['warm'][0]:8.1f} ms"
                  f"  (session: {med['off'][1]:.1f} / {med['cold'][1]:.1f} / {med['warm'][1]:.1f} ms,"
                  f" run {med['warm'][2]:.1f} ms; device init {med['warm'][3]:.1f} ms; beyond it cold"
                  f" {med['cold'][0] - med['cold'][3]:.1f} ms, warm {med['warm'][0] - med['warm'][3]:.1f} ms)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    date = datetime.date.today().isoformat()
    out = a.out or os.path.join(ROOT, "bench", "results", f"start-{a.provider}-{date}.md")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = "?"
    kver = subprocess.run([a.kiln, "--version"], capture_output=True, text=True).stdout.strip()
    with open(out, "w") as f:
        f.write(f"# Start-up time with the compiled cache ({a.provider}), {date}\n\n")
        f.write(f"- machine: {cpu_name()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}\n")
        f.write(f"- {kver}, commit {commit}; threads {a.threads or 'all cores'}; medians of {a.rounds} rounds\n")
        f.write(f"- command: `{' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`\n\n")
        f.write("Wall time of `kiln run MODEL --input ...` from process start to its first output "
                "(test_data_set_0; the teardown and exit after it not counted). *off*: KILN_CACHE=0 (no hashing, no store); *cold*: an empty cache directory "
                "(hash, compile, store the compiled file with fsync); *warm*: the same directory again (hash the "
                "model, check and map the compiled file). *session* is `kiln_session_create` alone as `kiln run` "
                "measures it; *run* the first run. The model files are in the OS page cache in every variant. "
                "*device init* (CUDA only) is the driver initialisation and context creation as the CUDA backend "
                "logs them: the part of a start no cache can save; *cold - init* and *warm - init* are the starts "
                "without it, and *ratio* the first over the second (the cache's gain on what it can save).\n\n")
        f.write("| model | .onnx MB | compiled MB | off ms | cold ms | warm ms | cold/warm | session off | "
                "session cold | session warm | run ms | device init ms | cold - init ms | warm - init ms | ratio |\n"
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
        for name, size, compiled, m in rows:
            cold_net, warm_net = m['cold'][0] - m['cold'][3], m['warm'][0] - m['warm'][3]
            f.write(f"| {name} | {size / 1e6:.1f} | {compiled / 1e6:.1f} | {m['off'][0]:.1f} | {m['cold'][0]:.1f} | "
                    f"{m['warm'][0]:.1f} | {m['cold'][0] / m['warm'][0]:.2f} | {m['off'][1]:.1f} | {m['cold'][1]:.1f} | "
                    f"{m['warm'][1]:.1f} | {m['warm'][2]:.1f} | {m['warm'][3]:.1f} | {cold_net:.1f} | {warm_net:.1f} | "
                    f"{cold_net / warm_net if warm_net > 0 else float('inf'):.1f} |\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
