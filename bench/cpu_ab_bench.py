"""Several kiln builds side by side on one model at 1 thread, interleaved run by run.

For comparing builds of kiln (e.g. a portable build with run-time CPU dispatch against a native
one, bench/results/cpu-dispatch-2026-12-03.md) on a shared machine: each run is timed in the
calling thread's CPU time and the builds take turns run by run (A B C A B C ...), so a change of
load hits them alike; the result is each build's median and the median of its per-turn ratio to
the first build.

    python3 bench/cpu_ab_bench.py --model resnet50=PATH --build native=build --build portable=build-p
                                  [--runs 60] [--env portable:KILN_CPU_ISA=avx2]

--env NAME:VAR=VALUE sets VAR while build NAME's session is created (KILN_CPU_ISA and
KILN_CPU_MASK are read once per library, at its first session: give such a build its own name and
directory, or a copy of the library, to compare levels of one build).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from op_sweep import Kiln, KilnSession  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True, help="NAME=PATH")
    ap.add_argument("--build", action="append", required=True, help="NAME=BUILD_DIR (the first is the reference)")
    ap.add_argument("--env", action="append", default=[], help="NAME:VAR=VALUE")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    import cpu_models
    envs = {}
    for e in a.env:
        name, kv = e.split(":", 1)
        var, val = kv.split("=", 1)
        envs.setdefault(name, []).append((var, val))
    builds = [b.split("=", 1) for b in a.build]
    libs = {name: Kiln(os.path.join(d, "libkiln.so")) for name, d in builds}

    def with_env(name, fn):
        saved = {v: os.environ.get(v) for v, _ in envs.get(name, [])}
        os.environ.update(dict(envs.get(name, [])))
        try:
            return fn()
        finally:
            for v, old in saved.items():
                if old is None:
                    os.environ.pop(v, None)
                else:
                    os.environ[v] = old
    print("| model | " + " | ".join(f"{n} ms" for n, _ in builds) + " | " +
          " | ".join(f"{n}/{builds[0][0]}" for n, _ in builds[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(builds) - 1))
    for spec in a.model:
        mname, path = spec.split("=", 1)
        model = open(path, "rb").read()
        feeds = cpu_models.feeds_for(path)
        sess = {}
        for name, _ in builds:
            s = with_env(name, lambda: KilnSession(libs[name], model, 1, "cpu", feeds))
            s.bind_outputs(s.run_alloc())
            sess[name] = s
        for s in sess.values():
            for _ in range(a.warmup):
                s.run()
        ts = {n: [] for n, _ in builds}
        for _ in range(a.runs):
            for name, _ in builds:
                t = time.thread_time()
                sess[name].run()
                ts[name].append((time.thread_time() - t) * 1e3)
        ref = builds[0][0]
        med = {n: statistics.median(v) for n, v in ts.items()}
        ratios = {n: statistics.median(x / r for x, r in zip(ts[n], ts[ref])) for n, _ in builds[1:]}
        print(f"| {mname} | " + " | ".join(f"{med[n]:.2f}" for n, _ in builds) + " | " +
              " | ".join(f"{ratios[n]:.3f}" for n, _ in builds[1:]) + " |", flush=True)
        for s in sess.values():
            s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
