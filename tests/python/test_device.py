"""Device values as ONNX Runtime makes them: OrtValue.ortvalue_from_numpy(arr, 'cuda', id),
ortvalue_from_shape_and_type(..., 'cuda', id), numpy() copying back, update_inplace, IOBinding with
device inputs and outputs (bind_output(name, 'cuda'): kiln allocates, get_outputs() stays on the
device, copy_outputs_to_cpu()).

Without a usable GPU the device calls must raise kiln.NoDevice with the reason (never crash), and
the tests that need one skip, saying so; scripts/gpu_test.sh runs this file on the CUDA build."""
import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto

import kiln
import models
from conftest import cuda_usable

GPU = cuda_usable()
needs_gpu = pytest.mark.skipif(not GPU, reason="no usable CUDA device here: scripts/gpu_test.sh runs the CUDA tests "
                                               "of tests/python on the CUDA build")
no_gpu_only = pytest.mark.skipif(GPU, reason="a GPU is usable here (the device tests run instead)")


# ---------------------------------------------------------------------------- without a GPU

@no_gpu_only
def test_device_calls_raise_no_device():
    x = np.ones((2, 2), np.float32)
    with pytest.raises(kiln.NoDevice, match="no CUDA device"):
        kiln.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    with pytest.raises(kiln.NoDevice, match="no CUDA device"):
        kiln.OrtValue.ortvalue_from_shape_and_type([2, 2], np.float32, "cuda", 0)
    with pytest.raises(kiln.NoDevice, match="no CUDA device"):
        kiln.OrtValue.ortvalue_from_shape_and_type([2, 2], TensorProto.FLOAT, "CUDA", 0)
    s = kiln.InferenceSession(models.two_outputs(), providers=["CPUExecutionProvider"])
    b = s.io_binding()
    with pytest.raises(kiln.NoDevice, match="output 'y'.*no CUDA device"):
        b.bind_output("y", "cuda")
    with pytest.raises(kiln.NoDevice, match="input 'x'.*no CUDA device"):
        b.bind_input("x", "cuda", 0, np.float32, [2, 2], 12345678)
    # the binding is still usable on the CPU
    b.bind_cpu_input("x", x)
    b.bind_output("y")
    s.run_with_iobinding(b)
    np.testing.assert_array_equal(b.copy_outputs_to_cpu()[0], 2 * x)


def test_unknown_device_types():
    x = np.ones(3, np.float32)
    for dev in ("dml", "cann", "tpu"):
        with pytest.raises(kiln.InvalidArgument, match="kiln has 'cpu' and 'cuda'"):
            kiln.OrtValue.ortvalue_from_numpy(x, dev, 0)
    with pytest.raises(kiln.InvalidArgument):
        kiln.OrtValue.ortvalue_from_shape_and_type([2], np.float32, "dml", 0)
    with pytest.raises(kiln.InvalidArgument):
        kiln.OrtValue.ortvalue_from_shape_and_type([-1], np.float32)
    with pytest.raises(kiln.InvalidArgument):
        kiln.OrtValue.ortvalue_from_shape_and_type([2], 9999)


# ---------------------------------------------------------------------------- CPU values against ONNX Runtime

def _same_value(mine, theirs):
    assert mine.device_name() == theirs.device_name()
    assert list(mine.shape()) == list(theirs.shape())
    assert mine.data_type() == theirs.data_type()
    assert mine.element_type() == theirs.element_type()
    assert mine.tensor_size_in_bytes() == theirs.tensor_size_in_bytes()
    assert mine.is_tensor() == theirs.is_tensor() and mine.has_value() == theirs.has_value()
    assert mine.is_tensor_sequence() == theirs.is_tensor_sequence()
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int64, np.int32, np.int8, np.uint8,
                                   np.bool_])
