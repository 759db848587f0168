"""DLPack both ways: inputs from objects with __dlpack__ (no copy), outputs handed out as DLPack;
torch's tensors where torch is installed, CUDA ones where a GPU is usable."""
import numpy as np
import pytest

import kiln
import models
from conftest import cuda_usable


class Producer:
    """An object that offers its data only through DLPack (as torch/CuPy tensors do)."""

    def __init__(self, arr):
        self.arr = arr
        self.taken = 0

    def __dlpack__(self, **kw):
        self.taken += 1
        return self.arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def test_dlpack_input_host():
    s = kiln.InferenceSession(models.add())
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = Producer(a)
    (c,) = s.run(None, {"A": p, "B": a})
    assert p.taken == 1
    np.testing.assert_array_equal(c, 2 * a)


def test_dlpack_capsule_through_c():
    s = kiln.InferenceSession(models.add())
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    v = kiln.OrtValue.from_dlpack(a.__dlpack__())  # the C capsule reader
    (c,) = s.run(None, {"A": v, "B": a})
    np.testing.assert_array_equal(c, 2 * a)
    # a capsule can be used once
    cap = a.__dlpack__()
    kiln.OrtValue.from_dlpack(cap)
    with pytest.raises(kiln.InvalidArgument, match="already used"):
        kiln.OrtValue.from_dlpack(cap)
    with pytest.raises(kiln.InvalidArgument):
        kiln.OrtValue.from_dlpack(object())


def test_dlpack_output_round_trip():
    s = kiln.InferenceSession(models.two_outputs())
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    y, z = s.run_with_ort_values(["y", "z"], {"x": x})
    assert y.__dlpack_device__() == (1, 0)
    ny = np.from_dlpack(y)  # no copy: a view of kiln's output
    np.testing.assert_array_equal(ny, 2 * x)
    assert ny.__array_interface__["data"][0] == y.data_ptr()
    del y
    import gc
    gc.collect()
    np.testing.assert_array_equal(ny, 2 * x)  # the capsule keeps the output alive
    # the output back into a run, through DLPack
    (y2, _) = s.run_with_ort_values(None, {"x": kiln.OrtValue.from_dlpack(z.to_dlpack())})
    np.testing.assert_array_equal(y2.numpy(), 2 * (x + 1))
    # an unconsumed capsule frees what it holds
    cap = z.to_dlpack()
    del cap
    gc.collect()


def test_dlpack_dtypes():
    for dt in (np.float32, np.float64, np.float16, np.int8, np.uint8, np.int32, np.int64, np.bool_):
        from onnx import helper
        m = models.identity(helper.np_dtype_to_tensor_dtype(np.dtype(dt)), [4])
        x = (np.arange(4) % 2).astype(dt)
        (y,) = kiln.InferenceSession(m).run_with_ort_values(None, {"x": Producer(x)})
        np.testing.assert_array_equal(np.from_dlpack(y), x)


def test_torch_cpu():
    torch = pytest.importorskip("torch")
    s = kiln.InferenceSession(models.add())
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    (c,) = s.run_with_ort_values(None, {"A": a, "B": a})
    t = torch.from_dlpack(c)
    assert torch.equal(t, a + a)
    (c,) = s.run(None, {"A": a.t().contiguous().t(), "B": a})  # a strided tensor
    np.testing.assert_array_equal(c, (a + a).numpy())


@pytest.mark.skipif(not cuda_usable(), reason="no usable CUDA device (the GPU suite runs this)")
def test_torch_cuda_round_trip():
    torch = pytest.importorskip("torch")
    o = kiln.SessionOptions()
    o.output_on_device = True
    s = kiln.InferenceSession(models.add(), o, providers=["CUDAExecutionProvider"])
    a = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3)
    torch.cuda.synchronize()
    (c,) = s.run_with_ort_values(None, {"A": a, "B": a})
    assert c.device_name() == "cuda"
    t = torch.from_dlpack(c)
    assert t.is_cuda and torch.equal(t, a + a)
    # io binding with device pointers, outputs written in place
    out = torch.empty_like(a)
    b = s.io_binding()
    b.bind_input("A", "cuda", 0, np.float32, tuple(a.shape), a.data_ptr())
    b.bind_input("B", "cuda", 0, np.float32, tuple(a.shape), a.data_ptr())
    b.bind_output("C", "cuda", 0, np.float32, tuple(out.shape), out.data_ptr())
    s.run_with_iobinding(b)
    assert torch.equal(out, a + a)
