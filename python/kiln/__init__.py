"""kiln: an ONNX inference runtime, with the Python API of ONNX Runtime.

A script written for ONNX Runtime runs on kiln by changing one import::

    import kiln as ort

    sess = ort.InferenceSession("model.onnx", providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    outputs = sess.run(None, {sess.get_inputs()[0].name: x})

The package is a thin layer over kiln's C library (the extension ``kiln._kiln``, built against
CPython's limited API): arrays cross into kiln without a copy (numpy's array interface, or DLPack
for torch/CuPy tensors on the CPU or a CUDA device) and outputs come back as numpy arrays that
view kiln's memory. The GIL is released while a session compiles or runs.
"""

import enum
import mmap
import os
import sys
import threading
import time
import types
import warnings

import numpy as np

from . import _kiln

__all__ = [
    "InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder",
    "copy_tensors", "capi",
    "NodeArg", "OrtValue", "IOBinding", "ModelMetadata", "get_available_providers", "get_all_providers",
    "get_device", "get_version_string", "get_build_info", "set_default_logger_severity",
    "set_default_logger_verbosity", "preload_dlls", "Error", "__version__",
]

__version__ = _kiln.version()


def get_version_string():
    return __version__


# ---------------------------------------------------------------------------------------- errors

class Error(RuntimeError):
    """A failure reported by kiln; the message is the library's (what, where and why).
    ``status`` is the C status name, e.g. "KILN_ERR_SHAPE"."""
    status = "KILN_ERR"


class InvalidArgument(Error, ValueError):
    status = "KILN_ERR_INVALID_ARGUMENT"


class InvalidModel(Error):
    status = "KILN_ERR_INVALID_MODEL"


class Unsupported(Error, NotImplementedError):
    status = "KILN_ERR_UNSUPPORTED"


class IOFailure(Error, OSError):
    status = "KILN_ERR_IO"


class OutOfMemory(Error, MemoryError):
    status = "KILN_ERR_OUT_OF_MEMORY"


class ShapeError(InvalidArgument):
    status = "KILN_ERR_SHAPE"


class NotFound(InvalidArgument, LookupError):
    """A name that does not exist (an input, an output, a provider); an InvalidArgument too, as
    ONNX Runtime reports a wrong name."""
    status = "KILN_ERR_NOT_FOUND"


class NoDevice(Error):
    status = "KILN_ERR_NO_DEVICE"


class RuntimeFailure(Error):
    status = "KILN_ERR_RUNTIME"


class CacheError(Error):
    status = "KILN_ERR_CACHE"


class InternalError(Error):
    status = "KILN_ERR_INTERNAL"


class Misuse(Error):
    status = "KILN_ERR_MISUSE"


class Cancelled(Error):
    status = "KILN_ERR_CANCELLED"


class DeadlineExceeded(Error, TimeoutError):
    status = "KILN_ERR_DEADLINE"


# ONNX Runtime's exception names, for scripts that catch them
Fail = Error
NoSuchFile = IOFailure
InvalidGraph = InvalidModel
InvalidProtobuf = InvalidModel
NotImplemented = Unsupported  # noqa: A001 (onnxruntime's name)
RuntimeException = RuntimeFailure
EPFail = NoDevice

_ERROR_CLASSES = [InvalidArgument, InvalidModel, Unsupported, IOFailure, OutOfMemory, ShapeError, NotFound,
                  NoDevice, RuntimeFailure, CacheError, InternalError, Misuse, Cancelled, DeadlineExceeded]


def _register_errors():
    names = _kiln.status_names()
    by_name = {cls.status: cls for cls in _ERROR_CLASSES}
    _kiln._set_errors(Error, {code: by_name[name] for code, name in names.items() if name in by_name})


_register_errors()

# ---------------------------------------------------------------------------------- element types

try:  # bfloat16, float8 and the 4/2-bit types as numpy dtypes (ml_dtypes is optional)
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - depends on the environment
    _ml = None

_DTYPE_NAMES = _kiln.dtype_names()  # {1: "float", ...}: ONNX's names

_NP_OF = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 8: np.dtype(object),
    9: np.dtype(np.bool_), 10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32),
    13: np.dtype(np.uint64), 14: np.dtype(np.complex64), 15: np.dtype(np.complex128),
}
_ML_OF = {16: "bfloat16", 17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz",
          21: "uint4", 22: "int4", 23: "float4_e2m1fn", 24: "float8_e8m0fnu", 25: "uint2", 26: "int2"}
_SUBBYTE_BITS = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2}
if _ml is not None:
    for _code, _name in _ML_OF.items():
        if hasattr(_ml, _name):
            _NP_OF[_code] = np.dtype(getattr(_ml, _name))
_CODE_OF = {}
for _code, _dt in _NP_OF.items():
    _CODE_OF.setdefault(_dt, _code)
_CODE_OF[np.dtype(np.str_)] = 8


def _code_of(dtype, what):
    dtype = np.dtype(dtype)
    code = _CODE_OF.get(dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype)
    if code is None:
        if dtype.kind in "US":
            return 8
        raise InvalidArgument(f"{what}: numpy type {dtype} has no ONNX element type")
    return code


def _onnx_type(code):
    return f"tensor({_DTYPE_NAMES.get(code, 'undefined')})"


# --------------------------------------------------------------------------------------- options