def test_cpu_ortvalue_like_onnxruntime(dtype):
    x = (np.arange(12) % 5).astype(dtype).reshape(3, 4)
    mine, theirs = kiln.OrtValue.ortvalue_from_numpy(x), onnxruntime.OrtValue.ortvalue_from_numpy(x)
    _same_value(mine, theirs)
    assert mine.data_ptr() == x.__array_interface__["data"][0]  # a view, as ONNX Runtime's
    for et in (dtype, int(theirs.element_type())):
        m = kiln.OrtValue.ortvalue_from_shape_and_type([2, 3], et)
        t = onnxruntime.OrtValue.ortvalue_from_shape_and_type([2, 3], et)
        assert (m.device_name(), m.shape(), m.data_type(), m.element_type()) == \
            (t.device_name(), list(t.shape()), t.data_type(), t.element_type())
        y = (np.arange(6) % 3).astype(dtype).reshape(2, 3)
        m.update_inplace(y)
        t.update_inplace(y)
        np.testing.assert_array_equal(m.numpy(), t.numpy())
    with pytest.raises(kiln.InvalidArgument):
        m.update_inplace(np.zeros((3, 3), dtype))


def test_ortvalue_with_onnx_type():
    bits = np.array([0x3F80, 0x4000], np.uint16)  # bfloat16 1.0, 2.0
    mine = kiln.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    theirs = onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    assert mine.data_type() == theirs.data_type() == "tensor(bfloat16)"
    assert mine.element_type() == theirs.element_type()
    assert mine.shape() == list(theirs.shape())


def test_copy_tensors_cpu():
    a = [kiln.OrtValue.ortvalue_from_numpy(np.full((2, 2), i, np.float32)) for i in range(3)]
    b = [kiln.OrtValue.ortvalue_from_shape_and_type([2, 2], np.float32) for _ in range(3)]
    kiln.copy_tensors(a, b)
    for i, v in enumerate(b):
        np.testing.assert_array_equal(v.numpy(), np.full((2, 2), i, np.float32))


def test_io_binding_mixed_and_dynamic_cpu():
    """Outputs bound in any mix (a buffer for one, kiln's memory for another), outputs of dynamic
    shape, the bind order kept: as ONNX Runtime on the CPU."""
    m = models.two_outputs()
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    s, ref = kiln.InferenceSession(m), onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"])
    zb = np.zeros((2, 2), np.float32)
    results = []
    for sess in (s, ref):
        b = sess.io_binding()
        b.bind_cpu_input("x", x)
        b.bind_output("z", "cpu", 0, np.float32, zb.shape, zb.__array_interface__["data"][0])
        b.bind_output("y")
        sess.run_with_iobinding(b)
        outs = b.get_outputs()
        assert [o.device_name() for o in outs] == ["cpu", "cpu"]
        results.append(b.copy_outputs_to_cpu())
        np.testing.assert_array_equal(zb, x + 1)
        zb[:] = 0
    for a, c in zip(*results):
        np.testing.assert_array_equal(a, c)
    # dynamic shapes (C is [N, 3]): kiln allocates after the run
    m = models.add()
    s, ref = kiln.InferenceSession(m), onnxruntime.InferenceSession(m, providers=["CPUExecutionProvider"])
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    for sess in (s, ref):
        b = sess.io_binding()
        b.bind_cpu_input("A", a)
        b.bind_cpu_input("B", a)
        b.bind_output("C", "cpu")
        sess.run_with_iobinding(b)
        (c,) = b.copy_outputs_to_cpu()
        np.testing.assert_array_equal(c, 2 * a)
    # a dynamic output written into a bound buffer of the right shape
    cb = np.zeros((4, 3), np.float32)
    b = s.io_binding()
    b.bind_cpu_input("A", a)
    b.bind_cpu_input("B", a)
    b.bind_ortvalue_output("C", kiln.OrtValue.ortvalue_from_numpy(cb))
    s.run_with_iobinding(b)
    np.testing.assert_array_equal(cb, 2 * a)
    assert b.get_outputs()[0].data_ptr() == cb.__array_interface__["data"][0]


# ---------------------------------------------------------------------------- on a GPU

