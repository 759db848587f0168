"""8-bit integer convolutions, kiln against ONNX Runtime, side by side at a given thread count.

One-node ConvInteger and QLinearConv models over the classes of MobileNet-style int8 networks
(depthwise 3x3 at stride 1 and 2 on 112/56/28/14 planes with 32-512 channels, 1x1 expand and
project, dense 3x3, a 3x3 stem 3 -> 16 at stride 2), u8 and s8 activations. Every kiln build named
by --build (its python folder) runs in its own worker process; ORT runs in this one. Rounds
alternate the engines; each round times a case by process CPU time over repeated runs (mean of a
round), and the table gives the minimum over rounds. Outputs are checked equal to ORT's exactly.

  flock /tmp/kiln-bench.lock python3 bench/qconv_sweep.py --build build-h48/python \
      --build /tmp/h48-base/build/python --threads 1 --rounds 5
"""
import argparse
import json
import os

# numpy's BLAS threads spin after its calls and count in the process CPU time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
import subprocess
import sys
import tempfile
import time

import numpy as np

WORKER = r"""
import json, os, sys, time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np
sys.path.insert(0, sys.argv[1])
import kiln
threads = int(sys.argv[2])
sessions = {}
for line in sys.stdin:
    req = json.loads(line)
    path, feeds, secs, out = req["model"], req["feeds"], req["secs"], req.get("out")
    if path not in sessions:
        so = kiln.SessionOptions()
        so.intra_op_num_threads = threads
        sessions[path] = kiln.InferenceSession(path, so)
    s = sessions[path]
    f = {k: np.load(v) for k, v in feeds.items()}
    y = s.run(None, f)[0]
    if out:
        np.save(out, y)
    n, t0 = 0, time.process_time()
    while True:
        s.run(None, f)
        n += 1
        t = time.process_time() - t0
        if t >= secs and n >= 3:
            break
    print(json.dumps({"ms": 1e3 * t / n}), flush=True)
"""

# (name, C, H, W, M, k, stride, group)
SHAPES = [
    ("dw3x3 s1 96ch 56", 96, 56, 56, 96, 3, 1, 96),
    ("dw3x3 s2 144ch 56", 144, 56, 56, 144, 3, 2, 144),
    ("dense3x3 64->64 56", 64, 56, 56, 64, 3, 1, 1),
    ("1x1 96->24 56", 96, 56, 56, 24, 1, 1, 1),
    ("dw3x3 s1 32ch 112", 32, 112, 112, 32, 3, 1, 32),
    ("dw3x3 s2 96ch 112", 96, 112, 112, 96, 3, 2, 96),
    ("dw3x3 s1 144ch 56", 144, 56, 56, 144, 3, 1, 144),
    ("dw3x3 s1 192ch 28", 192, 28, 28, 192, 3, 1, 192),
    ("dw3x3 s2 192ch 28", 192, 28, 28, 192, 3, 2, 192),
    ("dw3x3 s1 384ch 14", 384, 14, 14, 384, 3, 1, 384),
    ("dw3x3 s1 512ch 14", 512, 14, 14, 512, 3, 1, 512),
    ("dw3x3 s2 512ch 14", 512, 14, 14, 512, 3, 2, 512),
    ("1x1 expand 24->144 56", 24, 56, 56, 144, 1, 1, 1),
    ("1x1 expand 32->192 28", 32, 28, 28, 192, 1, 1, 1),
    ("1x1 project 144->24 56", 144, 56, 56, 24, 1, 1, 1),
    ("1x1 project 384->64 14", 384, 14, 14, 64, 1, 1, 1),
    ("stem3x3 3->16 s2 224", 3, 224, 224, 16, 3, 2, 1),
]
# (tag, op, x dtype, w dtype)
VARIANTS = [("ConvInteger u8/u8", "ConvInteger", np.uint8, np.uint8),
            ("QLinearConv u8/s8", "QLinearConv", np.uint8, np.int8),
            ("QLinearConv s8/s8", "QLinearConv", np.int8, np.int8)]


