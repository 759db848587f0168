#!/usr/bin/env python3
"""kiln's CPU levels side by side: op_sweep.py's cases, kiln at each KILN_CPU_ISA level of a portable
build (and optionally of a second build: before/after a change) against ONNX Runtime, in one process.

    bench/isa_sweep.py --build build [--before OTHER_BUILD] [--levels avx2,avx512,baseline]
                       [--only REGEX] [--threads 1] [--rounds 5] [--target-ms 15] [--passes 1] [--out FILE]

A portable build (-DKILN_NATIVE=OFF) chooses its level once per process, the first time it is asked
(KILN_CPU_ISA, isa.h). Here each (build, level) is a copy of libkiln.so loaded on its own
(RTLD_LOCAL, so every copy keeps its own choice), KILN_CPU_ISA set before its first session. Each
case's runtimes then run alternating rounds (ORT, kiln level 1, kiln level 2, ..., ORT, ...), the
median of each round's per-run latencies, the median of those; outputs are checked against ORT's
as op_sweep.py does. The table gives ratios only (the box may be shared): kiln level / ORT per
level, kiln avx2 / kiln avx512, and with --before each level's after / before. --passes N sweeps
all the cases N times (sessions made again each time) and gives each cell's median over the
passes, so that a burst of other work on a shared machine moves one pass, not the table.

--only defaults to the float convolution and pooling classes (Conv, ConvTranspose, MaxPool,
AveragePool, GlobalAveragePool, GlobalMaxPool).
"""
import argparse
import ctypes
import datetime
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import op_sweep as osw  # noqa: E402
from benchutil import cpu_name  # noqa: E402

DEFAULT_ONLY = r"^(Conv|ConvTranspose|MaxPool|AveragePool|GlobalAveragePool|GlobalMaxPool) .* f32$"


def load_level(build, level, tag, tmp):
    """A private copy of build's libkiln.so whose CPU level is `level`."""
    src = os.path.join(build, "libkiln.so")
    dst = os.path.join(tmp, f"libkiln_{tag}.so")
    shutil.copyfile(src, dst)
    os.environ["KILN_CPU_ISA"] = level
    k = osw.Kiln(dst)
    # the level is chosen at the first session: make one now, while KILN_CPU_ISA says this level
    warm = osw.Case("Relu", "warm", {"x": osw.rnd(1, 4)})
    s = osw.KilnSession(k, warm.model(), 1, "cpu", warm.inputs)
    s.close()
    return k


