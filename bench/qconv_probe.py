"""A/B probe for a few op_sweep cases: kiln builds (and optionally ONNX Runtime) alternating rounds
in one process; per runtime the min and the median over rounds of the round's mean run time (ms),
CPU time of the calling thread at 1 thread, wall time at more (a 0.15 s pause before each round
there, so that the previous runtime's spinning workers are asleep). Outputs of the kiln builds are
compared with the first build's (MISMATCH lines).

usage: python3 bench/qconv_probe.py REGEX THREADS ROUNDS LIB [LIB ...] [ort]
  REGEX over op_sweep's 'op case dtype' keys; LIB: a libkiln.so path; ort: time ONNX Runtime too
"""
import os, re, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import op_sweep as S

pat, th, rounds, libs = re.compile(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
clock = time.thread_time if th == 1 else time.perf_counter
KEEP = []
for c in S.cases():
    if not pat.search(c.key):
        continue
    m = c.model(); feeds = dict(c.inputs); fns = {}; outs0 = None
    for L in libs:
        if L == "ort":
            fns[L] = S.ort_session(m, th, feeds)[1]
            continue
        k = S.Kiln(L); s = S.KilnSession(k, m, th, "cpu", feeds); outs = s.run_alloc(); s.bind_outputs(outs)
        fns[L] = s.run; KEEP.append((k, s, outs))
        if outs0 is None:
            outs0 = outs
        elif not all(np.array_equal(a, b) for a, b in zip(outs, outs0)):
            print("MISMATCH", c.key, L)
    per = {L: [] for L in libs}
    for r in range(rounds):
        for L in libs:
            fn = fns[L]
            if th > 1:
                time.sleep(0.15)
            for _ in range(20):
                fn()
            n = 200
            t0 = clock()
            for _ in range(n):
                fn()
            per[L].append((clock() - t0) / n * 1e3)
    print(f"{c.key:60s} t{th} " + "  ".join(f"{i}:min {min(per[L]):.4f} med {statistics.median(per[L]):.4f}"
                                            for i, L in enumerate(libs)), flush=True)
