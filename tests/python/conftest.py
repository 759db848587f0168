"""pytest setup for kiln's Python package.

scripts/test.sh runs this suite against the extension its CMake build made
(PYTHONPATH=build/python); run it by hand the same way:

    PYTHONPATH=build/python python3 -m pytest tests/python

or against an installed package (pip install .) with nothing set. KILN_BUILD_DIR (default build)
is where the project's own test networks are (BUILD/models, from tests/models/make_models.py);
KILN_ZOO (default ../shared/models) the shared model zoo.
"""
import json
import os
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("KILN_BUILD_DIR", ROOT / "build"))
ZOO = pathlib.Path(os.environ.get("KILN_ZOO", ROOT.parent / "shared" / "models"))


def model_dirs():
    """(id, folder, rtol, atol) of every project model and zoo model present."""
    out = []
    for base, tag in ((BUILD / "models", "project"), (ZOO, "zoo")):
        if not base.is_dir():
            continue
        tol = {}
        if (base / "zoo.json").is_file():
            tol = json.loads((base / "zoo.json").read_text())
        for d in sorted(base.iterdir()):
            if (d / "model.onnx").is_file():
                t = tol.get(d.name, {})
                out.append((f"{tag}/{d.name}", d, t.get("rtol", 1e-3), t.get("atol", 1e-5)))
    return out


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    # compiled-model cache entries of the tests stay out of the user's ~/.cache
    if "KILN_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kiln-cache"))


def cuda_usable():
    import kiln
    return "CUDAExecutionProvider" in kiln.get_available_providers()


def read_pb(path):
    import onnx
    from onnx import numpy_helper
    t = onnx.TensorProto()
    t.ParseFromString(pathlib.Path(path).read_bytes())
    return numpy_helper.to_array(t)


def rng():
    return np.random.default_rng(20261202)


def pytest_terminal_summary(terminalreporter):
    """The closing line scripts/test.sh's part() reads: N passed, N failed, N skipped (errors in
    collection or fixtures count as failed, expected failures as skipped)."""
    st = terminalreporter.stats
    n = lambda k: len([r for r in st.get(k, []) if getattr(r, "when", "call") in ("call", "setup", "teardown")])
    passed = len([r for r in st.get("passed", []) if r.when == "call"])
    failed = n("failed") + len(st.get("error", [])) + len(st.get("xpassed", []))
    skipped = len(st.get("skipped", [])) + len(st.get("xfailed", []))
    terminalreporter.write_line(f"{passed} passed, {failed} failed, {skipped} skipped")