class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's optimisation levels, mapped onto kiln's 0..3."""
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


def _kiln_level(level):
    level = int(level)
    if level < 0:
        raise InvalidArgument(f"graph_optimization_level {level} is negative")
    return min(level, 3)


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class SessionOptions:
    """Options of a session, as ONNX Runtime's SessionOptions, plus kiln's own.

    ONNX Runtime's attributes: graph_optimization_level (GraphOptimizationLevel; ORT_ENABLE_ALL is
    kiln's level 3), intra_op_num_threads (0: one per core), optimized_model_filepath (kiln writes
    the optimised graph there as .onnx), log_severity_level (0 verbose .. 4 fatal),
    add_free_dimension_override_by_name. Accepted and without effect in kiln:
    inter_op_num_threads, execution_mode, execution_order, use_per_session_threads,
    enable_cpu_mem_arena, enable_mem_pattern, enable_mem_reuse, log_verbosity_level, logid.
    enable_profiling (with profile_file_prefix) records the session's creation and each run as
    ONNX Runtime's JSON trace (a Chrome trace; end_profiling() writes it and returns its name);
    kiln's per-node times are KILN_PROFILE's (README).

    kiln's: cache_enabled (the compiled-model cache, default True), cache_dir (default
    $KILN_CACHE_DIR, else ~/.cache/kiln), compiled_save_path / compiled_load_path,
    disabled_passes (names of optimisation passes), output_on_device (run() leaves outputs in CUDA
    memory: use run_with_ort_values or io_binding to receive them).
    """

    def __init__(self):
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.use_per_session_threads = True
        self.optimized_model_filepath = ""
        self.log_severity_level = -1  # -1: the default (set_default_logger_severity, else 2: warnings)
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.use_deterministic_compute = False
        self.cache_enabled = True
        self.cache_dir = ""
        self.compiled_save_path = ""
        self.compiled_load_path = ""
        self.disabled_passes = []
        self.output_on_device = False
        self._dims = {}
        self._config = {}

    def add_free_dimension_override_by_name(self, name, value):
        self._dims[str(name)] = int(value)

    def add_free_dimension_override_by_denotation(self, denotation, value):
        raise Unsupported(f"kiln does not read dimension denotations ('{denotation}'); name the dimension "
                          "with add_free_dimension_override_by_name")

    def add_initializer(self, name, ortvalue):
        raise Unsupported(f"kiln does not replace initializers ('{name}') from session options")

    def add_external_initializers(self, names, ortvalues):
        raise Unsupported("kiln does not take external initializers from session options; keep the "
                          "external data files next to the model")

    def has_providers(self):
        return False

    def add_session_config_entry(self, key, value):
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key):
        return self._config[key]

    def register_custom_ops_library(self, path):
        raise Unsupported("kiln does not load ONNX Runtime custom-operator libraries")


class RunOptions:
    """Options of one run, as ONNX Runtime's RunOptions. ``terminate = True`` (from any thread)
    stops every run using these options at its next check with kiln.Cancelled;
    ``timeout_ms`` (kiln's) bounds a run's time, past which it fails with kiln.DeadlineExceeded.
    Both need a library with kiln_run_options (``kiln.RunOptions.supported``)."""

    supported = bool(_kiln.HAVE_RUN_OPTIONS)

    def __init__(self):
        self._c = _kiln.RunOptions() if self.supported else None
        self._terminate = False
        self._timeout_ms = 0
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.only_execute_path_to_fetches = False
        self._config = {}

    @property
    def terminate(self):
        return self._terminate

    @terminate.setter
    def terminate(self, value):
        value = bool(value)
        if self._c is None:
            if value:
                raise Unsupported("this kiln build has no run options (terminate)")
        else:
            self._c.set_terminate(value)
        self._terminate = value

    @property
    def timeout_ms(self):
        return self._timeout_ms

    @timeout_ms.setter
    def timeout_ms(self, value):
        value = int(value)
        if self._c is None:
            if value:
                raise Unsupported("this kiln build has no run options (timeout_ms)")
        else:
            self._c.set_timeout_ms(value)
        self._timeout_ms = value

    def add_run_config_entry(self, key, value):
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key):
        return self._config[key]


def _c_run_options(run_options):
    if run_options is None:
        return None
    if not isinstance(run_options, RunOptions):
        raise TypeError("run_options must be a kiln.RunOptions")
    return run_options._c


# ------------------------------------------------------------------------------------- providers

_ORT_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
_KILN_NAMES = {v: k for k, v in _ORT_NAMES.items()}
# ONNX Runtime provider options kiln has no use for (accepted, ignored)
_IGNORED_OPTIONS = {
    "gpu_mem_limit", "arena_extend_strategy", "do_copy_in_default_stream", "cudnn_conv_use_max_workspace",
    "cudnn_conv1d_pad_to_nc1d", "gpu_external_alloc", "gpu_external_free", "gpu_external_empty_cache",
    "tunable_op_enable", "tunable_op_tuning_enable", "enable_skip_layer_norm_strict_mode", "prefer_nhwc",
    "use_ep_level_unified_stream", "user_compute_stream", "has_user_compute_stream", "cudnn_conv_algo",
}


def _providers_info():
    return {name: (ok, reason) for name, ok, reason in _kiln.providers()}


def get_all_providers():
    """Every provider this build of kiln has, by ONNX Runtime's names."""
    return [_ORT_NAMES.get(name, name) for name, _, _ in _kiln.providers()]


def get_available_providers():
    """The providers usable on this machine now, in kiln's order of preference (CUDA first)."""
    info = _providers_info()
    order = sorted(info, key=lambda n: 0 if n == "cuda" else 1)
    return [_ORT_NAMES.get(n, n) for n in order if info[n][0]]


_default_log_severity = [2]


def set_default_logger_severity(level):
    """The log severity of sessions whose SessionOptions leave it at its default (0 verbose ..
    4 fatal), as in ONNX Runtime."""
    _default_log_severity[0] = int(level)


def set_default_logger_verbosity(level):
    pass


def preload_dlls(*args, **kwargs):
    """ONNX Runtime loads its CUDA libraries here; kiln loads cuBLASLt and cuDNN at first use."""


def get_build_info():
    info = ", ".join(f"{n}: {'usable' if ok else 'not usable (' + str(why) + ')'}" for n, ok, why in _kiln.providers())
    return f"kiln {__version__}; providers {info}"


def get_device():
    return "GPU" if "cuda" in [n for n, ok, _ in _kiln.providers() if ok] else "CPU"


def _kiln_provider_options(name, options):
    out = []
    for key, value in (options or {}).items():
        key = str(key)
        if isinstance(value, bool):
            value = "1" if value else "0"
        value = str(value)
        if key in _IGNORED_OPTIONS:
            continue
        if name == "cuda" and key == "cudnn_conv_algo_search":
            value = "exhaustive" if value.upper() == "EXHAUSTIVE" else "heuristic"
            key = "tuning"
        elif name == "cuda" and key == "enable_cuda_graph":
            key = "graphs"
        elif name == "cuda" and key == "use_tf32":
            if value == "1" and "precision" not in (options or {}):
                out.append(("precision", "tf32"))
            continue
        out.append((key, value))
    return out


def _is_compiled(model):
    """Whether a model source (a path or the bytes) is a compiled kiln file."""
    magic = b"KILNCOMP"  # src/cache/format.h
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model[:len(magic)]) == magic
    try:
        with open(os.fspath(model), "rb") as f:
            return f.read(len(magic)) == magic
    except (OSError, TypeError):
        return False  # the session's creation says what is wrong with it


