"""One optimisation pass, on and off, beside ONNX Runtime: alternating rounds in one process.

    python3 bench/pass_ab.py --python build/python --model M.onnx --pass fuse_qdq_conv \
        [--shape 1,3,48,192] [--rounds 5] [--seconds 0.5] [--clock thread|wall]

kiln (every pass), kiln without the pass and ONNX Runtime (its default optimisations), 1 thread
each, each round timing every session for --seconds; prints the median of the rounds' medians,
with/without and kiln/ORT, and each one's largest difference from ONNX Runtime without
optimisations (the model's own float graph). Timing only, no assertions. Inputs: seeded random
(float normal, integers 0/1); --shape sets the first input's shape where it is not static."""
import argparse
import statistics
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="folder holding kiln's Python package (build/python)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--pass", dest="pass_name", required=True)
    ap.add_argument("--shape", help="the first input's shape, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--clock", choices=("thread", "wall"), default="thread")
    a = ap.parse_args()
    sys.path.insert(0, a.python)
    import kiln
    import onnxruntime as ort

    def kiln_session(disabled):
        o = kiln.SessionOptions()
        o.intra_op_num_threads = 1
        return kiln.InferenceSession(a.model, o, providers=["CPUExecutionProvider"], disabled_optimizers=disabled)

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    runs = {"kiln": kiln_session([]), "kiln_without": kiln_session([a.pass_name]),
            "ort": ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])}
    rng = np.random.default_rng(0)
    feeds = {}
    types = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(uint8)": np.uint8}
    for k, i in enumerate(runs["ort"].get_inputs()):
        shape = ([int(x) for x in a.shape.split(",")] if a.shape and k == 0
                 else [d if isinstance(d, int) else 1 for d in i.shape])
        dt = types[i.type]
        v = rng.standard_normal(shape) if dt == np.float32 else rng.integers(0, 2, shape)
        feeds[i.name] = v.astype(dt)
    ref = ort.InferenceSession(a.model, plain, providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, s in runs.items():
        out = s.run(None, feeds)
        err = max(float(np.max(np.abs(x.astype(np.float64) - r))) for x, r in zip(out, ref))
        print(f"{name}: largest difference from the unoptimised float graph {err:.3g}")
    clock = time.thread_time if a.clock == "thread" else time.perf_counter
    med = {k: [] for k in runs}
    for _ in range(a.rounds):
        for name, s in runs.items():
            ts, end = [], time.perf_counter() + a.seconds
            while time.perf_counter() < end or len(ts) < 3:
                t = clock()
                s.run(None, feeds)
                ts.append(clock() - t)
            med[name].append(statistics.median(ts))
    m = {k: statistics.median(v) * 1e3 for k, v in med.items()}
    print(a.model, " ".join(f"{k} {v:.3f} ms" for k, v in m.items()),
          f"with/without {m['kiln'] / m['kiln_without']:.3f} kiln/ort {m['kiln'] / m['ort']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
