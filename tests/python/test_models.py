"""Every project model (BUILD/models) and zoo model (../shared/models) through kiln's Python API
against ONNX Runtime's outputs for the same inputs, at the default level and at level 0."""
import numpy as np
import onnxruntime
import pytest

import kiln
from conftest import cuda_usable, model_dirs, read_pb

MODELS = model_dirs()
# the CPU everywhere; CUDA (fp32, TF32 off) where a GPU is usable: the GPU suite
PROVIDERS = ["CPUExecutionProvider"] + (["CUDAExecutionProvider"] if cuda_usable() else [])


def data_set_inputs(folder, sess):
    ins = sorted((folder / "test_data_set_0").glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    return {arg.name: read_pb(p) for arg, p in zip(sess.get_inputs(), ins)}


def test_there_are_models():
    assert MODELS, "no project models (BUILD/models: run tests/models/make_models.py) and no zoo"


@pytest.mark.parametrize("mid,folder,rtol,atol", MODELS, ids=[m[0] for m in MODELS])
@pytest.mark.parametrize("level", [kiln.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                   kiln.GraphOptimizationLevel.ORT_DISABLE_ALL], ids=["all", "none"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_model_matches_onnxruntime(mid, folder, rtol, atol, level, provider):
    path = str(folder / "model.onnx")
    ref = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    opts = kiln.SessionOptions()
    opts.graph_optimization_level = level
    opts.cache_enabled = False
    sess = kiln.InferenceSession(path, opts, providers=[provider, "CPUExecutionProvider"])
    assert sess.get_providers()[0] == provider
    # the same description as ONNX Runtime's
    assert [(a.name, a.type) for a in sess.get_inputs()] == [(a.name, a.type) for a in ref.get_inputs()]
    assert [(a.name, a.type) for a in sess.get_outputs()] == [(a.name, a.type) for a in ref.get_outputs()]
    for a, b in zip(sess.get_inputs(), ref.get_inputs()):
        assert a.shape == b.shape, a.name
    feed = data_set_inputs(folder, sess)
    want = ref.run(None, feed)
    got = sess.run(None, feed)
    assert len(got) == len(want)
    for g, w, arg in zip(got, want, sess.get_outputs()):
        assert isinstance(g, np.ndarray), arg.name
        assert g.dtype == w.dtype and g.shape == w.shape, arg.name
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{mid} output {arg.name}")
    # named outputs, in another order
    names = [a.name for a in sess.get_outputs()][::-1]
    again = sess.run(names, feed)
    for g, n in zip(again, names):
        np.testing.assert_allclose(g, got[[a.name for a in sess.get_outputs()].index(n)], rtol=rtol, atol=atol)