def _resolve_providers(providers, provider_options):
    """[(kiln name, [(key, value)])] of what the session will use, and the ONNX Runtime names."""
    if providers is None:
        # every provider usable here, CUDA first (ONNX Runtime's GPU build asks for a list instead)
        providers = [_KILN_NAMES.get(p, p) for p in get_available_providers()]
    if isinstance(providers, str):
        providers = [providers]
    if provider_options is not None and len(provider_options) != len(providers):
        raise InvalidArgument("provider_options must have one dict per provider")
    info = _providers_info()
    chosen, names = [], []
    for i, p in enumerate(providers):
        opts = provider_options[i] if provider_options is not None else None
        if isinstance(p, (tuple, list)):
            if len(p) != 2:
                raise InvalidArgument(f"provider {p!r}: want a name or (name, options)")
            p, opts = p
        if not isinstance(p, str):
            raise InvalidArgument(f"provider {p!r}: want a name")
        name = _KILN_NAMES.get(p, p.lower() if p.lower() in ("cpu", "cuda") else p)
        if name not in info:
            warnings.warn(f"Specified provider '{p}' is not in available provider names."
                          f"Available providers: '{', '.join(get_available_providers())}'")
            continue
        if any(n == name for n, _ in chosen):
            continue  # named twice: the first one counts
        ok, reason = info[name]
        if not ok:
            warnings.warn(f"provider '{p}' is not usable here ({reason}); kiln goes on without it")
            continue
        chosen.append((name, _kiln_provider_options(name, opts)))
        names.append(_ORT_NAMES.get(name, name))
    if not any(n == "cpu" for n, _ in chosen):
        # as ONNX Runtime, the CPU runs what no other provider takes
        chosen.append(("cpu", []))
        names.append("CPUExecutionProvider")
    return chosen, names


# ----------------------------------------------------------------------------------- values

class NodeArg:
    """A graph input or output: name, type ('tensor(float)', 'seq(tensor(int64))', ...) and shape
    (ints, symbolic dimensions as their names, None for an unnamed unknown one; [] when even the
    rank is unknown, as ONNX Runtime gives it)."""

    def __init__(self, name, type, shape, kind=None, dtype=0):
        self.name = name
        self.type = type
        self._rank_known = shape is not None
        # a sequence has no shape of its own in ONNX Runtime's description (kiln knows its items')
        self.shape = list(shape) if shape is not None and not type.startswith("seq(") else []
        self._kind = kind
        self._dtype = dtype

    def __repr__(self):
        return f"NodeArg(name='{self.name}', type='{self.type}', shape={self.shape})"


def _unpack_subbyte(raw, code, shape):
    bits = _SUBBYTE_BITS[code]
    n = int(np.prod(shape, dtype=np.int64))
    per = 8 // bits
    b = np.asarray(raw, dtype=np.uint8)
    vals = np.stack([(b >> (bits * k)) & ((1 << bits) - 1) for k in range(per)], axis=-1).reshape(-1)[:n]
    if code in (22, 26):  # signed: sign-extend
        vals = vals.astype(np.int8)
        vals = np.where(vals >= (1 << (bits - 1)), vals - (1 << bits), vals).astype(np.int8)
    target = _NP_OF.get(code)
    if target is not None and target.itemsize == 1 and code != 23:
        return vals.astype(target).reshape(shape)
    if target is not None and code == 23:
        return vals.astype(np.uint8).view(target).reshape(shape)
    return vals.reshape(shape)


def _pack_subbyte(arr, code):
    bits = _SUBBYTE_BITS[code]
    per = 8 // bits
    flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8) & ((1 << bits) - 1)
    pad = (-flat.size) % per
    if pad:
        flat = np.concatenate([flat, np.zeros(pad, np.uint8)])
    flat = flat.reshape(-1, per).astype(np.uint8)
    out = np.zeros(flat.shape[0], np.uint8)
    for k in range(per):
        out |= flat[:, k] << (bits * k)
    return out


def _tensor_to_numpy(t):
    """A host kiln Tensor as a numpy array (a view of kiln's memory, which the array keeps)."""
    code = t.dtype
    if code == 8:
        flat = t.strings()
        arr = np.empty(len(flat), dtype=object)
        arr[:] = flat
        return arr.reshape(t.shape)
    if code in _SUBBYTE_BITS:
        return _unpack_subbyte(np.asarray(t), code, t.shape)
    arr = np.asarray(t)
    target = _NP_OF.get(code)
    if target is not None and target != arr.dtype and target.itemsize == arr.dtype.itemsize:
        arr = arr.view(target)
    return arr


def _output_to_python(v):
    if v is None:
        return None
    if isinstance(v, list):
        return [_output_to_python(x) for x in v]
    if v.device[0] != "cpu":
        return OrtValue(v)
    return _tensor_to_numpy(v)


def _device_kind(device_type, what):
    """'cpu' or 'cuda' for ONNX Runtime's device type names (any case); other devices are an error."""
    d = str(device_type).lower()
    if d in ("cpu", "cuda"):
        return d
    if d in ("gpu", "cuda_pinned", "cann", "dml", "webgpu", "npu"):
        raise InvalidArgument(f"{what}: device type '{device_type}' is not supported (kiln has 'cpu' and 'cuda')")
    raise InvalidArgument(f"{what}: unknown device type '{device_type}' (kiln has 'cpu' and 'cuda')")


