"""Data-movement operators on shapes beyond op_sweep's (tails, narrow rows, single-element gathers,
4 KiB-strided transposes, short pads): kiln builds against ONNX Runtime and OpenVINO in one process,
alternating rounds, the minimum per-run time of each (1 thread: CPU time; more: wall time).
A kiln build's outputs are compared with ONNX Runtime's (MISMATCH lines).

usage: python3 bench/datamove_probe.py REGEX THREADS ROUNDS LIB [LIB ...] [ort] [ov]
  LIB: a libkiln.so path; ort / ov: time ONNX Runtime / OpenVINO too; k/peer: kiln over the faster peer
"""
import sys, re, time, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import op_sweep as S
from op_sweep import Case, rnd
R = np.random.default_rng(7)
i64, i32 = np.int64, np.int32
def I(lo, hi, shape, dt=i64): return R.integers(lo, hi, shape).astype(dt)
def cases():
    c = []
    T = lambda lab, shp, perm, dt=np.float32: c.append(Case("Transpose", lab, {"x": rnd(*shp, dtype=dt)}, attrs=dict(perm=perm)))
    T("12x197x197 last two", (12, 197, 197), [0, 2, 1])
    T("12x197x64 perm 102", (197, 12, 64), [1, 0, 2])
    T("1x12x197x64 perm 0213", (1, 197, 12, 64), [0, 2, 1, 3])
    T("1x12x128x64 perm 0231 f32", (1, 12, 128, 64), [0, 2, 3, 1])
    T("1024x1000 2D", (1024, 1000), [1, 0])
    T("4096x4096 2D", (4096, 4096), [1, 0])
    T("1000x1024 2D", (1000, 1024), [1, 0])
    T("4096x64 2D", (4096, 64), [1, 0])
    T("64x4096 2D", (64, 4096), [1, 0])
    T("3072x768 2D", (3072, 768), [1, 0])
    T("768x3072 2D", (768, 3072), [1, 0])
    T("4x2048x1000 last two", (4, 2048, 1000), [0, 2, 1])
    T("1x12x64x512 last two", (1, 12, 64, 512), [0, 1, 3, 2])
    T("64x3x3x256 perm 3201", (256, 64, 3, 3), [3, 2, 0, 1])
    T("shuffle 1x2x58x28x28 01234->02134", (1, 2, 58, 28, 28), [0, 2, 1, 3, 4])
    T("1x56x56x64 i64 NCHW", (1, 56, 56, 64), [0, 3, 1, 2], i64)
    T("8x512x512 f16 last two", (8, 512, 512), [0, 2, 1], np.float16)
    T("8x512x512 u8 last two", (8, 512, 512), [0, 2, 1], np.uint8)
    T("1x32x32x32x32 perm 04123", (1, 32, 32, 32, 32), [0, 4, 1, 2, 3])
    T("2x3x4x5x6x7 reverse", (2, 3, 4, 5, 6, 7), [5, 4, 3, 2, 1, 0])
    G = lambda lab, x, i, ax, dt=np.float32: c.append(Case("Gather", lab, {"i": i}, {"t": x}, dict(axis=ax), input_order=["t", "i"], opset=13))
    G("30522x768 by 1x512 i32", rnd(30522, 768), I(0, 30522, (1, 512), i32), 0)
    G("50257x64 by 8x128 small rows", rnd(50257, 64), I(0, 50257, (8, 128)), 0)
    G("1x128x768 axis 1 by 1 (CLS)", rnd(1, 128, 768), np.array(0, i64), 1)
    G("16x512x768 axis 1 by 4", rnd(16, 512, 768), I(-512, 512, (4,)), 1)
    G("64x4096 axis 1 columns by 1000", rnd(64, 4096), I(-4096, 4096, (1000,)), 1)
    G("1x3x224x224 axis 1 by [2,1,0]", rnd(1, 3, 224, 224), np.array([2, 1, 0], i64), 1)
    G("128x1024 axis -1 by 128x1 (pick)", rnd(128, 1024), I(0, 1024, (128, 1)), -1)
    G("1000x16 u8 by 4096", rnd(1000, 16, dtype=np.uint8), I(0, 1000, (4096,)), 0)
    GE = lambda lab, x, i, ax: c.append(Case("GatherElements", lab, {"x": x}, {"i": i}, attrs=dict(axis=ax), opset=13))
    GE("4096x64 axis 0", rnd(4096, 64), I(0, 4096, (4096, 64)), 0)
    GE("64x4096 axis 1 int32", rnd(64, 4096), I(0, 4096, (64, 4096), i32), 1)
    GE("32x128x128 axis 2 (rows of 128)", rnd(32, 128, 128), I(-128, 128, (32, 128, 128)), 2)
    GE("1x20000x4 axis 1 (boxes) by 1x1000x4", rnd(1, 20000, 4), I(0, 20000, (1, 1000, 4)), 1)
    GE("8x256x256 axis 1", rnd(8, 256, 256), I(0, 256, (8, 256, 256)), 1)
    GE("1000x33 axis 1 by 1000x1 (pick)", rnd(1000, 33), I(0, 33, (1000, 1)), 1)
    ND = lambda lab, x, i, bd=0: c.append(Case("GatherND", lab, {"x": x}, {"i": i}, attrs=dict(batch_dims=bd), opset=13))
    ND("256x256 points by 4096x2", rnd(256, 256), I(0, 256, (4096, 2)))
    ND("8x512x768 by 8x64x1 bd1", rnd(8, 512, 768), I(0, 512, (8, 64, 1)), 1)
    ND("100x100x32 by 2000x2", rnd(100, 100, 32), I(0, 100, (2000, 2)))
    ND("4x64x64 by 4x1000x2 bd1", rnd(4, 64, 64), I(0, 64, (4, 1000, 2)), 1)
    SL = lambda lab, x, st, en, ax, sp=None: c.append(Case("Slice", lab, {"x": x}, dict(st=np.array(st, i64), en=np.array(en, i64), ax=np.array(ax, i64), **({"sp": np.array(sp, i64)} if sp else {}))))
    SL("1x128x2304 last axis thirds", rnd(1, 128, 2304), [768], [1536], [2])
    SL("1x64x112x112 step 2 HW", rnd(1, 64, 112, 112), [0, 0], [112, 112], [2, 3], [2, 2])
    SL("1x3x224x224 crop 200", rnd(1, 3, 224, 224), [12, 12], [212, 212], [2, 3])
    SL("1x256x56x56 reverse W", rnd(1, 256, 56, 56), [-1], [-100000], [3], [-1])
    SL("1x512x768 first token", rnd(1, 512, 768), [0], [1], [1])
    SL("64x4096 last axis 1..4095", rnd(64, 4096), [1], [4095], [1])
    SL("1x256x56x56 channels step 2", rnd(1, 256, 56, 56), [0], [256], [1], [2])
    SL("32x1024 last 3 cols", rnd(32768, 7), [0], [3], [1])
    P = lambda lab, x, p, mode="constant": c.append(Case("Pad", lab, {"x": x}, {"p": np.array(p, i64)}, attrs=dict(mode=mode)))
    P("1x64x56x56 reflect 1 HW", rnd(1, 64, 56, 56), [0, 0, 1, 1, 0, 0, 1, 1], "reflect")
    P("1x32x128x128 reflect 3 HW", rnd(1, 32, 128, 128), [0, 0, 3, 3, 0, 0, 3, 3], "reflect")
    P("1x64x56x56 edge 2 HW", rnd(1, 64, 56, 56), [0, 0, 2, 2, 0, 0, 2, 2], "edge")
    P("1x56x56x64 NHWC +1", rnd(1, 56, 56, 64), [0, 1, 1, 0, 0, 1, 1, 0])
    P("1x3x224x224 +3", rnd(1, 3, 224, 224), [0, 0, 3, 3, 0, 0, 3, 3])
    P("1x128x768 last axis +256", rnd(1, 128, 768), [0, 0, 0, 0, 0, 256])
    P("1x64x56x56 wrap 1 HW", rnd(1, 64, 56, 56), [0, 0, 1, 1, 0, 0, 1, 1], "wrap")
    P("1x64x56x56 crop -1 HW", rnd(1, 64, 56, 56), [0, 0, -1, -1, 0, 0, -1, -1])
    c.append(Case("Concat", "3x 1x128x256 last axis", {"a": rnd(1, 128, 256), "b": rnd(1, 128, 256), "c": rnd(1, 128, 256)}, attrs=dict(axis=2)))
    c.append(Case("Concat", "8x 1x32x56x56 axis 1", {f"a{k}": rnd(1, 32, 56, 56) for k in range(8)}, attrs=dict(axis=1)))
    c.append(Case("Concat", "2x 4096x3 axis 1", {"a": rnd(4096, 3), "b": rnd(4096, 5)}, attrs=dict(axis=1)))
    c.append(Case("Split", "1x128x2304 last axis in 3", {"x": rnd(1, 128, 2304)}, attrs=dict(axis=2, num_outputs=3), n_out=3, opset=18))
    c.append(Case("Split", "1x8x64x64 axis 3 in 2", {"x": rnd(1, 8, 64, 64)}, attrs=dict(axis=3, num_outputs=2), n_out=2, opset=18))
    c.append(Case("Expand", "1x1x768 -> 1x512x768", {"x": rnd(1, 1, 768)}, {"s": np.array([1, 512, 768], i64)}))
    c.append(Case("Expand", "512x1 -> 512x512", {"x": rnd(512, 1)}, {"s": np.array([512, 512], i64)}))
    c.append(Case("Expand", "1x1x1x128 -> 1x12x128x128", {"x": rnd(1, 1, 1, 128)}, {"s": np.array([1, 12, 128, 128], i64)}))
    c.append(Case("Tile", "1x128x768 x(4,1,1)", {"x": rnd(1, 128, 768)}, {"r": np.array([4, 1, 1], i64)}))
    c.append(Case("Tile", "64x7 x(1,100)", {"x": rnd(64, 7)}, {"r": np.array([1, 100], i64)}))
    c.append(Case("DepthToSpace", "1x256x56x56 b2", {"x": rnd(1, 256, 56, 56)}, attrs=dict(blocksize=2)))
    c.append(Case("SpaceToDepth", "1x3x224x224 b4", {"x": rnd(1, 3, 224, 224)}, attrs=dict(blocksize=4)))
    c.append(Case("ScatterElements", "64x4096 axis 1", {"x": rnd(64, 4096)}, {"i": np.tile(np.arange(0, 4096, 4, dtype=i64), (64, 1)), "u": rnd(64, 1024)}, attrs=dict(axis=1), opset=16))
    c.append(Case("ScatterND", "1x512x768 by 1x128x2", {"x": rnd(1, 512, 768)}, {"i": np.stack([np.zeros(128, i64), R.permutation(512)[:128]], -1)[None], "u": rnd(1, 128, 768)}, opset=16))
    c.append(Case("OneHot", "4096 depth 1000", {"i": I(0, 1000, (4096,))}, {"d": np.array(1000, i64), "v": np.array([0, 1], np.float32)}, attrs=dict(axis=-1), opset=11))
    return c