DTYPES = [np.float32, np.float16, np.float64, np.int64, np.int32, np.int8, np.uint8, np.bool_]


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_ortvalue_round_trip(dtype):
    x = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    v = kiln.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    assert v.device_name() == "cuda"
    assert v.shape() == [2, 3, 4] and v.element_type() == kiln.OrtValue.ortvalue_from_numpy(x).element_type()
    assert v.data_ptr() not in (0, x.__array_interface__["data"][0])
    assert v.tensor_size_in_bytes() == x.nbytes
    back = v.numpy()
    assert back.dtype == x.dtype
    np.testing.assert_array_equal(back, x)
    x[0, 0, 0] = 1  # a copy: the device value does not follow the array
    np.testing.assert_array_equal(v.numpy().reshape(-1)[1:], back.reshape(-1)[1:])
    # non-contiguous input, empty tensor, scalar
    np.testing.assert_array_equal(kiln.OrtValue.ortvalue_from_numpy(x[:, ::2], "cuda", 0).numpy(), x[:, ::2])
    assert kiln.OrtValue.ortvalue_from_numpy(np.zeros((0, 3), dtype), "cuda", 0).numpy().shape == (0, 3)
    np.testing.assert_array_equal(kiln.OrtValue.ortvalue_from_numpy(np.array(3, dtype), "cuda", 0).numpy(),
                                  np.array(3, dtype))


@needs_gpu
def test_cuda_shape_and_type_update_inplace_dlpack():
    v = kiln.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32, "cuda", 0)
    ptr = v.data_ptr()
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    v.update_inplace(x)
    assert v.data_ptr() == ptr
    np.testing.assert_array_equal(v.numpy(), x)
    w = kiln.OrtValue.ortvalue_from_shape_and_type([3, 2], TensorProto.FLOAT, "cuda", 0)
    w.update_inplace(v)  # device to device
    np.testing.assert_array_equal(w.numpy(), x)
    h = kiln.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32)
    h.update_inplace(w)  # device to host
    np.testing.assert_array_equal(h.numpy(), x)
    with pytest.raises(kiln.InvalidArgument):
        v.update_inplace(np.zeros((2, 2), np.float32))
    assert v.__dlpack_device__() == (2, 0)
    torch = pytest.importorskip("torch")
    t = torch.from_dlpack(v)
    assert t.is_cuda
    np.testing.assert_array_equal(t.cpu().numpy(), x)


@needs_gpu
@pytest.mark.parametrize("providers", [["CUDAExecutionProvider", "CPUExecutionProvider"], ["CPUExecutionProvider"]])
def test_cuda_io_binding(providers):
    """The ONNX Runtime IOBinding recipe: device input, output bound to 'cuda' (kiln allocates),
    get_outputs() on the device, copy_outputs_to_cpu(); on a CUDA session and on a CPU one (whose
    outputs kiln copies to the device)."""
    s = kiln.InferenceSession(models.two_outputs(), providers=providers)
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    xv = kiln.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    b = s.io_binding()
    b.bind_input("x", "cuda", 0, np.float32, list(xv.shape()), xv.data_ptr())
    b.bind_output("y", "cuda")
    b.bind_output("z", "cuda", 0)
    s.run_with_iobinding(b)
    outs = b.get_outputs()
    assert [o.device_name() for o in outs] == ["cuda", "cuda"]
    y, z = b.copy_outputs_to_cpu()
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(z, x + 1)
    np.testing.assert_array_equal(outs[0].numpy(), 2 * x)
    # bound device buffers, written in place; an OrtValue input
    yv = kiln.OrtValue.ortvalue_from_shape_and_type([2, 2], np.float32, "cuda", 0)
    zv = kiln.OrtValue.ortvalue_from_shape_and_type([2, 2], np.float32, "cuda", 0)
    b.clear_binding_inputs()
    b.clear_binding_outputs()
    b.bind_ortvalue_input("x", xv)
    b.bind_output("y", "cuda", 0, np.float32, [2, 2], yv.data_ptr())
    b.bind_ortvalue_output("z", zv)
    s.run_with_iobinding(b)
    np.testing.assert_array_equal(yv.numpy(), 2 * x)
    np.testing.assert_array_equal(zv.numpy(), x + 1)
    assert b.get_outputs()[1].data_ptr() == zv.data_ptr()
    # a host output beside a device one
    b.clear_binding_outputs()
    b.bind_output("y", "cpu")
    b.bind_output("z", "cuda")
    s.run_with_iobinding(b)
    assert [o.device_name() for o in b.get_outputs()] == ["cpu", "cuda"]
    # run_with_ort_values with a device input
    y, z = s.run_with_ort_values(["y", "z"], {"x": xv})
    np.testing.assert_array_equal(y.numpy(), 2 * x)


