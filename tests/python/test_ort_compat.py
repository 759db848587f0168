"""What a script written for ONNX Runtime meets first, with onnxruntime (tests/requirements.txt) as
the reference: which exception a mistake raises, the option enums, the profile file, the model's
metadata, run_async, and the capi module path scripts import exceptions from."""
import builtins
import json
import os
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kiln
import models

A = np.ones((2, 3), np.float32)

MISTAKES = {
    "wrong input name": lambda M, s: s.run(None, {"A": A, "X": A}),
    "missing input": lambda M, s: s.run(None, {"A": A}),
    "extra input name": lambda M, s: s.run(None, {"A": A, "B": A, "X": A}),
    "wrong element type": lambda M, s: s.run(None, {"A": A.astype(np.float64), "B": A}),
    "strings for floats": lambda M, s: s.run(None, {"A": np.array([["a", "b", "c"]] * 2), "B": A}),
    "wrong rank": lambda M, s: s.run(None, {"A": np.ones(3, np.float32), "B": np.ones(3, np.float32)}),
    "wrong dimension": lambda M, s: s.run(None, {"A": np.ones((2, 4), np.float32), "B": np.ones((2, 4), np.float32)}),
    "unknown output name": lambda M, s: s.run(["nope"], {"A": A, "B": A}),
    "no such file": lambda M, s: M.InferenceSession("/nonexistent/model.onnx", providers=["CPUExecutionProvider"]),
    "not a model": lambda M, s: M.InferenceSession(b"\x08\x07garbage\xff\xff", providers=["CPUExecutionProvider"]),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_mistakes_raise_what_onnxruntime_raises(case):
    """kiln raises an instance of the class ONNX Runtime raises (by its name in kiln, whose aliases
    map ONNX Runtime's names onto kiln's classes, or the same built-in class)."""
    f = MISTAKES[case]
    with pytest.raises(Exception) as theirs:
        f(ort, ort.InferenceSession(models.add(), providers=["CPUExecutionProvider"]))
    with pytest.raises(Exception) as mine:
        f(kiln, kiln.InferenceSession(models.add(), providers=["CPUExecutionProvider"]))
    name = type(theirs.value).__name__
    want = getattr(kiln, name, None) or getattr(builtins, name)
    assert isinstance(mine.value, want), (case, name, repr(mine.value))
    assert str(mine.value)  # a message, not an empty exception
    if case == "missing input":
        assert str(mine.value) == str(theirs.value)


def test_capi_exception_imports():
    from kiln.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, NoSuchFile, RuntimeException
    assert InvalidArgument is kiln.InvalidArgument and Fail is kiln.Error
    assert NoSuchFile is kiln.IOFailure and RuntimeException is kiln.RuntimeFailure
    from kiln.capi import onnxruntime_pybind11_state as C
    assert C.SessionOptions is kiln.SessionOptions
    with pytest.raises(NoSuchFile):
        kiln.InferenceSession("/nonexistent/model.onnx")


def test_enums_like_onnxruntime():
    for name in ("GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder"):
        theirs, mine = getattr(ort, name), getattr(kiln, name)
        assert {k: int(v) for k, v in theirs.__members__.items()} == {k: int(v) for k, v in mine.__members__.items()}
    o, r = kiln.SessionOptions(), ort.SessionOptions()
    assert o.graph_optimization_level.name == r.graph_optimization_level.name == "ORT_ENABLE_ALL"
    assert o.execution_mode.name == r.execution_mode.name
    assert o.execution_order.name == r.execution_order.name
    assert (o.intra_op_num_threads, o.inter_op_num_threads) == (r.intra_op_num_threads, r.inter_op_num_threads)


# what kiln leaves out of SessionOptions, on purpose (ONNX Runtime's plugin providers, EP contexts)
NOT_IN_KILN = {"add_external_initializers_from_files_in_memory", "add_provider", "add_provider_for_devices",
               "clear_ep_context_data_read_func", "set_ep_context_data_read_func", "set_load_cancellation_flag",
               "set_provider_selection_policy", "set_provider_selection_policy_delegate"}


def test_session_options_attributes():
    pub = lambda o: {a for a in dir(o) if not a.startswith("_")}
    assert pub(ort.SessionOptions()) - pub(kiln.SessionOptions()) <= NOT_IN_KILN
    o = kiln.SessionOptions()
    with pytest.raises(kiln.Unsupported, match="add_free_dimension_override_by_name"):
        o.add_free_dimension_override_by_denotation("DATA_BATCH", 1)
    with pytest.raises(kiln.Unsupported):
        o.add_initializer("w", kiln.OrtValue.ortvalue_from_numpy(A))


def test_profiling_like_onnxruntime(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = []
    for M in (ort, kiln):
        o = M.SessionOptions()
        o.enable_profiling = True
        o.profile_file_prefix = f"{M.__name__}_prof"
        s = M.InferenceSession(models.add(), sess_options=o, providers=["CPUExecutionProvider"])
        assert s.get_profiling_start_time_ns() > 0
        for _ in range(2):
            s.run(None, {"A": A, "B": A})
        name = s.end_profiling()
        assert name.startswith(f"{M.__name__}_prof") and name.endswith(".json") and os.path.isfile(name)
        files.append(json.load(open(name)))
    theirs, mine = files
    assert isinstance(mine, list) and mine
    session_keys = {k for e in theirs if e.get("cat") == "Session" for k in e}
    for e in mine:
        assert set(e) == session_keys and e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0
    assert [e["name"] for e in mine].count("model_run") == 2
    assert [e["name"] for e in theirs].count("model_run") == 2
    # off: no file
    assert kiln.InferenceSession(models.add()).end_profiling() == ""


def test_model_metadata_like_onnxruntime(tmp_path):
    m = onnx.load_from_string(models.add())
    m.graph.doc_string = "adds two tensors"
    m.doc_string = "the model's description"
    m.domain = "ai.kiln.test"
    m.model_version = 7
    helper.set_model_props(m, {"author": "kiln", "license": "MIT", "empty": ""})
    b = m.SerializeToString()
    p = tmp_path / "m.onnx"
    p.write_bytes(b)
    for src in (b, str(p), p):
        theirs = ort.InferenceSession(b, providers=["CPUExecutionProvider"]).get_modelmeta()
        mine = kiln.InferenceSession(src).get_modelmeta()
        for a in ("producer_name", "graph_name", "domain", "description", "graph_description", "version",
                  "custom_metadata_map"):
            assert getattr(mine, a) == getattr(theirs, a), a


def test_run_async():
    s = kiln.InferenceSession(models.add())
    done = threading.Event()
    got = {}

    def callback(results, user_data, err):
        got.update(results=results, user_data=user_data, err=err)
        done.set()

    s.run_async(None, {"A": A, "B": A}, callback, "tag")
    assert done.wait(60)
    assert got["err"] == "" and got["user_data"] == "tag"
    np.testing.assert_array_equal(got["results"][0], 2 * A)
    done.clear()
    s.run_async(None, {"A": A.astype(np.float64), "B": A}, callback, None)
    assert done.wait(60)
    assert got["results"] is None and "double" in got["err"]


def test_create_ortvalue_from_shape_and_type():
    s = kiln.InferenceSession(models.add())
    v = s.create_ortvalue_from_shape_and_type([2, 3], np.float32)
    assert v.shape() == [2, 3] and v.device_name() == "cpu" and v.data_type() == "tensor(float)"
    v = s.create_ortvalue_from_shape_and_type([4], TensorProto.INT64)
    assert v.data_type() == "tensor(int64)"