def label(L):
    """ort, ov, or a kiln library's last two folders (/tmp/x-base/build/libkiln.so: x-base/build)"""
    return L if L in ("ort", "ov") else "/".join(os.path.dirname(os.path.abspath(L)).split("/")[-2:])


pat, th, rounds, libs = re.compile(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
clock = time.process_time if th == 1 else time.perf_counter
KEEP = []
def ov_runner(m, th, feeds):
    r = S.openvino_runner(m, th, feeds)
    return r[1] if isinstance(r, tuple) else r
for c in cases():
    if not pat.search(c.key): continue
    m = c.model(); feeds = dict(c.inputs)
    fns = {}
    try:
        for L in libs:
            if L == "ort":
                ref, fns[L] = S.ort_session(m, th, feeds)
            elif L == "ov":
                fns[L] = ov_runner(m, th, feeds)
            else:
                k = S.Kiln(L); s = S.KilnSession(k, m, th, "cpu", feeds); outs = s.run_alloc(); s.bind_outputs(outs)
                fns[L] = s.run; KEEP.append((k, s, outs)); s.run()
                if "ort" in libs:
                    r0 = S.ort_session(m, 1, feeds)[0]
                    for a, b in zip(outs, r0):
                        if not np.array_equal(np.asarray(a), np.asarray(b)): print("MISMATCH", c.key, L)
    except Exception as e:
        print(f"{c.key:55s} ERROR {str(e)[:150]}", flush=True); continue
    best = {L: 1e9 for L in libs}
    for r in range(rounds):
        for L in libs:
            fn = fns[L]; fn()
            t0 = clock(); fn(); dt = clock() - t0
            n = max(3, int(0.1 / max(dt, 1e-6)))
            t0 = clock()
            for _ in range(n): fn()
            best[L] = min(best[L], (clock() - t0) / n)
    peers = [best[L] for L in libs if L in ("ort", "ov")]
    kl = [L for L in libs if L not in ("ort", "ov")]
    print(f"{c.key:55s} t{th} " + " ".join(f"{label(L)}={best[L]*1e3:.4f}" for L in libs)
          + ("  k/peer " + " ".join(f"{best[L]/min(peers):.2f}" for L in kl) if peers else ""), flush=True)
