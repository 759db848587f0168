#!/usr/bin/env python3
"""op_sweep.py's one-node cases on several kiln builds (or settings) side by side, 1 thread, CPU time.

For A/B measurements of a kernel change on a shared machine: every case runs on each variant and
on ONNX Runtime (1 intra-op thread) in turn, run by run (A B ORT A B ORT ...), each run timed with
the calling thread's CPU clock, so time spent descheduled by other processes does not count and a
change of load hits the variants alike. Per variant: the median over runs, the median of the
per-turn ratio to the first variant, and the median over runs of kiln / ORT.

    python3 bench/op_ab.py --only REGEX --variant before=build-a --variant after=build-b
                           [--variant tuned=build-b:KILN_WINO_CHUNK_KB=1024,...] [--runs 200]
                           [--passes 3] [--suite op_sweep|conv3x3|conv1x1]

A variant is NAME=BUILD_DIR, optionally followed by :VAR=VALUE,... set in the environment around
its session's creation and each of its runs (for settings read at run time). Two build folders'
libkiln.so load side by side in one process (ctypes, local symbols). Outputs are checked against
ONNX Runtime once per variant (op_sweep.check). --passes repeats the whole measurement and
prints each pass's rows.
"""
import argparse
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import op_sweep  # noqa: E402
from op_sweep import Kiln, KilnSession  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", required=True, help="regular expression over op_sweep's 'op case dtype'")
    ap.add_argument("--variant", action="append", required=True, help="NAME=BUILD[:VAR=VAL,...]")
    ap.add_argument("--runs", type=int, default=200, help="turns per pass (each runs every variant once)")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--suite", default="op_sweep", choices=["op_sweep", "conv3x3", "conv1x1", "mbconv", "models"],
                    help="whose cases: op_sweep.py's, conv3x3_sweep.py's, conv1x1_sweep.py's or mbconv_sweep.py's")
    a = ap.parse_args()

    libs, variants = {}, []
    for v in a.variant:
        name, rest = v.split("=", 1)
        build, _, envs = rest.partition(":")
        env = dict(kv.split("=", 1) for kv in envs.split(",") if kv)
        path = os.path.abspath(os.path.join(build, "libkiln.so"))
        if path not in libs:
            libs[path] = Kiln(path)
        variants.append((name, libs[path], env))

    def with_env(env, fn):
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return fn()
        finally:
            for k, old in saved.items():
                if old is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = old

    if a.suite == "conv3x3":
        import conv3x3_sweep
        all_cases = conv3x3_sweep.cases()
    elif a.suite == "conv1x1":
        import conv1x1_sweep
        all_cases = conv1x1_sweep.cases()
    elif a.suite == "mbconv":
        import mbconv_sweep
        all_cases = mbconv_sweep.cases()
    elif a.suite == "models":
        import mbconv_sweep
        all_cases = mbconv_sweep.model_cases()
    else:
        all_cases = op_sweep.cases()
    cases = [c for c in all_cases if re.search(a.only, c.key)]
    names = [n for n, _, _ in variants]
    print("| case | pass | " + " | ".join(f"{n} ms" for n in names) + (" | ORT ms" if not a.no_ort else "") + " | " +
          " | ".join(f"{n}/{names[0]}" for n in names[1:]) + "".join(f" | {n}/ORT" for n in names if not a.no_ort) +
          " |")
    print("|---|---:|" + "---:|" * (len(names) + (0 if a.no_ort else 1) + len(names) - 1 +
                                     (0 if a.no_ort else len(names))))
    bad = 0
    for case in cases:
        model = case.model()
        ref, ort_run = (None, None) if a.no_ort else op_sweep.ort_session(model, 1, case.inputs)
        for p in range(a.passes):
            sess = {}
            for name, lib, env in variants:
                s = with_env(env, lambda: KilnSession(lib, model, 1, "cpu", case.inputs))
                got = with_env(env, s.run_alloc)
                if ref is not None and p == 0:
                    why = op_sweep.check(case, got, ref)
                    if why:
                        bad += 1
                        print(f"MISMATCH {case.key} {name}: {why}", flush=True)
                s.bind_outputs(got)
                sess[name] = s
            runners = [(n, sess[n].run, env) for n, _, env in variants] + \
                ([] if a.no_ort else [("ORT", ort_run, {})])
            for n, fn, env in runners:
                for _ in range(3):
                    with_env(env, fn)
            ts = {n: [] for n, _, _ in runners}
            for _ in range(a.runs):
                for n, fn, env in runners:
                    saved = {k: os.environ.get(k) for k in env}
                    os.environ.update(env)
                    t = time.thread_time()
                    fn()
                    dt = time.thread_time() - t
                    for k, old in saved.items():
                        if old is None:
                            os.environ.pop(k, None)
                        else:
                            os.environ[k] = old
                    ts[n].append(dt * 1e3)
            med = {n: statistics.median(v) for n, v in ts.items()}
            rat = [statistics.median(x / y for x, y in zip(ts[n], ts[names[0]])) for n in names[1:]]
            ort_rat = [] if a.no_ort else [statistics.median(x / y for x, y in zip(ts[n], ts["ORT"])) for n in names]
            print(f"| {case.key} | {p + 1} | " + " | ".join(f"{med[n]:.4f}" for n in names) +
                  ("" if a.no_ort else f" | {med['ORT']:.4f}") + " | " + " | ".join(f"{r:.3f}" for r in rat) +
                  "".join(f" | {r:.3f}" for r in ort_rat) + " |", flush=True)
            for s in sess.values():
                s.close()
    print(f"{len(cases) * len(variants) - bad} passed, {bad} failed, 0 skipped")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
