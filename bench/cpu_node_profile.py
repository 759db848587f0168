#!/usr/bin/env python3
"""Where kiln, ONNX Runtime and OpenVINO spend a model's CPU time, per output shape (each runtime's own profiler).

    python3 bench/cpu_node_profile.py MODEL THREADS KILN_BINARY

kiln: `kiln bench --threads T` under KILN_PROFILE, each node's median over the timed runs; ONNX
Runtime: enable_profiling over 60 runs after 10, each node's median; OpenVINO (when it imports;
fp32 forced, one stream of T threads): its performance counters over 60 runs after 10, each
node's median, its layers named by output shape through the compiled model. Nodes are summed per first
output shape (the two runtimes fuse differently: a shape's layers compare where node names do not),
largest first. Profilers add their own cost (ONNX Runtime's p50 here is under its profiler): read
the ratios per shape, not the totals, as a benchmark.
"""
import collections
import json
import os
import statistics
import subprocess
import sys
import time

if len(sys.argv) != 4:
    raise SystemExit(__doc__)
model, threads, kiln = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def kiln_prof():
    import tempfile
    p = os.path.join(tempfile.mkdtemp(), 'kiln_profile.json')
    env = dict(os.environ, KILN_PROFILE=p)
    import onnx
    dims = sorted({d.dim_param for i in onnx.load(model, load_external_data=False).graph.input
                   for d in i.type.tensor_type.shape.dim if d.dim_param})
    cmd = [kiln, 'bench', model, '--threads', str(threads), '--duration', '2', '--warmup', '10']
    for d in dims:  # symbolic dimensions at 1, as the ONNX Runtime feeds below
        cmd += ['--dim', f'{d}=1']
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f'kiln bench failed: {r.stderr.strip()}')
    out = r.stdout
    p50 = [l for l in out.splitlines() if 'p50' in l][:1]
    txt = open(p).read().rstrip().rstrip(']').rstrip().rstrip(',') + ']'
    per = collections.defaultdict(list); sig = {}
    for e in json.loads(txt):
        a = e.get('args', {})
        if e.get('ph') == 'X' and 'op' in a and not a.get('first'):
            per[e['name']].append(e['dur'] / 1000.0)
            sig[e['name']] = (a['outputs'][0] if a.get('outputs') else '?', a['op'].split('.')[-1])
    return {k: (statistics.median(v), sig[k]) for k, v in per.items()}, p50
def random_feeds(specs):
    """Inputs for (name, shape with symbolic dims at 1, float or not): random floats, integer ones."""
    import numpy as np
    return {n: np.random.rand(*shp).astype(np.float32) if real else np.ones(shp, np.int64) for n, shp, real in specs}
def timed_runs(run, after_each=None):
    """10 untimed runs, then 60 timed ones (after_each() after each, untimed): their median in ms."""
    for _ in range(10): run()
    t = []
    for _ in range(60):
        t0 = time.perf_counter(); run(); t.append(time.perf_counter() - t0)
        if after_each: after_each()
    return statistics.median(t) * 1000
def ort_prof():
    import onnxruntime as ort
    so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.enable_profiling = True
    import tempfile
    so.profile_file_prefix = os.path.join(tempfile.mkdtemp(), 'ort_profile')
    s = ort.InferenceSession(model, so, providers=['CPUExecutionProvider'])
    feeds = random_feeds([(i.name, [d if isinstance(d, int) else 1 for d in i.shape], 'float' in i.type)
                          for i in s.get_inputs()])
    p50 = timed_runs(lambda: s.run(None, feeds))
    f = s.end_profiling()
    per = collections.defaultdict(list); sig = {}
    for e in json.load(open(f)):
        if e.get('cat') == 'Node' and e['name'].endswith('_kernel_time'):
            a = e['args']; o = a.get('output_type_shape') or [{}]
            shp = list(o[0].values())[0] if o and o[0] else '?'
            per[e['name']].append(e['dur'] / 1000.0); sig[e['name']] = ('float' + str(shp).replace(' ', ''), a.get('op_name'))
    return {k: (statistics.median(v[10:] or v), sig[k]) for k, v in per.items()}, p50
def ov_prof():
    try:
        import openvino as ov
    except ImportError:
        return None, None
    core = ov.Core()
    m = core.read_model(model)
    shapes = {i.get_any_name(): [d.get_length() if d.is_static else 1 for d in i.get_partial_shape()] for i in m.inputs}
    m.reshape(shapes)
    c = core.compile_model(m, 'CPU', {'PERF_COUNT': 'YES', 'INFERENCE_PRECISION_HINT': 'f32', 'NUM_STREAMS': '1',
                                      'INFERENCE_NUM_THREADS': str(threads)})
    out_shape = {}
    for op in c.get_runtime_model().get_ops():
        if op.get_output_size():
            out_shape[op.get_friendly_name()] = 'float' + str(list(op.get_output_partial_shape(0).to_shape())).replace(' ', '')
    r = c.create_infer_request()
    feeds = random_feeds([(i.get_any_name(), shapes[i.get_any_name()], i.get_element_type().is_real())
                          for i in c.inputs])
    per = collections.defaultdict(list); sig = {}

    def counters():  # the last run's, per executed layer
        for p in r.get_profiling_info():
            if p.status != p.Status.EXECUTED or p.node_type in ('Parameter', 'Result'): continue
            per[p.node_name].append(p.real_time.total_seconds() * 1000.0)
            sig[p.node_name] = (out_shape.get(p.node_name, '?'), p.node_type)
    p50 = timed_runs(lambda: r.infer(feeds), counters)
    return {k: (statistics.median(v), sig[k]) for k, v in per.items()}, p50
k, kp50 = kiln_prof(); o, op50 = ort_prof(); v, vp50 = ov_prof()
def by_shape(d):
    r = collections.defaultdict(lambda: [0.0, 0, set()])
    for name, (ms, (shp, op)) in d.items():
        r[shp][0] += ms; r[shp][1] += 1; r[shp][2].add(op)
    return r
ks, os_ = by_shape(k), by_shape(o)
vs = by_shape(v) if v else {}
print(f'threads {threads}: kiln {kp50} ; ORT p50 {op50:.3f} ms' + (f' ; OpenVINO p50 {vp50:.3f} ms' if v else '') +
      f' ; sum of node medians kiln {sum(x[0] for x in k.values()):.3f} ORT {sum(x[0] for x in o.values()):.3f}' +
      (f' OpenVINO {sum(x[0] for x in v.values()):.3f}' if v else ''))
rows = sorted(set(ks) | set(os_) | set(vs), key=lambda s: -(ks.get(s, [0])[0] + os_.get(s, [0])[0]))
print('| output | kiln ms (nodes) | ORT ms (nodes) | kiln/ORT |' + (' OpenVINO ms (nodes) | kiln/OpenVINO |' if v else '') + ' ORT ops |')
for s in rows[:30]:
    a = ks.get(s, [0, 0, set()]); b = os_.get(s, [0, 0, set()]); c = vs.get(s, [0, 0, set()])
    ov_cols = f' {c[0]:.3f} ({c[1]}) | {a[0]/c[0] if c[0] else 0:.2f} |' if v else ''
    print(f'| {s} | {a[0]:.3f} ({a[1]}) | {b[0]:.3f} ({b[1]}) | {a[0]/b[0] if b[0] else 0:.2f} |{ov_cols} {",".join(sorted(b[2]))[:60]} |')