def measure(case, a, libs, row):
    """One case: ORT and every kiln (build, level) checked against ORT, then timed in alternating
    rounds; returns {runtime: median of the round medians} (ms), mismatches noted in row."""
    model, th, feeds = case.model(), a.threads, case.inputs
    sessions = []
    try:
        ref, ort_run = osw.ort_session(model, th, feeds)
        runners = {"ort": ort_run}
        for name, k in libs.items():
            ks = osw.KilnSession(k, model, th, "cpu", feeds)
            sessions.append(ks)
            got = ks.run_alloc()
            bad = osw.check(case, got, ref)
            if bad:
                row["note"] += f"{name}: {bad}; "
            ks.bind_outputs(got)
            runners[name] = ks.run
        per = {}
        for name, fn in runners.items():
            fn(), fn()
            t = time.perf_counter()
            fn()
            per[name] = max((time.perf_counter() - t) * 1e3, 1e-3)
        n = max(1, min(500, int(a.target_ms / max(per.values()))))
        meds = {name: [] for name in runners}
        for _ in range(a.rounds):
            for name, fn in runners.items():
                if th > 1:
                    time.sleep(0.05)  # the previous runtime's spinning workers
                meds[name].append(osw.time_runs(fn, n))
        return {name: statistics.median(v) for name, v in meds.items()}
    finally:
        for ks in sessions:
            ks.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True, help="portable build folder (libkiln.so)")
    ap.add_argument("--before", default=None, help="a second portable build to compare with (before a change)")
    ap.add_argument("--levels", default="avx2,avx512,baseline")
    ap.add_argument("--only", default=DEFAULT_ONLY, help="regular expression over 'op case dtype'")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--target-ms", type=float, default=15.0, help="time per runtime per round")
    ap.add_argument("--passes", type=int, default=1, help="sweeps over all the cases; each cell the median")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if osw.ort is None:
        print("isa_sweep: onnxruntime is not installed", file=sys.stderr)
        return 2

    levels = a.levels.split(",")
    builds = [("", a.build)] + ([("before ", a.before)] if a.before else [])
    tmp = tempfile.mkdtemp(prefix="isa_sweep_")
    libs = {}
    try:
        for bname, bdir in builds:
            for lv in levels:
                libs[bname + lv] = load_level(bdir, lv, (bname.strip() or "after") + "_" + lv, tmp)
    finally:
        os.environ.pop("KILN_CPU_ISA", None)

    sel = [c for c in osw.cases() if re.search(a.only, c.key)]
    rows = {c.key: {"key": c.key, "t": [], "note": ""} for c in sel}
    bad_keys = set()
    for p in range(a.passes):
        for case in sel:
            row = rows[case.key]
            try:
                t = measure(case, a, libs, row)
                if t:
                    row["t"].append(t)
                    print(f"pass {p + 1} {case.key:60s} " +
                          " ".join(f"{n}/ort {t[n] / t['ort']:5.2f}" for n in libs), flush=True)
            except Exception as e:  # noqa: BLE001
                row["note"] += f"{type(e).__name__}: {str(e).splitlines()[0][:120]}; "
            if row["note"] and case.key not in bad_keys:
                bad_keys.add(case.key)
                print(f"FAIL {case.key}: {row['note']}", flush=True)
    failed = len(bad_keys)
    passed = len(sel) - failed
    th = a.threads

    cols = [f"kiln {n} / ORT" for n in libs]
    have = set(libs)
    extra = []
    if {"avx2", "avx512"} <= have:
        extra.append(("avx2 / avx512", lambda t: t["avx2"] / t["avx512"]))
    if {"baseline", "avx2"} <= have:
        extra.append(("avx2 / baseline", lambda t: t["avx2"] / t["baseline"]))
    for lv in levels:
        if "before " + lv in have:
            extra.append((f"{lv} after / before", lambda t, lv=lv: t[lv] / t["before " + lv]))
    lines = []
    lines.append(f"# kiln's CPU levels against ONNX Runtime, {datetime.date.today().isoformat()}\n")
    lines.append(f"Machine: {cpu_name()}, {os.cpu_count()} cores, {platform.system()}; onnxruntime "
                 f"{osw.ort.__version__}; {th} thread(s); {a.passes} pass(es) over the cases, each case {a.rounds} "
                 f"rounds of ~{a.target_ms:g} ms per runtime, alternating; per pass the ratio of the medians of the "
                 "round medians, each cell the median over the passes (lower is faster for kiln).\n")
    lines.append("Command: `" + " ".join(["python3", "bench/isa_sweep.py"] + sys.argv[1:]) + "`\n")
    lines.append("| case | " + " | ".join(cols + [e[0] for e in extra]) + " | note |")
    lines.append("|" + "---|" * (len(cols) + len(extra) + 2))
    for r in rows.values():
        ts = r["t"]
        if not ts:
            lines.append(f"| {r['key']} | " + " | ".join(["n/a"] * (len(cols) + len(extra))) + f" | {r['note']} |")
            continue
        med = lambda f: statistics.median(f(t) for t in ts)  # noqa: E731
        vals = [f"{med(lambda t, n=n: t[n] / t['ort']):.2f}" for n in libs] + [f"{med(f):.2f}" for _, f in extra]
        lines.append(f"| {r['key']} | " + " | ".join(vals) + f" | {r['note']} |")
    lines.append("")
    lines.append(f"{passed} passed, {failed} failed, 0 skipped")
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
