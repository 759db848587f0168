"""The CPU provider's precision=bf16 on the zoo's and the project's models: outputs within a bf16
bound of ONNX Runtime's fp32 ones, and not equal to kiln's fp32 outputs where the model has matrix
products (so the bf16 products did run). Skipped on a CPU without AVX512_BF16, where the option
is refused with a message saying so (checked too)."""
import numpy as np
import onnxruntime
import pytest

import kiln
from conftest import model_dirs, read_pb

# the models with matrix products or convolutions worth checking (all of the zoo's but the RNNs,
# whose recurrent products are not part of bf16 mode: they run in fp32 and match exactly)
MODELS = [m for m in model_dirs() if m[0].startswith("zoo/") and "lstm" not in m[0]]
# relative L2 error over all outputs against fp32: bf16 operands keep 8 significant bits (about
# 2^-9 relative per product); through a dozen layers the zoo measured 3e-4 (field_conv1d_gemm) to 8e-3 (vit_tiny)
REL_L2_BOUND = 2e-2


def bf16_session(path, precision="bf16", activations=None):
    opts = kiln.SessionOptions()
    opts.cache_enabled = False
    po = {"precision": precision}
    if activations:
        po["activations"] = activations
    return kiln.InferenceSession(path, opts, providers=[("CPUExecutionProvider", po)])


def bf16_available():
    import pathlib
    import tempfile
    from models import add
    p = pathlib.Path(tempfile.mkdtemp()) / "add.onnx"
    p.write_bytes(add())
    try:
        bf16_session(str(p))
        return True, ""
    except Exception as e:  # noqa: BLE001
        return False, str(e)


AVAILABLE, WHY = bf16_available()


def inputs_of(folder, sess):
    ins = sorted((folder / "test_data_set_0").glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
    return {arg.name: read_pb(p) for arg, p in zip(sess.get_inputs(), ins)}


def rel_l2(got, ref):
    num = sum(float(np.sum((np.asarray(g, np.float64) - r) ** 2)) for g, r in zip(got, ref))
    den = sum(float(np.sum(np.asarray(r, np.float64) ** 2)) for r in ref)
    return np.sqrt(num / den) if den else np.sqrt(num)


def test_refused_or_available():
    if not AVAILABLE:
        assert "AVX512_BF16" in WHY, WHY


@pytest.mark.skipif(not AVAILABLE, reason=f"precision=bf16 not available here: {WHY}")
@pytest.mark.parametrize("mid,folder,rtol,atol", MODELS, ids=[m[0] for m in MODELS])
def test_bf16_within_bound_of_fp32(mid, folder, rtol, atol):
    path = str(folder / "model.onnx")
    ref_sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = inputs_of(folder, ref_sess)
    ref = [np.asarray(r) for r in ref_sess.run(None, feeds)]
    got = bf16_session(path).run(None, feeds)
    fp32 = bf16_session(path, "fp32").run(None, feeds)
    err = rel_l2(got, ref)
    assert err < REL_L2_BOUND, f"{mid}: relative L2 error {err:.3g} against fp32"
    assert all(np.isfinite(np.asarray(g, np.float64)).all() for g in got)
    # the products ran in bf16: not the fp32 results
    assert rel_l2(got, fp32) > 1e-6, f"{mid}: bf16 outputs equal fp32's"
    # activations=half (on AMX the values residuals read kept in bf16 too): the same bound
    half = bf16_session(path, activations="half").run(None, feeds)
    err_half = rel_l2(half, ref)
    assert err_half < REL_L2_BOUND, f"{mid}: activations=half: relative L2 error {err_half:.3g} against fp32"


@pytest.mark.skipif(not AVAILABLE, reason=f"precision=bf16 not available here: {WHY}")
@pytest.mark.skipif(not MODELS, reason="no zoo models")
def test_compiled_bf16_file_runs_as_bf16(tmp_path):
    """A file compiled with precision=bf16, opened with no provider list (it runs on the file's) or
    plain "CPUExecutionProvider" (no options), runs as it was compiled: the bf16 session's outputs
    bit for bit; asking it for fp32 is refused."""
    mid, folder, _, _ = MODELS[0]
    path = str(folder / "model.onnx")
    saved = str(tmp_path / "bf16.kiln")
    opts = kiln.SessionOptions()
    opts.cache_enabled = False
    opts.compiled_save_path = saved
    s = kiln.InferenceSession(path, opts, providers=[("CPUExecutionProvider", {"precision": "bf16"})])
    feeds = inputs_of(folder, s)
    want = s.run(None, feeds)
    fp32 = bf16_session(path, "fp32").run(None, feeds)
    assert rel_l2(want, fp32) > 1e-6, f"{mid}: bf16 outputs equal fp32's"
    plain = kiln.SessionOptions()
    plain.cache_enabled = False
    for providers in (None, ["CPUExecutionProvider"]):
        s = kiln.InferenceSession(saved, plain, providers=providers)
        assert s.get_provider_options() == {"CPUExecutionProvider": {"precision": "bf16"}}
        got = s.run(None, feeds)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    with pytest.raises(kiln.Error, match="compiled with cpu precision=bf16"):
        bf16_session(saved, "fp32")