def _element_code(element_type, what):
    """The ONNX element type of a numpy type or an ONNX TensorProto number."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        code = int(element_type)
        if code not in _DTYPE_NAMES or code == 8:
            raise InvalidArgument(f"{what}: element type {code} is not a numeric ONNX type")
        return code
    code = _code_of(element_type, what)
    if code == 8:
        raise InvalidArgument(f"{what}: string tensors live on the host only")
    return code


def _nbytes_of(code, shape):
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    bits = _SUBBYTE_BITS.get(code)
    if bits:
        return (n * bits + 7) // 8
    return n * _NP_OF[code].itemsize


def _as_tensor_spec(value, what):
    """What _kiln.copy takes for an OrtValue or a numpy array (and the array to keep alive)."""
    if isinstance(value, OrtValue):
        spec = value._spec(what)
    else:
        spec = _array_spec(np.asarray(value), what)
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], np.ndarray):
        return spec
    if isinstance(spec, tuple) and spec and spec[0] == "s":
        raise InvalidArgument(f"{what}: string tensors cannot be copied to or from a device")
    return spec, None


class OrtValue:
    """A tensor held by kiln (on the host or a CUDA device), as ONNX Runtime's OrtValue.

    ortvalue_from_numpy(arr, 'cuda', 0) copies an array into new CUDA memory, numpy() copies a
    device value back, update_inplace(arr) overwrites it; host values view their array."""

    def __init__(self, value, _keep=None):
        self._v = value      # a _kiln.Tensor (host or device), a numpy array (host input) or a _DLPackInput
        self._keep = _keep   # what must outlive it (the array a spec points into)

    @classmethod
    def ortvalue_from_numpy(cls, numpy_obj, device_type="cpu", device_id=0, vendor_id=-1):
        """An OrtValue holding numpy_obj: on the CPU the array itself (no copy), on 'cuda' a copy in
        new memory of CUDA device device_id."""
        dev = _device_kind(device_type, "OrtValue.ortvalue_from_numpy")
        if dev == "cpu":
            return cls(numpy_obj if isinstance(numpy_obj, np.ndarray) and numpy_obj.flags.c_contiguous
                       else np.ascontiguousarray(numpy_obj))
        arr = np.asarray(numpy_obj)
        code = _element_code(arr.dtype, "OrtValue.ortvalue_from_numpy")
        t = _kiln.device_tensor(code, arr.shape, dev, int(device_id))
        spec, backing = _as_tensor_spec(arr, "OrtValue.ortvalue_from_numpy")
        _kiln.copy(spec, t)
        del backing
        return cls(t)

    @classmethod
    def ortvalue_from_numpy_with_onnx_type(cls, data, onnx_element_type):
        """A host OrtValue over data's bytes read as ONNX element type onnx_element_type (of the
        same size: bfloat16 from uint16, float8 from uint8)."""
        code = _element_code(onnx_element_type, "OrtValue.ortvalue_from_numpy_with_onnx_type")
        arr = np.ascontiguousarray(data)
        if code in _SUBBYTE_BITS or arr.dtype.itemsize != _NP_OF.get(code, np.dtype(np.uint8)).itemsize:
            raise InvalidArgument(f"OrtValue.ortvalue_from_numpy_with_onnx_type: numpy type {arr.dtype} does not "
                                  f"have the size of {_onnx_type(code)}")
        t = _kiln.wrap(("a", code, arr.shape, arr.__array_interface__["data"][0], arr.nbytes))
        return cls(t, arr)

    @classmethod
    def ortvalue_from_shape_and_type(cls, shape, element_type, device_type="cpu", device_id=0, vendor_id=-1):
        """New memory for a tensor of this shape and element type (a numpy type or an ONNX
        TensorProto number): zeroed on the CPU, not initialised on 'cuda'."""
        dev = _device_kind(device_type, "OrtValue.ortvalue_from_shape_and_type")
        code = _element_code(element_type, "OrtValue.ortvalue_from_shape_and_type")
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise InvalidArgument(f"OrtValue.ortvalue_from_shape_and_type: shape {list(shape)} has a negative dim")
        if dev == "cpu" and code in _NP_OF and code not in _SUBBYTE_BITS and code in _CODE_OF.values():
            return cls(np.zeros(shape, dtype=_NP_OF[code]))
        return cls(_kiln.device_tensor(code, shape, dev, int(device_id)))

    @classmethod
    def from_dlpack(cls, data, is_bool_tensor=False):
        """A value from a DLPack capsule or an object with __dlpack__ (host: copied; CUDA: viewed,
        the producer must stay alive)."""
        if hasattr(data, "__dlpack__"):
            dev = data.__dlpack_device__()
            if dev[0] in (2, 13):
                return cls(_DLPackInput(data))
            return cls(np.ascontiguousarray(np.from_dlpack(data)))
        return cls(_kiln.Tensor.from_dlpack(data))

    def _spec(self, what):
        if isinstance(self._v, np.ndarray):
            return _array_spec(self._v, what)
        if isinstance(self._v, _DLPackInput):
            return self._v.spec()
        return self._v

    def _on_device(self):
        return self.device_name() != "cpu"

    def numpy(self):
        """The value as a numpy array: a view of host memory, or a copy of device memory."""
        if isinstance(self._v, np.ndarray):
            return self._v
        if isinstance(self._v, _DLPackInput):
            return _tensor_to_numpy(_kiln.host_copy(self._v.spec()))
        if self._v.device[0] != "cpu":
            return _tensor_to_numpy(_kiln.host_copy(self._v))
        return _tensor_to_numpy(self._v)

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        if copy is not None:
            return np.array(arr, dtype=dtype, copy=copy)
        return np.asarray(arr, dtype=dtype) if dtype is not None else arr

    def update_inplace(self, data):
        """Copies data (a numpy array, or an OrtValue on the host or a device) into this value's
        memory, which keeps its address (the type and shape must be the same)."""
        if not isinstance(data, (np.ndarray, OrtValue)):
            raise TypeError("data must be a numpy.ndarray or an OrtValue")
        if isinstance(self._v, np.ndarray):
            src = data.numpy() if isinstance(data, OrtValue) else data
            if src.shape != self._v.shape or src.dtype != self._v.dtype:
                raise InvalidArgument(f"OrtValue.update_inplace: {src.dtype}{list(src.shape)} into "
                                      f"{self._v.dtype}{list(self._v.shape)}")
            np.copyto(self._v, src)
            return
        src, backing = _as_tensor_spec(data, "OrtValue.update_inplace")
        dst = self._v.spec() if isinstance(self._v, _DLPackInput) else self._v
        _kiln.copy(src, dst)
        del backing

    def to_dlpack(self):
        return self.__dlpack__()

    def __dlpack__(self, **kw):
        if isinstance(self._v, np.ndarray):
            return self._v.__dlpack__(**kw)
        if isinstance(self._v, _DLPackInput):
            return self._v.obj.__dlpack__(**kw)
        return self._v.__dlpack__(**kw)

    def __dlpack_device__(self):
        if isinstance(self._v, np.ndarray):
            return (1, 0)
        if isinstance(self._v, _DLPackInput):
            return self._v.obj.__dlpack_device__()
        return self._v.__dlpack_device__()

    def shape(self):
        return list(self._v.shape) if not isinstance(self._v, _DLPackInput) else list(self._v.obj.shape)

    def data_type(self):
        return _onnx_type(self.element_type())

    def element_type(self):
        """The ONNX element type (TensorProto number), as ONNX Runtime's."""
        if isinstance(self._v, np.ndarray):
            return _code_of(self._v.dtype, "value")
        if isinstance(self._v, _DLPackInput):
            return _kiln.dlpack_info(self._v.spec())[0]
        return self._v.dtype

    def tensor_size_in_bytes(self):
        if isinstance(self._v, np.ndarray):
            return self._v.nbytes
        if isinstance(self._v, _DLPackInput):
            return _nbytes_of(self.element_type(), self.shape())
        return self._v.nbytes

    def device_name(self):
        """'cpu' or 'cuda', as ONNX Runtime's."""
        if isinstance(self._v, np.ndarray):
            return "cpu"
        if isinstance(self._v, _DLPackInput):
            return "cuda"
        return self._v.device[0]

    def device_id(self):
        if isinstance(self._v, _DLPackInput):
            return int(self._v.obj.__dlpack_device__()[1])
        return 0 if isinstance(self._v, np.ndarray) else self._v.device[1]

    def data_ptr(self):
        """The address of the first element (a device address for a CUDA value)."""
        if isinstance(self._v, np.ndarray):
            return self._v.__array_interface__["data"][0]
        if isinstance(self._v, _DLPackInput):
            return _kiln.dlpack_info(self._v.spec())[2]
        return self._v.data_ptr

    def is_tensor(self):
        return True

    def is_sparse_tensor(self):
        return False

    def is_tensor_sequence(self):
        return False

    def has_value(self):
        return True

    def __repr__(self):
        return f"OrtValue({self.data_type()}{self.shape()} on {self.device_name()})"


