"""kiln, a second kiln build, ONNX Runtime and OpenVINO (f32) at 1 thread, timed in CPU time.

For a shared machine whose other cores' load makes wall-clock latency swing 2x between runs
(other sessions' builds): each runtime runs its model on the calling thread (kiln and ONNX
Runtime with one intra-op thread), timed with the thread's CPU clock, so time the process spends
descheduled does not count (cache and memory contention still does). OpenVINO runs inference on
a worker thread of its own: it is timed with the process's CPU clock (all its threads; the other
runtimes are idle then). Alternating rounds; per runtime the median of each round's runs, then the
minimum and the median over rounds.

    python3 bench/cpu_time_bench.py --build BUILD [--kiln-base BUILD] [--model NAME=PATH ...]
                                    [--conv3x3] [--rounds 7] [--runs 20] [--out FILE]

--conv3x3 adds bench/conv3x3_sweep.py's one-node 3x3 convolutions. Not a replacement for
op_sweep.py / cpu_models.py on a quiet machine (wall time, several threads): the 1-thread
ratios they give should agree.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import op_sweep  # noqa: E402
from op_sweep import Kiln, KilnSession  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--kiln-base", default=None)
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--conv3x3", action="store_true")
    ap.add_argument("--only", default=None, help="substring of the case names")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import onnxruntime as ort
    try:
        import openvino as ov
    except ImportError:
        ov = None
    cases = []
    for spec in a.model:
        name, path = spec.split("=", 1)
        import cpu_models
        cases.append((name, open(path, "rb").read(), cpu_models.feeds_for(path)))
    if a.conv3x3:
        import conv3x3_sweep
        for c in conv3x3_sweep.cases():
            cases.append((c.label, c.model(), c.inputs))
    if a.only:
        cases = [c for c in cases if a.only in c[0]]
    k = Kiln(os.path.join(a.build, "libkiln.so"))
    kb = Kiln(os.path.join(a.kiln_base, "libkiln.so")) if a.kiln_base else None
    lines = ["| case | kiln ms | kiln_base ms | ORT ms | OpenVINO f32 ms | kiln/best peer | kiln/kiln_base | "
             "min over rounds: kiln, ORT, OV |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, model, feeds in cases:
        runners = {}
        ks = KilnSession(k, model, 1, "cpu", feeds)
        ks.bind_outputs(ks.run_alloc())
        runners["kiln"] = (ks.run, time.thread_time)
        if kb:
            kbs = KilnSession(kb, model, 1, "cpu", feeds)
            kbs.bind_outputs(kbs.run_alloc())
            runners["kiln_base"] = (kbs.run, time.thread_time)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        runners["ort"] = (lambda s=sess: s.run(None, feeds), time.thread_time)
        if ov is not None:
            core = ov.Core()
            cfg = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
                   "INFERENCE_PRECISION_HINT": "f32"}
            req = core.compile_model(core.read_model(model), "CPU", cfg).create_infer_request()
            runners["ov"] = (lambda r=req: r.infer(feeds), time.process_time)
        for fn, _ in runners.values():
            for _ in range(3):
                fn()
        meds = {n: [] for n in runners}
        for _ in range(a.rounds):
            for n, (fn, clock) in runners.items():
                ts = []
                for _ in range(a.runs):
                    t = clock()
                    fn()
                    ts.append((clock() - t) * 1e3)
                meds[n].append(statistics.median(ts))
        med = {n: statistics.median(v) for n, v in meds.items()}
        mn = {n: min(v) for n, v in meds.items()}
        peers = [med[n] for n in ("ort", "ov") if n in med]
        best = min(peers)
        line = (f"| {name} | {med['kiln']:.3f} | {med.get('kiln_base', float('nan')):.3f} | {med['ort']:.3f} | "
                f"{med.get('ov', float('nan')):.3f} | {med['kiln'] / best:.2f} | "
                f"{med['kiln'] / med['kiln_base'] if 'kiln_base' in med else float('nan'):.2f} | "
                f"{mn['kiln']:.3f}, {mn['ort']:.3f}, {mn.get('ov', float('nan')):.3f} |")
        print(line, flush=True)
        lines.append(line)
        ks.close()
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
