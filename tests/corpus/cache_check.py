#!/usr/bin/env python3
"""Every corpus model (build/corpus) through kiln's compiled-model cache: a first session compiles
and stores, a second loads the stored plan; both runs' outputs on data set 0 must be bit-identical
(an error must be the same error). Needs the Python package (PYTHONPATH=build/python).

    PYTHONPATH=build/python python3 tests/corpus/cache_check.py
"""
import glob, json, os, sys, tempfile

import numpy as np
import onnx
from onnx import numpy_helper

import kiln
out = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'build', 'corpus')
tol = json.load(open(out + '/zoo.json'))
cache = tempfile.mkdtemp(prefix='kiln_cc_')
bad = 0; n = 0
for d in sorted(glob.glob(out + '/*/model.onnx')):
    d = os.path.dirname(d); name = os.path.basename(d)
    if name not in tol: continue
    ins = sorted(glob.glob(d + '/test_data_set_0/input_*.pb'), key=lambda p: int(p.split('_')[-1][:-3]))
    outs = sorted(glob.glob(d + '/test_data_set_0/output_*.pb'), key=lambda p: int(p.split('_')[-1][:-3]))
    feed = {}
    for p in ins:
        t = onnx.load_tensor(p); feed[t.name] = numpy_helper.to_array(t)
    want = [numpy_helper.to_array(onnx.load_tensor(p)) for p in outs]
    res = []
    for rnd in range(2):
        so = kiln.SessionOptions(); so.cache_enabled = True; so.cache_dir = cache
        try:
            s = kiln.InferenceSession(d + '/model.onnx', so)
            res.append([np.array(x) for x in s.run(None, feed)])
        except Exception as e:
            res.append(str(e)[:100])
    n += 1
    if isinstance(res[0], str) or isinstance(res[1], str):
        if res[0] != res[1]: print('DIFF', name, res[0] if isinstance(res[0], str) else 'ok', '|', res[1] if isinstance(res[1], str) else 'ok'); bad += 1
        continue
    same = all(a.shape == b.shape and np.array_equal(a, b, equal_nan=True) for a, b in zip(res[0], res[1]))
    if not same: print('COLD/WARM DIFFER', name); bad += 1
print(n, 'models; cold vs warm (compiled cache) differ:', bad, '; cache entries:', len(os.listdir(cache)))
sys.exit(1 if bad else 0)