def copy_tensors(src, dst, stream=None):
    """Copies each OrtValue of src into the OrtValue of dst at the same place (ONNX Runtime's
    onnxruntime.copy_tensors): same types and shapes, any devices."""
    if len(src) != len(dst):
        raise InvalidArgument(f"copy_tensors: {len(src)} sources for {len(dst)} destinations")
    for s, d in zip(src, dst):
        d.update_inplace(s)


class _DLPackInput:
    """A DLPack producer whose capsule is taken when a run needs it (one capsule per run)."""

    def __init__(self, obj):
        self.obj = obj

    def spec(self):
        dev = self.obj.__dlpack_device__()
        if dev[0] in (2, 13):  # CUDA: the producer orders its work before the legacy default stream
            try:
                return self.obj.__dlpack__(stream=1)
            except TypeError:
                return self.obj.__dlpack__()
        return self.obj.__dlpack__()


def _array_spec(arr, what):
    """The C spec of a host numpy array (which the caller keeps alive for the call)."""
    if arr.dtype.kind in "OUS":
        flat = arr.reshape(-1)
        items = []
        for s in flat:
            if isinstance(s, bytes):
                s = s.decode("utf-8", "surrogateescape")
            elif not isinstance(s, str):
                raise InvalidArgument(f"{what}: a string tensor holds a {type(s).__name__}")
            items.append(s)
        return ("s", arr.shape, items)
    code = _code_of(arr.dtype, what)
    if code in _SUBBYTE_BITS:
        packed = _pack_subbyte(arr, code)
        return ("a", code, arr.shape, packed.__array_interface__["data"][0], packed.nbytes), packed
    if not arr.flags.c_contiguous or arr.dtype.byteorder == ">":
        arr = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
    return ("a", code, arr.shape, arr.__array_interface__["data"][0], arr.nbytes), arr


def _value_spec(value, arg, keep):
    """The C spec of one input value for graph input `arg` (a NodeArg); arrays it points into are
    appended to keep."""
    what = f"input '{arg.name}'" if arg is not None else "value"
    kind = arg._kind if arg is not None else None
    if kind == "optional":
        if value is None:
            return ("o", arg._dtype, None)
        inner = NodeArg(arg.name, arg.type, arg.shape if arg._rank_known else None,
                        "seq" if arg.type.startswith("optional(seq") else None, arg._dtype)
        return ("o", arg._dtype, _value_spec(value, inner, keep))
    if kind == "seq":
        if not isinstance(value, (list, tuple)):
            raise InvalidArgument(f"{what} is a sequence ({arg.type}): pass a list of arrays")
        return ("q", arg._dtype, [_value_spec(v, None, keep) for v in value])
    if value is None:
        raise InvalidArgument(f"{what} is None")
    if isinstance(value, OrtValue):
        spec = value._spec(what)
        if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], np.ndarray):
            keep.append(spec[1])
            return spec[0]
        keep.append(value)
        return spec
    if isinstance(value, _kiln.Tensor):
        return value
    if not isinstance(value, (np.ndarray, np.generic, list, tuple, int, float, bool, str)) and \
            hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
        dev = value.__dlpack_device__()
        if dev[0] in (2, 13):
            keep.append(value)
            return _DLPackInput(value).spec()
        value = np.from_dlpack(value)  # host: a numpy view, no copy
    arr = np.asarray(value)
    spec = _array_spec(arr, what)
    if spec[0] == "s":
        return spec
    spec, backing = spec
    keep.append(backing)
    return spec


class _Profile:
    """ONNX Runtime's profile: a JSON array of Chrome trace events ("ph": "X", microseconds from
    the start), here the session's creation and each run."""

    def __init__(self, prefix):
        self.prefix = prefix or "onnxruntime_profile_"
        self.start_ns = time.time_ns()
        self.t0 = time.perf_counter_ns()
        self.events = []
        self.lock = threading.Lock()

    def event(self, name, begin_ns, end_ns):
        e = {"cat": "Session", "pid": os.getpid(), "tid": threading.get_ident() & 0x7FFFFFFF,
             "dur": (end_ns - begin_ns) // 1000, "ts": (begin_ns - self.t0) // 1000, "ph": "X", "name": name,
             "args": {}}
        with self.lock:
            self.events.append(e)

    def write(self):
        import json
        name = f"{self.prefix}_{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"
        with self.lock:
            data = json.dumps(self.events, indent=0)
        with open(name, "w") as f:
            f.write(data)
        return name


def _varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(b, start, end):
    """(field number, wire type, value or (begin, end) of a length-delimited field) of one protobuf
    message in b[start:end]."""
    i = start
    while i < end:
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
            yield num, wt, v
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > end:
                raise ValueError("truncated")
            yield num, wt, (i, i + n)
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError("bad wire type")


