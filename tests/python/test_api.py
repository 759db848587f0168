"""kiln's Python API against ONNX Runtime's: descriptions, types, options, providers, errors."""
import os
import pathlib
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto

import kiln
import models


def session(model_bytes, **kw):
    return kiln.InferenceSession(model_bytes, **kw)


def test_version():
    assert kiln.__version__ == kiln.get_version_string()
    parts = kiln.__version__.split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)
    try:
        from importlib import metadata
        assert metadata.version("kiln-runtime") == kiln.__version__
    except Exception:  # run from the build tree: no distribution metadata
        pass


def test_providers():
    avail = kiln.get_available_providers()
    assert "CPUExecutionProvider" in avail
    assert set(avail) <= set(kiln.get_all_providers())
    for p in (["cpu"], ["CPUExecutionProvider"], [("CPUExecutionProvider", {})], "cpu"):
        assert session(models.add(), providers=p).get_providers() == ["CPUExecutionProvider"]
    s = session(models.add(), providers=["CPUExecutionProvider"], provider_options=[{}])
    assert s.get_provider_options() == {"CPUExecutionProvider": {}}


def test_compiled_file_opens_on_its_own_providers(tmp_path):
    """With no providers asked for, a compiled file runs on those it was compiled for (the default
    list puts CUDA first on a CUDA build, which a CPU-compiled file does not hold), from a path or
    from bytes, and the session reports the file's provider options."""
    saved = tmp_path / "add.kiln"
    opts = kiln.SessionOptions()
    opts.cache_enabled = False
    opts.compiled_save_path = str(saved)
    session(models.add(), sess_options=opts, providers=[("CPUExecutionProvider", {"precision": "fp32"})])
    plain = kiln.SessionOptions()
    plain.cache_enabled = False
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for source in (str(saved), saved.read_bytes()):
        s = kiln.InferenceSession(source, plain)
        assert s.get_providers() == ["CPUExecutionProvider"]
        assert s.get_provider_options() == {"CPUExecutionProvider": {"precision": "fp32"}}
        np.testing.assert_array_equal(s.run(None, {"A": a, "B": a})[0], 2 * a)


def test_unknown_provider_warns_and_falls_back_to_cpu():
    with pytest.warns(UserWarning):
        s = session(models.add(), providers=["TensorrtExecutionProvider", "CPUExecutionProvider"])
    assert s.get_providers() == ["CPUExecutionProvider"]


