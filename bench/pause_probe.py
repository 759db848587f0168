#!/usr/bin/env python3
"""One runtime alone in this process, one op_sweep.py case, timed in rounds with a pause before each:
how a runtime's thread pool recovers from idling (a caller that runs a model now and then).

    python3 bench/pause_probe.py --runtime kiln|ort --case REGEX [--threads 2] [--pause 0.05]
                                 [--rounds 20] [--runs 100] [--pin] [--build build]

Each round: sleep --pause seconds, 2 untimed runs, --runs timed ones (wall clock); prints the median,
min and max of the rounds' medians. --pin puts the calling thread on core 0 and every other thread
of the process (the runtime's pool) on core 1, after the warm-up: on the 2-core box it showed that
kiln's slow rounds after a pause came from its pool's worker waking on the caller's core
(bench/results/op-sweep-cpu-2threads-2026-12-06c-h73.md). --pause 0 with --rounds 1 --runs 2000 is
a plain loop.
"""
import argparse
import os
import re
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import op_sweep  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runtime", choices=["kiln", "ort"], required=True)
    ap.add_argument("--case", required=True, help="regular expression over op_sweep's 'op case dtype'")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pause", type=float, default=0.05)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--pin", action="store_true")
    ap.add_argument("--build", default=os.path.join(op_sweep.ROOT, "build"))
    a = ap.parse_args()
    found = [c for c in op_sweep.cases() if re.search(a.case, c.key)]
    if not found:
        print(f"pause_probe: no case matches {a.case!r}", file=sys.stderr)
        return 2
    case = found[0]
    model = case.model()
    if a.runtime == "kiln":
        k = op_sweep.Kiln(os.path.join(a.build, "libkiln.so"))
        ks = op_sweep.KilnSession(k, model, a.threads, "cpu", case.inputs)
        ks.bind_outputs(ks.run_alloc())
        fn = ks.run
    else:
        _, fn = op_sweep.ort_session(model, a.threads, case.inputs)
    for _ in range(50):
        fn()
    if a.pin:
        me = threading.get_native_id()
        for tid in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(tid), {0} if int(tid) == me else {1})
    meds = []
    for _ in range(a.rounds):
        time.sleep(a.pause)
        meds.append(op_sweep.time_runs(fn, a.runs, warm=2))
    print(f"{a.runtime} {case.key} threads {a.threads} pause {a.pause} s{' pinned' if a.pin else ''}: median of "
          f"{a.rounds} rounds' medians {statistics.median(meds):.4f} ms, min {min(meds):.4f}, max {max(meds):.4f}; "
          f"{sum(m > 2 * min(meds) for m in meds)} rounds over twice the fastest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