def _model_extras(src):
    """(graph doc_string, [(key, value)] of metadata_props) read from the model's bytes (kiln keeps
    neither); empty for a compiled file or anything unreadable."""
    doc, props = "", []
    f = mm = None
    try:
        if isinstance(src, os.PathLike):
            src = os.fspath(src)
        if isinstance(src, str):
            f = open(src, "rb")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            b = mm
        else:
            b = bytes(src)
        if b[:8] == b"KILNCOMP":
            return doc, props
        text = lambda r: bytes(b[r[0]:r[1]]).decode("utf-8", "replace")
        for num, wt, v in _fields(b, 0, len(b)):
            if num == 14 and wt == 2:
                k = val = ""
                for n2, w2, v2 in _fields(b, v[0], v[1]):
                    if n2 == 1 and w2 == 2:
                        k = text(v2)
                    elif n2 == 2 and w2 == 2:
                        val = text(v2)
                props.append((k, val))
            elif num == 7 and wt == 2:
                for n2, w2, v2 in _fields(b, v[0], v[1]):
                    if n2 == 10 and w2 == 2:
                        doc = text(v2)
    except (OSError, ValueError, IndexError):
        pass
    finally:
        if mm is not None:
            mm.close()
        if f is not None:
            f.close()
    return doc, props


class ModelMetadata:
    def __init__(self):
        self.producer_name = ""
        self.graph_name = ""
        self.graph_description = ""
        self.domain = ""
        self.description = ""
        self.version = 0
        self.custom_metadata_map = {}


# ------------------------------------------------------------------------------------- sessions