@needs_gpu
def test_cuda_io_binding_dynamic_shape():
    s = kiln.InferenceSession(models.add(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    for n in (1, 5):
        a = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
        b = s.io_binding()
        b.bind_ortvalue_input("A", kiln.OrtValue.ortvalue_from_numpy(a, "cuda", 0))
        b.bind_cpu_input("B", a)
        b.bind_output("C", "cuda")
        s.run_with_iobinding(b)
        (c,) = b.get_outputs()
        assert c.device_name() == "cuda" and c.shape() == [n, 3]
        np.testing.assert_array_equal(b.copy_outputs_to_cpu()[0], 2 * a)


@needs_gpu
def test_cuda_io_binding_torch_pointers():
    """A torch tensor bound by its data_ptr() (ONNX Runtime's recipe), written by torch's kernels
    just before the run: the run waits for torch's (legacy default) stream."""
    torch = pytest.importorskip("torch")
    s = kiln.InferenceSession(models.two_outputs(), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    for _ in range(3):
        x = torch.rand(2, 2, device="cuda") @ torch.eye(2, device="cuda")  # a kernel, not yet finished
        y = torch.empty(2, 2, device="cuda")
        b = s.io_binding()
        b.bind_input(name="x", device_type="cuda", device_id=0, element_type=np.float32, shape=tuple(x.shape),
                     buffer_ptr=x.data_ptr())
        b.bind_output(name="y", device_type="cuda", device_id=0, element_type=np.float32, shape=tuple(y.shape),
                      buffer_ptr=y.data_ptr())
        b.bind_output("z", "cuda")
        b.synchronize_inputs()
        s.run_with_iobinding(b)
        b.synchronize_outputs()
        np.testing.assert_allclose(y.cpu().numpy(), 2 * x.cpu().numpy())
        np.testing.assert_allclose(b.copy_outputs_to_cpu()[1], x.cpu().numpy() + 1)


def test_host_copies_through_the_c_api():
    """kiln_tensor_copy between host tensors (a kiln-held host value): same type and shape only,
    with a message naming both; the value keeps its memory."""
    bits = np.arange(6, dtype=np.uint16).reshape(2, 3)
    v = kiln.OrtValue.ortvalue_from_numpy_with_onnx_type(np.zeros((2, 3), np.uint16), TensorProto.BFLOAT16)
    ptr = v.data_ptr()
    w = kiln.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    v.update_inplace(w)
    assert v.data_ptr() == ptr
    np.testing.assert_array_equal(np.asarray(v.numpy()).view(np.uint16), bits)
    with pytest.raises(kiln.InvalidArgument, match=r"cannot copy .*\[3,2\].* into .*\[2,3\]"):
        v.update_inplace(kiln.OrtValue.ortvalue_from_numpy_with_onnx_type(bits.reshape(3, 2), TensorProto.BFLOAT16))
    with pytest.raises(kiln.InvalidArgument, match="cannot copy"):
        v.update_inplace(np.zeros((2, 3), np.float32))
    b = kiln.InferenceSession(models.two_outputs()).io_binding()
    with pytest.raises(kiln.InvalidArgument, match="has not run"):
        b.get_outputs()