def make_model(path, op, xt, wt, C, H, W, M, k, stride, group, rng):
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    tp = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
    # u8 x s8: 7-bit weights, as ORT asks on AVX2 without VNNI (its vpmaddubsw saturates pair sums
    # of full-range weights, and its outputs are then not the exact convolution)
    lo, hi = (0, 256) if wt == np.uint8 else (-64, 64) if xt == np.uint8 else (-128, 128)
    w = rng.integers(lo, hi, (M, C // group, k, k)).astype(wt)
    pads = [k // 2] * 4
    attrs = dict(kernel_shape=[k, k], strides=[stride, stride], pads=pads, group=group)
    xz = np.array(128 if xt == np.uint8 else 3, xt)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(xz, "xz")]
    if op == "ConvInteger":
        wz = np.array(rng.integers(lo, hi), wt)
        inits.append(numpy_helper.from_array(wz, "wz"))
        node = helper.make_node(op, ["x", "w", "xz", "wz"], ["y"], **attrs)
        yt = TensorProto.INT32
    else:
        inits += [numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
                  numpy_helper.from_array(rng.uniform(0.002, 0.01, M).astype(np.float32), "ws"),
                  numpy_helper.from_array(np.zeros(M, wt), "wz"),
                  numpy_helper.from_array(np.array(0.05 * k, np.float32), "ys"),
                  numpy_helper.from_array(np.array(xz, xt), "yz"),
                  numpy_helper.from_array(rng.integers(-3000, 3000, M).astype(np.int32), "b")]
        node = helper.make_node(op, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], **attrs)
        yt = tp[xt]
    g = helper.make_graph([node], "qconv", [helper.make_tensor_value_info("x", tp[xt], [1, C, H, W])],
                          [helper.make_tensor_value_info("y", yt, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)
    xlo, xhi = (0, 256) if xt == np.uint8 else (-128, 128)
    return rng.integers(xlo, xhi, (1, C, H, W)).astype(xt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="append", required=True, help="a kiln build's python folder (repeatable)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--secs", type=float, default=0.15, help="CPU seconds per case per round")
    ap.add_argument("--only", default="", help="substring of the case names to keep")
    ap.add_argument("--variants", default="0,1,2", help="indexes into VARIANTS")
    args = ap.parse_args()
    import onnxruntime as ort
    tmp = tempfile.mkdtemp(prefix="qconv_sweep")
    rng = np.random.default_rng(0)
    cases = []
    for vi in [int(v) for v in args.variants.split(",")]:
        tag, op, xt, wt = VARIANTS[vi]
        for name, *shape in SHAPES:
            full = f"{tag:18s} {name}"
            if args.only and args.only not in full:
                continue
            i = len(cases)
            path = os.path.join(tmp, f"m{i}.onnx")
            x = make_model(path, op, xt, wt, *shape, rng)
            xp = os.path.join(tmp, f"x{i}.npy")
            np.save(xp, x)
            cases.append({"name": full, "model": path, "x": x, "xp": xp})
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    live = []
    for c in cases:
        try:
            c["ort"] = ort.InferenceSession(c["model"], so, providers=["CPUExecutionProvider"])
            c["ref"] = c["ort"].run(None, {"x": c["x"]})[0]
            live.append(c)
        except Exception as e:  # a variant this ORT build does not run
            print(f"skip {c['name']}: ORT: {str(e).splitlines()[0][:100]}", file=sys.stderr)
    cases = live
    workers = []
    for b in args.build:
        p = subprocess.Popen([sys.executable, "-c", WORKER, os.path.abspath(b), str(args.threads)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        workers.append(p)

    def ask(p, c, out=None):
        p.stdin.write(json.dumps({"model": c["model"], "feeds": {"x": c["xp"]}, "secs": args.secs, "out": out}) + "\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())["ms"]

    best = {(i, e): float("inf") for i in range(len(cases)) for e in range(len(workers) + 1)}
    exact = {}
    for r in range(args.rounds):
        for i, c in enumerate(cases):
            feeds = {"x": c["x"]}
            n, t0 = 0, time.process_time()
            while True:
                c["ort"].run(None, feeds)
                n += 1
                t = time.process_time() - t0
                if t >= args.secs and n >= 3:
                    break
            best[i, 0] = min(best[i, 0], 1e3 * t / n)
            for wi, p in enumerate(workers):
                out = os.path.join(tmp, f"y{i}_{wi}.npy") if r == 0 else None
                best[i, wi + 1] = min(best[i, wi + 1], ask(p, c, out))
                if out:
                    y = np.load(out)
                    if y.dtype != c["ref"].dtype or y.shape != c["ref"].shape:
                        exact[i, wi] = "NO (type/shape)"
                    else:
                        d = np.abs(y.astype(np.int64) - c["ref"].astype(np.int64))
                        n = int(np.count_nonzero(d))
                        exact[i, wi] = "yes" if n == 0 else f"{n} differ, max {int(d.max())}"
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    for p in workers:
        p.stdin.close()
        p.wait()
    heads = " | ".join(f"kiln[{k}] ms | kiln[{k}]/ORT | exact[{k}]" for k in range(len(workers)))
    print(f"builds: " + ", ".join(f"[{k}] {b}" for k, b in enumerate(args.build)))
    print(f"threads {args.threads}, process CPU time, min over {args.rounds} rounds of >= {args.secs}s each\n")
    print(f"| case | ORT ms | {heads} |")
    print("| --- | ---: |" + " ---: | ---: | :---: |" * len(workers))
    for i, c in enumerate(cases):
        cols = " | ".join(f"{best[i, k + 1]:.3f} | {best[i, k + 1] / best[i, 0]:.2f} | {exact[i, k]}"
                          for k in range(len(workers)))
        print(f"| {c['name']} | {best[i, 0]:.3f} | {cols} |")


if __name__ == "__main__":
    main()
