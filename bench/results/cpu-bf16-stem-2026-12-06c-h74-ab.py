"""A/B of two kiln libraries at 1 thread, cpu:precision=bf16, thread CPU time; alternating rounds.
python3 ab.py ROUNDS RUNS base=LIB new=LIB model=PATH [model=PATH...]"""
import os, statistics, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
import numpy as np
from op_sweep import Kiln, KilnSession
import onnx
rounds, runs = int(sys.argv[1]), int(sys.argv[2])
libs = [a.split('=',1) for a in sys.argv[3:] if not a.startswith('model=')]
models = [a.split('=',1)[1] for a in sys.argv[3:] if a.startswith('model=')]
for path in models:
    m = onnx.load(path)
    inp = m.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    feeds = {inp.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    data = open(path, 'rb').read()
    sess = {}
    for name, lib in libs:
        k = Kiln(lib)
        s = KilnSession(k, data, 1, 'cpu:precision=bf16', feeds)
        outs = s.run_alloc()
        s.bind_outputs(s.run_alloc())
        sess.setdefault('_outs', {})[name] = outs
        for _ in range(5): s.run()
        sess[name] = s
    o = sess.pop('_outs'); names0 = [n for n, _ in libs]
    same = all(a.tobytes() == b.tobytes() for a, b in zip(o[names0[0]], o[names0[-1]]))
    print(os.path.basename(path), 'outputs bit-identical' if same else 'outputs DIFFER', flush=True)
    meds = {n: [] for n, _ in libs}
    for r in range(rounds):
        order = [n for n, _ in libs]
        if r % 2: order = order[::-1]
        for n in order:
            ts = []
            for _ in range(runs):
                t = time.thread_time(); sess[n].run(); ts.append((time.thread_time() - t) * 1e3)
            meds[n].append(statistics.median(ts))
    names = [n for n, _ in libs]
    print(os.path.basename(path), ' '.join(f"{n} med {statistics.median(meds[n]):.3f} min {min(meds[n]):.3f}" for n in names),
          f"ratio {statistics.median(meds[names[-1]])/statistics.median(meds[names[0]]):.3f}", flush=True)