@pytest.mark.skipif("CUDAExecutionProvider" in kiln.get_available_providers(), reason="a GPU is usable here")
def test_cuda_without_gpu_falls_back_to_cpu():
    if "CUDAExecutionProvider" in kiln.get_all_providers():
        with pytest.warns(UserWarning):
            s = session(models.add(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    else:
        with pytest.warns(UserWarning):
            s = session(models.add(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert s.get_providers() == ["CPUExecutionProvider"]
    a = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(s.run(None, {"A": a, "B": a})[0], 2 * a)


def test_description_like_onnxruntime(tmp_path):
    for m in (models.add(), models.sequences(), models.optionals(), models.two_outputs(), models.unknown_dims()):
        ref = onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"])
        s = session(m)
        for mine, theirs in ((s.get_inputs(), ref.get_inputs()), (s.get_outputs(), ref.get_outputs())):
            assert [a.name for a in mine] == [a.name for a in theirs]
            assert [a.type for a in mine] == [a.type for a in theirs]
            for a, b in zip(mine, theirs):
                assert a.shape == b.shape, a.name
    s = session(models.add())
    assert s.get_inputs()[0].shape == ["N", 3]
    assert repr(s.get_inputs()[0]) == "NodeArg(name='A', type='tensor(float)', shape=['N', 3])"


def test_path_bytes_pathlike(tmp_path):
    p = tmp_path / "add.onnx"
    p.write_bytes(models.add())
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for src in (str(p), p, models.add(), bytearray(models.add())):
        out = kiln.InferenceSession(src).run(None, {"A": a, "B": a})
        np.testing.assert_array_equal(out[0], a + a)


def test_run_output_selection():
    s = session(models.two_outputs())
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    y, z = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, x * 2)
    np.testing.assert_array_equal(z, x + 1)
    (z2,) = s.run(["z"], {"x": x})
    np.testing.assert_array_equal(z2, z)
    z3, y3 = s.run(["z", "y"], {"x": x})
    np.testing.assert_array_equal(y3, y)
    assert len(s.run([], {"x": x})) == 2  # [] means every output, as in ONNX Runtime


@pytest.mark.parametrize("dtype,np_dtype", [
    (TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64), (TensorProto.FLOAT16, np.float16),
    (TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8), (TensorProto.INT16, np.int16),
    (TensorProto.UINT16, np.uint16), (TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64),
    (TensorProto.UINT32, np.uint32), (TensorProto.UINT64, np.uint64), (TensorProto.BOOL, np.bool_),
])
def test_dtypes_round_trip(dtype, np_dtype):
    m = models.identity(dtype, ["a", "b"])
    x = (np.arange(12) % 5).astype(np_dtype).reshape(3, 4)
    s = session(m)
    (y,) = s.run(None, {"x": x})
    (want,) = onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert y.dtype == want.dtype == np_dtype
    np.testing.assert_array_equal(y, want)
    assert s.get_inputs()[0].type == onnxruntime.InferenceSession(m).get_inputs()[0].type


def test_bfloat16_with_ml_dtypes():
    ml = pytest.importorskip("ml_dtypes")
    x = np.array([1.5, -2.0, 3.25], dtype=ml.bfloat16)
    (y,) = session(models.identity(TensorProto.BFLOAT16, [3])).run(None, {"x": x})
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.astype(np.float32), x.astype(np.float32))


def test_int4_packed_with_ml_dtypes():
    ml = pytest.importorskip("ml_dtypes")
    x = np.array([-8, -1, 0, 3, 7], dtype=ml.int4)
    (y,) = session(models.identity(TensorProto.INT4, [5])).run(None, {"x": x})
    np.testing.assert_array_equal(y.astype(np.int8), x.astype(np.int8))


def test_strings_are_object_arrays():
    m = models.identity(TensorProto.STRING, [2, 2])
    x = np.array([["a", "bé"], ["", "long string " * 10]], dtype=object)
    (y,) = session(m).run(None, {"x": x})
    (want,) = onnxruntime.InferenceSession(m).run(None, {"x": x})
    assert y.dtype == object and y.shape == (2, 2)
    assert y.tolist() == want.tolist() == x.tolist()
    (y2,) = session(m).run(None, {"x": np.array([["a", "b"], ["c", "d"]])})  # numpy's str dtype
    assert y2.tolist() == [["a", "b"], ["c", "d"]]


def test_sequences_are_lists():
    m = models.sequences()
    feed = {"x": np.array([1, 2], np.float32), "y": np.array([3], np.float32),
            "s": [np.array([5, 6, 7], np.float32), np.array([8], np.float32)]}
    got = session(m).run(None, feed)
    want = onnxruntime.InferenceSession(m).run(None, feed)
    assert isinstance(got[0], list) and len(got[0]) == 2
    for g, w in zip(got[0], want[0]):
        np.testing.assert_array_equal(g, w)
    assert int(got[1]) == 2 and got[1].dtype == np.int64
    np.testing.assert_array_equal(got[2], want[2])
    with pytest.raises(kiln.InvalidArgument, match="sequence"):
        session(m).run(None, dict(feed, s=np.zeros(3, np.float32)))


def test_optionals_none():
    m = models.optionals()
    x = np.array([1, 2, 3], np.float32)
    s = session(m)
    has, some, none = s.run(None, {"o": x, "x": x})
    assert bool(has) is True
    np.testing.assert_array_equal(some, x)
    assert none is None
    has, _, _ = s.run(None, {"o": None, "x": x})
    assert bool(has) is False
    want = onnxruntime.InferenceSession(m).run(None, {"o": None, "x": x})
    assert want[2] is None


def test_non_contiguous_and_byte_order():
    s = session(models.add())
    a = np.arange(18, dtype=np.float32).reshape(3, 6)[:, ::2]  # strided
    b = np.ones((3, 3), dtype=">f4")                          # big-endian
    (c,) = s.run(None, {"A": a, "B": b})
    np.testing.assert_array_equal(c, a + 1)
    (c,) = s.run(None, {"A": np.asfortranarray(np.ones((2, 3), np.float32)), "B": np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(c, 2 * np.ones((2, 3)))


def test_empty_and_scalar():
    s = session(models.add())
    (c,) = s.run(None, {"A": np.zeros((0, 3), np.float32), "B": np.zeros((0, 3), np.float32)})
    assert c.shape == (0, 3)
    s = session(models.identity(TensorProto.INT64, []))
    (y,) = s.run(None, {"x": np.int64(7)})
    assert y.shape == () and int(y) == 7
    (y,) = s.run(None, {"x": np.array(5)})  # a Python int becomes int64, as numpy makes it
    assert int(y) == 5


def test_outputs_outlive_the_session():
    s = session(models.add())
    a = np.ones((4, 3), np.float32)
    (c,) = s.run(None, {"A": a, "B": a})
    del s
    import gc
    gc.collect()
    np.testing.assert_array_equal(c, 2 * a)
    c[0, 0] = 9  # writable, kiln's memory now the array's
    assert c[0, 0] == 9


# ---------------------------------------------------------------------------- options

def test_optimization_levels_and_threads():
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    outs = []
    for level in (kiln.GraphOptimizationLevel.ORT_DISABLE_ALL, kiln.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                  kiln.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, kiln.GraphOptimizationLevel.ORT_ENABLE_ALL):
        o = kiln.SessionOptions()
        o.graph_optimization_level = level
        o.intra_op_num_threads = 1
        o.inter_op_num_threads = 1
        o.execution_mode = kiln.ExecutionMode.ORT_SEQUENTIAL
        o.log_severity_level = 3
        outs.append(session(models.add(), sess_options=o).run(None, {"A": x, "B": x})[0])
    for y in outs:
        np.testing.assert_array_equal(y, outs[0])


def test_optimized_model_filepath(tmp_path):
    dump = tmp_path / "opt.onnx"
    o = kiln.SessionOptions()
    o.optimized_model_filepath = str(dump)
    session(models.two_outputs(), sess_options=o)
    assert dump.is_file()
    onnx.load(str(dump))
    x = np.ones((2, 2), np.float32)
    np.testing.assert_array_equal(onnxruntime.InferenceSession(str(dump)).run(["y"], {"x": x})[0], 2 * x)


def test_cache_dir(tmp_path):
    model = tmp_path / "m.onnx"  # the automatic cache keys models read from files
    model.write_bytes(models.two_outputs())
    o = kiln.SessionOptions()
    o.cache_dir = str(tmp_path / "cache")
    o.cache_enabled = True
    kiln.InferenceSession(str(model), sess_options=o)
    assert any(p.is_file() for p in (tmp_path / "cache").rglob("*"))
    o2 = kiln.SessionOptions()
    o2.cache_dir = str(tmp_path / "cache2")
    o2.cache_enabled = False
    kiln.InferenceSession(str(model), sess_options=o2)
    assert not any(p.is_file() for p in (tmp_path / "cache2").rglob("*")) if (tmp_path / "cache2").exists() else True


def test_free_dimension_override():
    o = kiln.SessionOptions()
    o.add_free_dimension_override_by_name("N", 2)
    s = session(models.add(), sess_options=o)
    a = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(s.run(None, {"A": a, "B": a})[0], 2 * a)
    with pytest.raises(kiln.Error):
        s.run(None, {"A": np.ones((5, 3), np.float32), "B": np.ones((5, 3), np.float32)})


def test_session_config_entries():
    o = kiln.SessionOptions()
    o.add_session_config_entry("session.disable_prepacking", "1")
    assert o.get_session_config_entry("session.disable_prepacking") == "1"


# ---------------------------------------------------------------------------- errors

def test_error_hierarchy():
    assert issubclass(kiln.InvalidArgument, kiln.Error) and issubclass(kiln.InvalidArgument, ValueError)
    assert issubclass(kiln.NotFound, LookupError) and issubclass(kiln.Error, RuntimeError)
    assert issubclass(kiln.Unsupported, NotImplementedError) and issubclass(kiln.IOFailure, OSError)


def test_bad_inputs_raise_not_crash():
    s = session(models.add())
    a = np.ones((2, 3), np.float32)
    with pytest.raises(kiln.InvalidArgument, match="double"):
        s.run(None, {"A": a.astype(np.float64), "B": a})
    with pytest.raises(kiln.Error, match="dimension"):
        s.run(None, {"A": np.ones((2, 4), np.float32), "B": a})
    with pytest.raises(kiln.Error):
        s.run(None, {"A": np.ones((2, 3, 1), np.float32), "B": a})
    with pytest.raises(kiln.InvalidArgument, match=r"Required inputs \(\['A'\]\) are missing"):
        s.run(None, {"nope": a, "B": a})
    with pytest.raises(kiln.NotFound, match="nope"):
        s.run(None, {"nope": a, "A": a, "B": a})
    with pytest.raises(kiln.Error, match="A"):
        s.run(None, {"B": a})
    with pytest.raises(kiln.NotFound, match="Z"):
        s.run(["Z"], {"A": a, "B": a})
    with pytest.raises(kiln.Error):
        s.run(None, {"A": np.array([["x", "y", "z"]] * 2, dtype=object), "B": a})
    with pytest.raises((kiln.Error, TypeError)):
        s.run(None, {"A": {"not": "an array"}, "B": a})
    with pytest.raises(kiln.Error):
        s.run(None, {"A": None, "B": a})
    with pytest.raises(TypeError):
        s.run(None, [a, a])
    with pytest.raises(kiln.InvalidArgument):
        s.run(None, {1: a})
    with pytest.raises(kiln.InvalidArgument, match="numpy type"):
        s.run(None, {"A": np.ones((2, 3), dtype="datetime64[s]"), "B": a})
    with pytest.raises(kiln.Error):
        s.run(None, {"A": np.ones((2,) * 13, np.float32), "B": a})  # rank above kiln's maximum
    # the session is still good
    np.testing.assert_array_equal(s.run(None, {"A": a, "B": a})[0], 2 * a)


def test_bad_models_raise():
    with pytest.raises(kiln.IOFailure):
        kiln.InferenceSession("/nonexistent/model.onnx")
    with pytest.raises(kiln.InvalidModel):
        kiln.InferenceSession(b"this is not an onnx model")
    with pytest.raises(kiln.Error):
        kiln.InferenceSession(b"")
    with pytest.raises(TypeError):
        kiln.InferenceSession(12)


def test_bad_options_raise():
    with pytest.raises(kiln.InvalidArgument, match="no_such_key"):
        session(models.add(), providers=[("CPUExecutionProvider", {"no_such_key": "1"})])
    with pytest.raises(kiln.InvalidArgument):
        session(models.add(), providers=["CPUExecutionProvider"], provider_options=[{}, {}])
    o = kiln.SessionOptions()
    o.graph_optimization_level = -1
    with pytest.raises(kiln.InvalidArgument):
        session(models.add(), sess_options=o)
    o = kiln.SessionOptions()
    o.intra_op_num_threads = -3
    with pytest.raises(kiln.Error):
        session(models.add(), sess_options=o)


# ---------------------------------------------------------------------------- run options

@pytest.mark.skipif(not kiln.RunOptions.supported, reason="this kiln has no kiln_run_options")
def test_run_options_terminate():
    s = session(models.add())
    a = np.ones((2, 3), np.float32)
    ro = kiln.RunOptions()
    ro.terminate = True
    with pytest.raises(kiln.Cancelled):
        s.run(None, {"A": a, "B": a}, ro)
    ro.terminate = False
    np.testing.assert_array_equal(s.run(None, {"A": a, "B": a}, ro)[0], 2 * a)


@pytest.mark.skipif(not kiln.RunOptions.supported, reason="this kiln has no kiln_run_options")
def test_run_options_timeout():
    ro = kiln.RunOptions()
    with pytest.raises(kiln.Error):
        ro.timeout_ms = -1
    ro.timeout_ms = 1
    o = kiln.SessionOptions()
    o.intra_op_num_threads = 1
    s = session(models.matmul_chain(512, 24), sess_options=o)
    with pytest.raises(kiln.DeadlineExceeded):
        s.run(None, {"x": np.ones((512, 512), np.float32)}, ro)
    ro.timeout_ms = 0
    s.run(None, {"x": np.ones((512, 512), np.float32)}, ro)


def test_run_options_attributes():
    ro = kiln.RunOptions()
    ro.log_severity_level = 3
    ro.logid = "x"
    ro.add_run_config_entry("a", "b")
    assert ro.get_run_config_entry("a") == "b"
    assert ro.terminate is False
    a = np.ones((1, 3), np.float32)
    with pytest.raises(TypeError):
        session(models.add()).run(None, {"A": a, "B": a}, run_options=object())


# ---------------------------------------------------------------------------- io binding

def test_io_binding_cpu():
    s = session(models.two_outputs())
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    b = s.io_binding()
    b.bind_cpu_input("x", x)
    b.bind_output("y")
    b.bind_output("z")
    s.run_with_iobinding(b)
    y, z = b.copy_outputs_to_cpu()
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(z, x + 1)
    # outputs into bound buffers, written in place
    yb, zb = np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32)
    b.clear_binding_outputs()
    b.bind_output("y", "cpu", 0, np.float32, yb.shape, yb.__array_interface__["data"][0])
    b.bind_output("z", "cpu", 0, np.float32, zb.shape, zb.__array_interface__["data"][0])
    s.run_with_iobinding(b)
    np.testing.assert_array_equal(yb, 2 * x)
    np.testing.assert_array_equal(zb, x + 1)
    # an input bound by pointer
    b.clear_binding_inputs()
    x2 = x + 10
    b.bind_input("x", "cpu", 0, np.float32, x2.shape, x2.__array_interface__["data"][0])
    s.run_with_iobinding(b)
    np.testing.assert_array_equal(yb, 2 * x2)
    # a wrong buffer shape is an error, nothing written
    b.clear_binding_outputs()
    small = np.zeros((1, 2), np.float32)
    b.bind_output("y", "cpu", 0, np.float32, small.shape, small.__array_interface__["data"][0])
    b.bind_output("z", "cpu", 0, np.float32, zb.shape, zb.__array_interface__["data"][0])
    with pytest.raises(kiln.Error):
        s.run_with_iobinding(b)


def test_ort_values():
    s = session(models.two_outputs())
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    v = kiln.OrtValue.ortvalue_from_numpy(x)
    assert v.shape() == [2, 2] and v.data_type() == "tensor(float)" and v.device_name() == "cpu"
    y, z = s.run_with_ort_values(["y", "z"], {"x": v})
    assert isinstance(y, kiln.OrtValue) and y.device_name() == "cpu"
    np.testing.assert_array_equal(y.numpy(), 2 * x)
    assert y.shape() == [2, 2] and y.data_type() == "tensor(float)" and y.data_ptr() != 0


def test_readme_quick_start(tmp_path):
    """The README's Python quick start, as written, on a model with its input shape."""
    import re
    import subprocess
    import sys
    from conftest import ROOT
    code = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    (tmp_path / "model.onnx").write_bytes(models.image_model())
    (tmp_path / "quick.py").write_text(code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(pathlib.Path(kiln.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "quick.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "(1, 3)" in r.stdout and kiln.__version__ in r.stdout


def test_model_metadata():
    m = session(models.add()).get_modelmeta()
    ref = onnxruntime.InferenceSession(models.add()).get_modelmeta()
    assert (m.producer_name, m.graph_name, m.domain) == (ref.producer_name, ref.graph_name, ref.domain) == \
        ("kiln-py-tests", "g", "")
    assert m.version == 0  # model_version unset (ONNX Runtime 1.32 reports INT64_MAX there)


def test_default_providers_are_the_usable_ones():
    assert session(models.add()).get_providers() == kiln.get_available_providers()


def test_module_functions():
    kiln.set_default_logger_severity(3)
    kiln.set_default_logger_verbosity(0)
    kiln.preload_dlls()
    try:
        s = session(models.add())
        a = np.ones((1, 3), np.float32)
        np.testing.assert_array_equal(s.run(None, {"A": a, "B": a})[0], 2 * a)
    finally:
        kiln.set_default_logger_severity(2)
    assert kiln.__version__ in kiln.get_build_info()
    assert kiln.get_device() in ("CPU", "GPU")