class InferenceSession:
    """A compiled model, as ONNX Runtime's InferenceSession.

    path_or_bytes: a path to an .onnx file (str or os.PathLike), or the model's bytes.
    providers: names in order of preference, ONNX Runtime's ('CUDAExecutionProvider',
    'CPUExecutionProvider') or kiln's ('cuda', 'cpu'), each optionally as (name, options dict);
    provider_options: one dict per provider. CUDA options: device_id, precision
    (fp32|tf32|fp16|bf16), activations, tuning, graphs, conv_graph, strict, workspace_mb, and ONNX Runtime's
    cudnn_conv_algo_search, enable_cuda_graph and use_tf32. CPU options: precision (fp32|bf16: matrix
    products and convolutions in bf16 with fp32 accumulation, on CPUs with AVX512_BF16; elsewhere the
    session is refused with the reason) and activations (fp32|half: with bf16 on AMX, the
    convolutions' block outputs that residuals read are kept in bf16 too). A provider that is not usable here is
    dropped with a warning, and the CPU runs what the others do not, as in ONNX Runtime.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **kwargs):
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._model = path_or_bytes
        self._providers_arg = (providers, provider_options)
        self._disabled = list(kwargs.get("disabled_optimizers") or [])
        self._profile = None
        self._meta = None
        o = self._sess_options
        if getattr(o, "enable_profiling", False):
            self._profile = _Profile(getattr(o, "profile_file_prefix", "onnxruntime_profile_"))
        t0 = time.perf_counter_ns()
        self._create(providers, provider_options)
        if self._profile is not None:
            self._profile.event("session_initialization", t0, time.perf_counter_ns())

    def _create(self, providers, provider_options):
        o = self._sess_options
        if providers is None and provider_options is None and _is_compiled(self._model):
            # no list asked for: a compiled file runs on the providers it was compiled for (the
            # default list, CUDA first on a CUDA build, would refuse a file compiled for the CPU)
            chosen = []
        else:
            chosen, _ = _resolve_providers(providers, provider_options)
        sev = int(getattr(o, "log_severity_level", -1))
        if sev < 0:
            sev = _default_log_severity[0]
        log_level = 3 if sev <= 0 else 2 if sev == 1 else 1 if sev == 2 else 0
        src = self._model
        base_dir = None
        if isinstance(src, os.PathLike):
            src = os.fspath(src)
        if isinstance(src, (bytes, bytearray, memoryview)):
            src = bytes(src)
        elif not isinstance(src, str):
            raise TypeError("InferenceSession: path_or_bytes must be a path or the model's bytes")
        self._c = _kiln.Session(
            src, base_dir, chosen, _kiln_level(o.graph_optimization_level), int(o.intra_op_num_threads or 0),
            log_level, o.optimized_model_filepath or None, 1 if o.cache_enabled else 0, o.cache_dir or None,
            list(o._dims.items()), list(o.disabled_passes or []) + self._disabled, 1 if o.output_on_device else 0,
            o.compiled_save_path or None, o.compiled_load_path or None)
        # what the session runs on: the providers usable of those asked for, or a compiled file's
        running = self._c.providers()
        self._providers = [_ORT_NAMES.get(n, n) for n, _ in running]
        self._has_cuda = "CUDAExecutionProvider" in self._providers
        self._provider_options = {_ORT_NAMES.get(n, n): dict(kv) for n, kv in running}
        self._inputs = [NodeArg(n, t, s, k, d) for n, t, k, d, s in self._c.inputs()]
        self._outputs = [NodeArg(n, t, s, k, d) for n, t, k, d, s in self._c.outputs()]
        self._input_by_name = {a.name: a for a in self._inputs}
        self._output_by_name = {a.name: a for a in self._outputs}

    # -- description
    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return []

    def get_providers(self):
        return list(self._providers)

    def get_provider_options(self):
        return {k: dict(v) for k, v in self._provider_options.items()}

    def get_session_options(self):
        return self._sess_options

    def get_modelmeta(self):
        m = ModelMetadata()
        m.producer_name, m.graph_name, m.domain, m.description, m.version = self._c.meta()
        if self._meta is None:
            self._meta = _model_extras(self._model)
        m.graph_description, props = self._meta
        m.custom_metadata_map = dict(props)
        return m

    def set_providers(self, providers=None, provider_options=None):
        self._create(providers, provider_options)

    def disable_fallback(self):
        pass

    def enable_fallback(self):
        pass

    def end_profiling(self):
        """Writes the profile (SessionOptions.enable_profiling) and returns its file name; "" when
        profiling is off. Runs after this one are not recorded, as in ONNX Runtime."""
        if self._profile is None:
            return ""
        name = self._profile.write()
        self._profile = None
        return name

    def get_profiling_start_time_ns(self):
        return self._profile.start_ns if self._profile is not None else 0

    def create_ortvalue_from_shape_and_type(self, shape, element_type, device_type="cpu", device_id=0,
                                            vendor_id=-1):
        return OrtValue.ortvalue_from_shape_and_type(shape, element_type, device_type, device_id, vendor_id)

    def run_async(self, output_names, input_feed, callback, user_data, run_options=None):
        """Runs on another thread and calls callback(results, user_data, err): err is "" on success,
        else the message (results then None), as ONNX Runtime's run_async."""
        def work():
            try:
                res = self.run(output_names, input_feed, run_options)
            except Exception as e:  # handed to the callback, as ONNX Runtime does
                callback(None, user_data, str(e) or type(e).__name__)
                return
            callback(res, user_data, "")
        threading.Thread(target=work, daemon=True).start()

    def _timed(self, fn, *args):
        if self._profile is None:
            return fn(*args)
        t0 = time.perf_counter_ns()
        try:
            return fn(*args)
        finally:
            self._profile.event("model_run", t0, time.perf_counter_ns())

    # -- running
    def _feed(self, input_feed):
        if not isinstance(input_feed, dict):
            raise TypeError("input_feed must be a dict of input name to value")
        missing = [a.name for a in self._inputs if a.name not in input_feed and not a.type.startswith("optional")]
        if missing:  # ONNX Runtime's check and message, before anything runs
            raise InvalidArgument(f"Required inputs ({missing}) are missing from input feed ({list(input_feed)}).")
        names, specs, keep = [], [], []
        for name, value in input_feed.items():
            if not isinstance(name, str):
                raise InvalidArgument(f"input name {name!r} is not a str")
            arg = self._input_by_name.get(name)
            names.append(name)
            specs.append(_value_spec(self._reachable(value), arg, keep))
        return names, specs, keep

    def _reachable(self, value):
        """value, or a host copy of a device OrtValue when no provider of the session runs on the
        device (as ONNX Runtime copies it)."""
        if isinstance(value, OrtValue) and not self._has_cuda and value.device_name() == "cuda":
            return OrtValue(_kiln.host_copy(value._spec("input")))
        return value

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model: a list of numpy arrays in the order of output_names (None: every
        output); sequences come back as lists, empty optionals as None, strings as object arrays."""
        names, specs, keep = self._feed(input_feed)
        outs = self._timed(self._c.run, names, specs, list(output_names) if output_names else None,
                           _c_run_options(run_options))
        del keep
        return [_output_to_python(v) for v in outs]

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        """As run, with OrtValues (or arrays, DLPack tensors) in and OrtValues out; outputs may
        stay in CUDA memory (SessionOptions.output_on_device)."""
        names, specs, keep = self._feed(input_dict_ort_values)
        outs = self._timed(self._c.run, names, specs, list(output_names) if output_names else None,
                           _c_run_options(run_options))
        del keep
        return [OrtValue(v) if isinstance(v, _kiln.Tensor) else v for v in outs]

    def io_binding(self):
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        self._timed(iobinding._run, run_options)


def _check_device(dev, device_id, what):
    """A clear NoDevice before anything is bound to a device this machine cannot use."""
    if dev == "cpu":
        return
    info = _providers_info()
    if dev not in info:
        raise NoDevice(f"{what}: no CUDA device: this build of kiln has no CUDA backend")
    ok, reason = info[dev]
    if not ok:
        raise NoDevice(f"{what}: no CUDA device: {reason}")
    n = len(_kiln.devices(dev))
    if int(device_id) < 0 or int(device_id) >= n:
        raise NoDevice(f"{what}: no CUDA device {device_id}: {n} device{'s' if n != 1 else ''} present")


class IOBinding:
    """Inputs and outputs bound to memory, as ONNX Runtime's IOBinding.

    Inputs: bind_cpu_input(name, array); bind_input(name, device_type, device_id, element_type,
    shape, buffer_ptr) over host or CUDA memory (read where it is); bind_ortvalue_input.
    Outputs: bind_output(name, device_type) without a buffer: kiln allocates each run's output on
    that device ('cuda' outputs stay there: get_outputs() gives OrtValues in CUDA memory,
    copy_outputs_to_cpu() numpy copies); with buffer_ptr (and element_type, shape), or
    bind_ortvalue_output: written in place (kiln_session_run_into). Outputs are returned in the
    order they were bound; with none bound, every output on the CPU."""

    def __init__(self, session):
        self._s = session
        self._inputs = {}
        self._outputs = {}   # name -> ("alloc", device, id) | OrtValue (written in place)
        self._results = None
        self._result_names = []

    # -- inputs
    def bind_cpu_input(self, name, arr_on_cpu):
        self._inputs[name] = arr_on_cpu if isinstance(arr_on_cpu, np.ndarray) else np.asarray(arr_on_cpu)

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        self._inputs[name] = self._wrap(f"IOBinding.bind_input: input '{name}'", device_type, device_id,
                                        element_type, shape, buffer_ptr)

    def bind_ortvalue_input(self, name, ortvalue):
        if not isinstance(ortvalue, OrtValue):
            raise TypeError("bind_ortvalue_input: want a kiln.OrtValue")
        self._inputs[name] = ortvalue

    # -- outputs
    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None):
        what = f"IOBinding.bind_output: output '{name}'"
        dev = _device_kind(device_type, what)
        if buffer_ptr is None:
            _check_device(dev, device_id, what)
            self._outputs[name] = ("alloc", dev, int(device_id))
            return
        if element_type is None or shape is None:
            raise InvalidArgument(f"{what}: a bound buffer needs element_type and shape")
        self._outputs[name] = self._wrap(what, device_type, device_id, element_type, shape, buffer_ptr)

    def bind_ortvalue_output(self, name, ortvalue):
        if not isinstance(ortvalue, OrtValue):
            raise TypeError("bind_ortvalue_output: want a kiln.OrtValue")
        self._outputs[name] = ortvalue

    @staticmethod
    def _wrap(what, device_type, device_id, element_type, shape, buffer_ptr):
        dev = _device_kind(device_type, what)
        _check_device(dev, device_id, what)
        code = _element_code(element_type, what)
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise InvalidArgument(f"{what}: shape {list(shape)} has a negative dim")
        nbytes = _nbytes_of(code, shape)
        if dev == "cpu":
            spec = ("a", code, shape, int(buffer_ptr), nbytes)
        else:
            spec = ("d", code, shape, int(buffer_ptr), nbytes, int(device_id))
        v = OrtValue(_kiln.wrap(spec))
        v._external = dev != "cpu"  # the caller's device memory: written by the caller's streams
        return v

    def clear_binding_inputs(self):
        self._inputs = {}

    def clear_binding_outputs(self):
        self._outputs = {}

    def _devices(self, values):
        ids = set()
        for v in values:
            if isinstance(v, OrtValue) and v._on_device():
                ids.add(v.device_id())
            elif isinstance(v, tuple) and v and v[0] == "alloc" and v[1] != "cpu":
                ids.add(v[2])
        return ids

    def synchronize_inputs(self):
        """Waits for the device work on bound CUDA inputs (run_with_iobinding also waits for the
        legacy default stream, where torch and CuPy write by default)."""
        for d in self._devices(self._inputs.values()):
            _kiln.cuda_synchronize(d)

    def synchronize_outputs(self):
        """Outputs are complete when run_with_iobinding returns; this waits for the devices anyway."""
        for d in self._devices(self._outputs.values()):
            _kiln.cuda_synchronize(d)

    # -- running
    def _alloc_static(self, name, dev, device_id):
        """A new tensor for output `name` on dev when its type and shape are known before the run
        (else None)."""
        arg = self._s._output_by_name.get(name)
        if arg is None or arg._kind is not None or not arg.type.startswith("tensor(") or arg._dtype in (0, 8):
            return None
        if not arg._rank_known or not all(isinstance(d, int) and d >= 0 for d in arg.shape):
            return None
        return _kiln.device_tensor(arg._dtype, tuple(arg.shape), dev, device_id)

    def _run(self, run_options):
        keep = []
        names, specs = [], []
        for name, v in self._inputs.items():
            names.append(name)
            specs.append(_value_spec(self._s._reachable(v), self._s._input_by_name.get(name), keep))
        ro = _c_run_options(run_options)
        # the caller's CUDA pointers are written on the legacy default stream by default (torch,
        # CuPy): wait for it, as for a DLPack input
        for d in {v.device_id() for v in self._inputs.values() if getattr(v, "_external", False)}:
            _kiln.sync_legacy(d)
        self._results = None
        if self._outputs:
            out_names = list(self._outputs)
            bound = dict(self._outputs)
        else:
            out_names = [a.name for a in self._s._outputs]
            bound = {n: ("alloc", "cpu", 0) for n in out_names}
        self._result_names = out_names
        # every output in memory known before the run (bound buffers, or new tensors of static
        # shape): one run_into writes each where it belongs
        # (a session without a CUDA provider writes host memory only: its device outputs are copied)
        targets = []
        for n in out_names:
            b = bound[n]
            if not self._s._has_cuda and (b._on_device() if isinstance(b, OrtValue) else b[1] != "cpu"):
                break
            t = b if isinstance(b, OrtValue) else self._alloc_static(n, b[1], b[2])
            if t is None:
                break
            targets.append(t)
        if len(targets) == len(out_names):
            ospecs = []
            for n, t in zip(out_names, targets):
                if isinstance(t, OrtValue):
                    spec = t._spec(f"output '{n}'")
                    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], np.ndarray):
                        keep.append(spec[1])
                        spec = spec[0]
                    ospecs.append(spec)
                else:
                    ospecs.append(t)
            self._s._c.run_into(names, specs, out_names, ospecs, ro)
            self._results = [t if isinstance(t, OrtValue) else OrtValue(t) for t in targets]
            del keep
            return
        # an output whose shape is known only after the run: kiln allocates, and each output goes
        # where it was bound
        outs = self._s._c.run(names, specs, out_names, ro)
        del keep
        results = []
        for n, v in zip(out_names, outs):
            b = bound[n]
            if isinstance(b, OrtValue):
                if not isinstance(v, _kiln.Tensor):
                    raise InvalidArgument(f"IOBinding: output '{n}' is not a tensor and cannot be written into a buffer")
                b.update_inplace(OrtValue(v))
                results.append(b)
            elif isinstance(v, _kiln.Tensor):
                dev, device_id = b[1], b[2]
                if v.device != (dev, device_id if dev != "cpu" else 0) and v.dtype != 8:
                    t = _kiln.device_tensor(v.dtype, v.shape, dev, device_id) if dev != "cpu" else None
                    if t is None:
                        v = _kiln.host_copy(v)
                    else:
                        _kiln.copy(v, t)
                        v = t
                results.append(OrtValue(v))
            else:
                results.append(_output_to_python(v))
        self._results = results

    def get_outputs(self):
        """The outputs of the last run_with_iobinding as OrtValues (on the device they were bound to)."""
        if self._results is None:
            raise InvalidArgument("IOBinding.get_outputs: run_with_iobinding has not run")
        return list(self._results)

    def get_outputs_as_ortvaluevector(self):
        return self.get_outputs()

    def copy_outputs_to_cpu(self):
        """The outputs of the last run as numpy arrays (copies of device outputs)."""
        outs = []
        for n, r in zip(self._result_names, self.get_outputs()):
            if isinstance(r, OrtValue):
                a = r.numpy()
                # a bound host buffer is the caller's memory: a copy, as ONNX Runtime gives
                outs.append(np.array(a) if isinstance(self._outputs.get(n), OrtValue) and not r._on_device() else a)
            else:
                outs.append(r)
        return outs


# ONNX Runtime's module paths that scripts import exceptions from
# (from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument, ...)
capi = types.ModuleType(__name__ + ".capi", "ONNX Runtime's capi names, for scripts that import from them")
_pybind_state = types.ModuleType(__name__ + ".capi.onnxruntime_pybind11_state")
for _n in ("Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException", "InvalidProtobuf",
           "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail", "ModelLoadCanceled", "ModelRequiresCompilation",
           "NotFound"):
    setattr(_pybind_state, _n, globals().get(_n, Error))
for _n in ("SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder", "OrtValue",
           "NodeArg", "ModelMetadata", "get_available_providers", "get_all_providers", "get_device",
           "set_default_logger_severity", "set_default_logger_verbosity"):
    setattr(_pybind_state, _n, globals()[_n])
capi.onnxruntime_pybind11_state = _pybind_state
capi._pybind_state = _pybind_state
capi.onnxruntime_inference_collection = sys.modules[__name__]
sys.modules[capi.__name__] = capi
sys.modules[_pybind_state.__name__] = _pybind_state
sys.modules[capi.__name__ + "._pybind_state"] = _pybind_state
sys.modules[capi.__name__ + ".onnxruntime_inference_collection"] = sys.modules[__name__]
