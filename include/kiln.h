/* kiln: an ONNX inference runtime.
 *
 * This is the only header a user includes. Conventions:
 *  - Every fallible call returns kiln_status; KILN_OK is 0. Results come back through a trailing
 *    *_out argument, which is set to NULL (or 0) on failure.
 *  - After a failure, kiln_last_error() returns a message for the calling thread that says what
 *    failed, where (file offset, node name, operator, shapes) and why.
 *  - Handles are opaque and come in create/destroy pairs; destroy(NULL) does nothing.
 *  - Ownership is stated on every pointer: "copied" (kiln keeps its own copy; the caller may free
 *    it after the call), "borrowed" (read during the call only), "must outlive X" (kiln keeps
 *    the pointer), or "owned by kiln" (valid until the named handle is destroyed).
 *  - Status values are never renumbered.
 */
#ifndef KILN_H
#define KILN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define KILN_API __declspec(dllexport)
#elif defined(__GNUC__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0

/* ------------------------------------------------------------------ status */

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_INVALID_ARGUMENT = 1, /* a NULL or out-of-range argument, a wrong input name/type/shape */
    KILN_ERR_INVALID_MODEL = 2,    /* the model file or graph is malformed */
    KILN_ERR_UNSUPPORTED = 3,      /* an operator, opset, type or attribute kiln does not handle */
    KILN_ERR_IO = 4,               /* a file could not be opened, read or written */
    KILN_ERR_OUT_OF_MEMORY = 5,
    KILN_ERR_SHAPE = 6,            /* shapes that do not fit together (inference or run time) */
    KILN_ERR_NOT_FOUND = 7,        /* a named input/output/provider does not exist */
    KILN_ERR_NO_DEVICE = 8,        /* a provider was asked for but no device is usable */
    KILN_ERR_RUNTIME = 9,          /* a kernel failed while running */
    KILN_ERR_CACHE = 10,           /* a compiled-cache file is invalid or does not match (strict mode) */
    KILN_ERR_INTERNAL = 11,        /* a broken internal invariant: a kiln bug; the message has file:line */
    KILN_ERR_MISUSE = 12,          /* the API used against its contract: a handle that is not live (destroyed,
                                      or not what the call takes), a session used while it is destroyed */
    KILN_ERR_CANCELLED = 13,       /* the run was stopped by kiln_run_options_set_terminate */
    KILN_ERR_DEADLINE = 14,        /* the run passed its kiln_run_options_set_timeout_ms limit */
    KILN_STATUS_COUNT_
} kiln_status;

/* The message of the last failed call on this thread. Owned by kiln: valid until the next kiln
 * call on this thread. Never NULL (empty when there was no failure). */
KILN_API const char *kiln_last_error(void);
/* A constant name for a status, e.g. "KILN_ERR_SHAPE". Never NULL. */
KILN_API const char *kiln_status_name(kiln_status status);
/* "MAJOR.MINOR.PATCH" (static storage). */
KILN_API const char *kiln_version(void);

/* ------------------------------------------------------------------ element types */

/* Element types, numbered as ONNX TensorProto.DataType. */
typedef enum kiln_dtype {
    KILN_DTYPE_UNDEFINED = 0,
    KILN_DTYPE_FLOAT = 1,
    KILN_DTYPE_UINT8 = 2,
    KILN_DTYPE_INT8 = 3,
    KILN_DTYPE_UINT16 = 4,
    KILN_DTYPE_INT16 = 5,
    KILN_DTYPE_INT32 = 6,
    KILN_DTYPE_INT64 = 7,
    KILN_DTYPE_STRING = 8,
    KILN_DTYPE_BOOL = 9,
    KILN_DTYPE_FLOAT16 = 10,
    KILN_DTYPE_DOUBLE = 11,
    KILN_DTYPE_UINT32 = 12,
    KILN_DTYPE_UINT64 = 13,
    KILN_DTYPE_COMPLEX64 = 14,
    KILN_DTYPE_COMPLEX128 = 15,
    KILN_DTYPE_BFLOAT16 = 16,
    KILN_DTYPE_FLOAT8E4M3FN = 17,
    KILN_DTYPE_FLOAT8E4M3FNUZ = 18,
    KILN_DTYPE_FLOAT8E5M2 = 19,
    KILN_DTYPE_FLOAT8E5M2FNUZ = 20,
    KILN_DTYPE_UINT4 = 21,
    KILN_DTYPE_INT4 = 22,
    KILN_DTYPE_FLOAT4E2M1 = 23,
    KILN_DTYPE_FLOAT8E8M0 = 24,
    KILN_DTYPE_UINT2 = 25,
    KILN_DTYPE_INT2 = 26,
    KILN_DTYPE_COUNT_
} kiln_dtype;

/* "float", "int64", ... (static storage); "?" for an unknown value. */
KILN_API const char *kiln_dtype_name(kiln_dtype dtype);
/* Bytes per element (sizeof(char*) for STRING); 0 for sub-byte and unknown types. The sub-byte
 * types (uint4, int4, float4e2m1: 4 bits; uint2, int2: 2 bits) are stored packed as ONNX stores
 * them, element 0 in the lowest bits of byte 0: a tensor of n elements holds ceil(n*bits/8) bytes. */
KILN_API size_t kiln_dtype_size(kiln_dtype dtype);

/* ------------------------------------------------------------------ tensors */

#define KILN_MAX_RANK 12

/* A dense tensor on the host. Elements are row-major. STRING tensors hold `const char *` elements
 * (NUL-terminated UTF-8). */
typedef struct kiln_tensor kiln_tensor;

/* A tensor that owns zero-initialised memory for its elements. dims: borrowed. */
KILN_API kiln_status kiln_tensor_create(kiln_dtype dtype, const int64_t *dims, int rank,
                                        kiln_tensor **tensor_out);
/* A tensor that wraps caller memory without copying it. data: must outlive the tensor and hold
 * `bytes` >= elements * kiln_dtype_size(dtype) bytes (ceil(elements * bits / 8) for the packed
 * sub-byte types). dims: borrowed. Not for STRING. */
KILN_API kiln_status kiln_tensor_wrap(kiln_dtype dtype, const int64_t *dims, int rank, void *data,
                                      size_t bytes, kiln_tensor **tensor_out);
KILN_API void kiln_tensor_destroy(kiln_tensor *tensor);
KILN_API kiln_dtype kiln_tensor_dtype(const kiln_tensor *tensor);
KILN_API int kiln_tensor_rank(const kiln_tensor *tensor);
/* The dims array (rank entries). Owned by the tensor. */
KILN_API const int64_t *kiln_tensor_dims(const kiln_tensor *tensor);
KILN_API int64_t kiln_tensor_element_count(const kiln_tensor *tensor);
/* The element memory: owned by the tensor (or the caller's, for a wrapped tensor). */
KILN_API void *kiln_tensor_data(kiln_tensor *tensor);
KILN_API size_t kiln_tensor_bytes(const kiln_tensor *tensor);

/* Where a tensor's elements live. */
typedef enum kiln_device_type {
    KILN_DEVICE_HOST = 0, /* host memory (kiln_tensor_create, kiln_tensor_wrap) */
    KILN_DEVICE_CUDA = 1, /* CUDA device memory */
} kiln_device_type;

/* Device tensors (the IOBinding of ONNX Runtime, the bindings of TensorRT): a session whose
 * provider runs on that device reads such an input where it is (no copy through the host) and can
 * leave its outputs there (kiln_session_options_set_output_device, or caller-provided outputs with
 * kiln_session_run_into).
 *
 * A tensor that wraps caller CUDA memory without copying it. data: a device pointer (cudaMalloc,
 * cudaMallocAsync pools, or managed memory) on CUDA device `device_id`; must outlive the tensor and
 * hold `bytes` >= the elements' bytes (as kiln_tensor_wrap). dims: borrowed. Not for STRING.
 * Errors: KILN_ERR_NO_DEVICE when this build has no CUDA backend or no CUDA device is usable;
 * KILN_ERR_INVALID_ARGUMENT when data is NULL (with bytes > 0), is host memory, is on another
 * device than device_id, or bytes is too small. kiln_tensor_data returns the device pointer.
 * Synchronisation: kiln_session_run reads the memory on its own stream when it is called, so the
 * work that writes an input must be finished (or synchronised) before the call. */
KILN_API kiln_status kiln_tensor_wrap_device(kiln_dtype dtype, const int64_t *dims, int rank, void *data,
                                             size_t bytes, int device_id, kiln_tensor **tensor_out);
/* Where the tensor's elements live; *device_id_out (may be NULL) receives the device ordinal (0 on
 * the host). KILN_DEVICE_HOST for NULL. */
KILN_API kiln_device_type kiln_tensor_device(const kiln_tensor *tensor, int *device_id_out);

/* A tensor that owns new memory on a device (OrtValue.ortvalue_from_shape_and_type of ONNX
 * Runtime): KILN_DEVICE_CUDA with device_id, or KILN_DEVICE_HOST (then as kiln_tensor_create).
 * kiln_tensor_destroy frees it; it needs no session and may outlive every session. Device
 * elements are not initialised: fill them with kiln_tensor_copy, or pass the tensor as an output
 * of kiln_session_run_into. dims: borrowed. Not for STRING.
 * The memory comes from a per-process allocator of that device, made by the first call for it
 * (on CUDA: the device's context and a stream) and kept until the process ends; freed tensors'
 * blocks are kept there for reuse.
 * Errors: KILN_ERR_NO_DEVICE when this build has no backend for the device, no such device is
 * usable (the message says why) or device_id is past the devices; KILN_ERR_OUT_OF_MEMORY;
 * KILN_ERR_INVALID_ARGUMENT for a bad device type, dtype or shape. */
KILN_API kiln_status kiln_tensor_create_device(kiln_dtype dtype, const int64_t *dims, int rank,
                                               kiln_device_type device, int device_id,
                                               kiln_tensor **tensor_out);
/* Copies the elements of src into dst (both borrowed): host to device, device to host, device to
 * device (the same or another device) or host to host. Both must be numeric tensors with the same
 * element type and dims (else KILN_ERR_INVALID_ARGUMENT naming both; nothing is written). The
 * copy is complete when the call returns: the host may read dst and reuse src. Device memory
 * written by other work (a session's run, the caller's kernels) must be complete before the call,
 * as for kiln_session_run's inputs. KILN_ERR_NO_DEVICE as for kiln_tensor_create_device. */
KILN_API kiln_status kiln_tensor_copy(const kiln_tensor *src, kiln_tensor *dst);

/* ------------------------------------------------------------------ session options */

typedef enum kiln_log_level {
    KILN_LOG_ERROR = 0,
    KILN_LOG_WARNING = 1,
    KILN_LOG_INFO = 2,
    KILN_LOG_DEBUG = 3
} kiln_log_level;

typedef enum kiln_opt_level {
    KILN_OPT_NONE = 0,     /* run the graph as written */
    KILN_OPT_BASIC = 1,    /* backend-independent clean-ups and constant folding */
    KILN_OPT_EXTENDED = 2, /* fusions into kiln's own operators, elementwise chains included */
    KILN_OPT_ALL = 3       /* the default: backend-dependent rewrites on top of level 2: the
                              half-precision activations of cuda's activations=half option, and
                              channels-last convolutions on CUDA at batch 4+ (fp16/bf16), 8+ (fp32) */
} kiln_opt_level;

typedef struct kiln_session_options kiln_session_options;

KILN_API kiln_status kiln_session_options_create(kiln_session_options **options_out);
KILN_API void kiln_session_options_destroy(kiln_session_options *options);

/* Appends an execution provider; providers are tried in the order they were appended, and each
 * node runs on the first one that supports it. With none appended, "cpu" is used.
 * name: "cpu" or "cuda" (copied). keys/values: n provider options as strings (copied), e.g.
 *   cpu:  "precision"="fp32|bf16": with bf16 the matrix products (MatMul, Gemm, Conv,
 *         ConvTranspose, kiln's fused MatMul/Gemm/Conv) round their operands to bfloat16 and
 *         multiply them with AVX512_BF16 (vdpbf16ps) or AMX, accumulating in fp32; weights are
 *         converted once per session (about 2^-9 relative error per product). A value read only by
 *         such convolutions is stored in bf16 (they would round it anyway: no change in results).
 *         On CPUs with AMX the values between convolutions are kept in 32-channel bf16 blocks, and
 *         then a residual block's output is stored in bf16 too, as OpenVINO's bf16 keeps its
 *         activations (ResNet-50: 4.8e-3 relative L2 against fp32, OpenVINO bf16 4.7e-3).
 *         "activations"="fp32" spelled out keeps every value a residual reads in fp32 (bf16 mode
 *         then exact to its products' rounding); "half" stores the block outputs in bf16 on every
 *         route. A CPU without AVX512_BF16 refuses bf16 when the
 *         session is created (KILN_ERR_NO_DEVICE, the message says why); "fp16" and "tf32" are
 *         refused too. Default "fp32".
 *   cuda: "device_id"="0", "precision"="fp32|tf32|fp16|bf16", "strict"="0|1",
 *         "workspace_mb"="N", "tuning"="exhaustive|heuristic": how each convolution's cuDNN
 *         algorithm and each product's cuBLASLt algorithm are chosen: by measuring the candidates
 *         on the first run with each shape (the default: every cuDNN algorithm, cuBLASLt's eight
 *         best-ranked; milliseconds to tens of milliseconds per distinct problem, once) or by the
 *         libraries' heuristic ranking (no measuring, often slower kernels). The choices are kept
 *         in the compiled model (cache entry or saved file), so a later session from it makes
 *         none of them again.
 *         "activations"="fp32|half": with precision fp16 or bf16, "half" keeps the activations
 *         between the operators that run in that type in it at optimisation level 3 (weights
 *         converted once, Casts where values enter and leave; pass "lower_precision"): no
 *         conversion kernels around each product (bert_mini 0.28 ms instead of 1.0 ms per run in
 *         fp16 on an H200). The default "fp32" keeps them float32 (each product converts its
 *         operands with a power-of-two scale per tensor): slower, safe for any range. With "half",
 *         a float16 activation above 65504 becomes infinite and one below 2^-24 zero, and in
 *         bfloat16 every operator rounds to 8 significant bits.
 *         "graphs"="0|1": capture a run into a CUDA graph and replay it (default 1: one graph per
 *         input-shape set, at most 4, least recently used replaced; a model whose shapes never
 *         repeat is never captured). The first run with a set of input shapes runs as usual
 *         (it makes every lazy choice: algorithms, converted weights, memory); the next one with
 *         the same shapes is captured, and later ones replay it: inputs are copied into the
 *         graph's own buffers and outputs copied out. A session that cannot be captured (a node
 *         placed on the CPU that reads device data, an operator whose output shape depends on
 *         data, ...) runs uncaptured; the reason is logged at KILN_LOG_INFO.
 *         "conv_graph"="0|1": a channels-last half-precision FusedConv whose activation cuDNN's
 *         legacy call and cuBLASLt's epilogue do not take (SiLU, Sigmoid, Tanh, Gelu) runs as one
 *         cuDNN operation graph, convolution to activation, instead of the convolution and a pass
 *         (YOLOv8s b1 fp16 on an H200: 0.75 ms instead of 1.01). Default 1. cuDNN compiles each
 *         graph's kernels at run time (150-220 ms a convolution), so threads beside the runs build
 *         them while the first runs take the old way, and later runs take each graph once it is
 *         built (they are recorded into a CUDA graph only when all are). The plans made are kept
 *         in the compiled model (cache entry or saved file), so a later session from it makes each
 *         from there in about 1.5 ms: the cost is paid once per machine, model and input shape.
 *         (A compiled file then carries cuDNN's compiled kernels: load only files you trust, as
 *         you would a TensorRT engine.)
 * An unknown provider name is KILN_ERR_NOT_FOUND; an unknown key or a bad value is
 * KILN_ERR_INVALID_ARGUMENT naming the key. */
KILN_API kiln_status kiln_session_options_append_provider(kiln_session_options *options,
                                                          const char *name,
                                                          const char *const *keys,
                                                          const char *const *values, size_t n);
/* 0..3, default 3. */
KILN_API kiln_status kiln_session_options_set_opt_level(kiln_session_options *options, int level);
/* Threads for work inside one operator; 0 = one per core (default). */
KILN_API kiln_status kiln_session_options_set_intra_op_threads(kiln_session_options *options,
                                                               int threads);
/* Messages at this level and more severe go to stderr. Default KILN_LOG_WARNING. */
KILN_API kiln_status kiln_session_options_set_log_level(kiln_session_options *options,
                                                        kiln_log_level level);
/* Disables an optimisation pass by name (copied); may be called several times. */
KILN_API kiln_status kiln_session_options_disable_pass(kiln_session_options *options,
                                                       const char *pass_name);
/* Writes the optimised graph to this .onnx path when the session is created (copied).
 * NULL or "" unsets it. */
KILN_API kiln_status kiln_session_options_set_dump_path(kiln_session_options *options,
                                                        const char *path);
/* Compiled-model cache. dir: directory for the automatic cache (copied; NULL or "" = default
 * $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln). enabled: 0 turns it off. */
KILN_API kiln_status kiln_session_options_set_cache(kiln_session_options *options, int enabled,
                                                    const char *dir);
/* Explicit compiled-file paths (copied); NULL or "" unsets. */
KILN_API kiln_status kiln_session_options_set_compiled_paths(kiln_session_options *options,
                                                             const char *save_path,
                                                             const char *load_path);
/* Strict cache: a cache entry that is corrupt, truncated or does not match is an error
 * (KILN_ERR_CACHE naming the file and the field) instead of being rebuilt. Default 0. */
KILN_API kiln_status kiln_session_options_set_cache_strict(kiln_session_options *options, int strict);
/* Size limit of the cache directory in bytes; beyond it the least recently used entries are
 * deleted. 0 = $KILN_CACHE_MAX_SIZE (e.g. "500M"), else 2 GiB. */
KILN_API kiln_status kiln_session_options_set_cache_limit(kiln_session_options *options, uint64_t max_bytes);
/* Where kiln_session_run returns outputs. KILN_DEVICE_HOST (default): on the host.
 * KILN_DEVICE_CUDA: in the CUDA memory of the session's device (an output made on the host is
 * copied there; strings, sequences and optionals stay on the host: check kiln_tensor_device). Such
 * an output is the caller's (kiln_tensor_destroy), may outlive the session, and is complete when
 * the run returns. KILN_ERR_INVALID_ARGUMENT for another value; a session with no CUDA provider
 * fails to be created with KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_session_options_set_output_device(kiln_session_options *options,
                                                            kiln_device_type device);
/* Fixes a symbolic input dimension (by name) to a value for compilation. name: copied. */
KILN_API kiln_status kiln_session_options_set_dim(kiln_session_options *options, const char *name,
                                                  int64_t value);

/* ------------------------------------------------------------------ sessions */

typedef struct kiln_session kiln_session;

/* path: borrowed. options: borrowed (may be NULL for defaults); the session keeps a copy.
 * path may be a compiled .kiln file: it runs with the provider options it was compiled with. With
 * no provider appended it takes the file's providers; a provider appended without an option takes
 * the file's value of it (a file compiled with cpu precision=bf16 opened with plain "cpu" runs in
 * bf16); one appended with another value than the file's fails with KILN_ERR_CACHE naming both. */
KILN_API kiln_status kiln_session_create(const char *path, const kiln_session_options *options,
                                         kiln_session **session_out);
/* data: borrowed; kiln copies what it needs (external data is not allowed from memory unless
 * base_dir is given: borrowed, may be NULL). */
KILN_API kiln_status kiln_session_create_from_memory(const void *data, size_t size,
                                                     const char *base_dir,
                                                     const kiln_session_options *options,
                                                     kiln_session **session_out);
KILN_API void kiln_session_destroy(kiln_session *session);

/* Description of a graph input or output. All pointers are owned by the session. */
typedef struct kiln_value_info {
    const char *name;
    kiln_dtype dtype;
    int rank;                      /* -1 when the rank is unknown */
    const int64_t *dims;           /* rank entries; -1 for a symbolic or unknown dimension */
    const char *const *dim_names;  /* rank entries; the symbol of a symbolic dimension, else NULL */
} kiln_value_info;

/* The providers a session runs on, in order of preference: those listed that could be used (a
 * listed provider passed over for a later one is not among them), the CPU when none was listed, and
 * for a compiled file what the session took from it. */
KILN_API size_t kiln_session_provider_count(const kiln_session *session);
/* The index-th of them: its name and the options it runs with (given, or taken from a compiled
 * file). Every pointer is owned by the session; any _out may be NULL. */
KILN_API kiln_status kiln_session_provider(const kiln_session *session, size_t index, const char **name_out,
                                           size_t *n_options_out, const char *const **keys_out,
                                           const char *const **values_out);

KILN_API size_t kiln_session_input_count(const kiln_session *session);
KILN_API size_t kiln_session_output_count(const kiln_session *session);
KILN_API kiln_status kiln_session_input_info(const kiln_session *session, size_t index,
                                             kiln_value_info *info_out);
KILN_API kiln_status kiln_session_output_info(const kiln_session *session, size_t index,
                                              kiln_value_info *info_out);

/* Runs the model.
 * input_names/inputs: n_inputs pairs, borrowed for the call; every graph input without a default
 *   must be given.
 * output_names: n_outputs names, borrowed; NULL means every output in graph order (then n_outputs
 *   must equal kiln_session_output_count).
 * outputs_out: an array of n_outputs slots the caller provides; each receives a new tensor owned
 *   by the caller (free with kiln_tensor_destroy). On failure every slot is NULL.
 * Inputs may be host tensors or CUDA tensors (kiln_tensor_wrap_device) on the session's device;
 * a CUDA input is read where it is. A CUDA input given to a session without a CUDA provider, or on
 * another device, is KILN_ERR_INVALID_ARGUMENT naming the input.
 * Threads: any number of threads may call kiln_session_run and kiln_session_run_into (and the
 * _with forms) on one session at once. The compiled model and its weights are shared; each call
 * takes a run context (intermediate buffers, memory-plan arena, scratch) from the session's pool
 * and gives it back on return, so the pool grows to the concurrency the session sees
 * (kiln_session_options_set_max_concurrent_runs bounds it). CPU calls run in parallel; on CUDA a
 * run context also holds a stream of its own (with its library handles, workspace and captured
 * graphs), so calls overlap on the device (KILN_CUDA_LANES=0: they take turns). Every call waits
 * for its device work before it returns. An index out of range found by a CUDA kernel (Gather,
 * the scatters, ...) fails the call with KILN_ERR_INVALID_ARGUMENT naming the node. Destroying the
 * session while a call runs is the caller's error: calls that enter during kiln_session_destroy
 * return KILN_ERR_MISUSE, and destroy waits for calls already inside. */
KILN_API kiln_status kiln_session_run(kiln_session *session, const char *const *input_names,
                                      kiln_tensor *const *inputs, size_t n_inputs,
                                      const char *const *output_names, size_t n_outputs,
                                      kiln_tensor **outputs_out);
/* As kiln_session_run, but the caller provides the outputs: outputs[i] (borrowed, not NULL)
 * receives output i in place. Each may be on the host (kiln_tensor_create, kiln_tensor_wrap) or on
 * the session's CUDA device (kiln_tensor_wrap_device), and must have exactly the output's element
 * type and shape (else KILN_ERR_INVALID_ARGUMENT naming the output; nothing is written when the
 * model's declared type of that output already disagrees with the tensor; a mismatch in a dim the
 * model leaves symbolic is found as the output is computed, and outputs computed before it may
 * have been written). This is the form for zero-allocation runs with CUDA graphs: bind the same
 * buffers every run. On the CPU the nodes that make host outputs write them straight into these
 * tensors (no copy after the run); a tensor that overlaps an input or another output's tensor is
 * written by a copy after the run instead. On an error during the run (a failing node,
 * cancellation, a timeout) the outputs' contents are unspecified. On return the outputs are
 * complete. Numeric tensors only. */
KILN_API kiln_status kiln_session_run_into(kiln_session *session, const char *const *input_names,
                                           kiln_tensor *const *inputs, size_t n_inputs,
                                           const char *const *output_names, size_t n_outputs,
                                           kiln_tensor *const *outputs);

/* ------------------------------------------------------------------ build and devices */

/* How many providers this build has, and their names ("cpu", "cuda"); static storage. */
KILN_API size_t kiln_provider_count(void);
KILN_API const char *kiln_provider_name(size_t index);
/* Whether a provider can be used on this machine now; when not, *reason_out (static or thread
 * storage, may be NULL) says why, e.g. "no CUDA device: cudaGetDeviceCount: no driver". */
KILN_API int kiln_provider_available(const char *name, const char **reason_out);
/* Devices seen by a provider: a one-line description each, e.g. "cpu: 2 cores, avx512f". */
KILN_API size_t kiln_device_count(const char *provider);
KILN_API const char *kiln_device_description(const char *provider, size_t index);


/* ------------------------------------------------------------------ bounded runs */

/* Options for individual runs (the RunOptions of ONNX Runtime). One object may serve many runs,
 * on many threads at once. */
typedef struct kiln_run_options kiln_run_options;

KILN_API kiln_status kiln_run_options_create(kiln_run_options **options_out);
/* The caller must not destroy the options while a run that uses them is inside kiln. */
KILN_API void kiln_run_options_destroy(kiln_run_options *options);
/* terminate != 0: every run using these options stops at its next check (between nodes, in each
 * Loop/Scan iteration, between the parallel chunks of a CPU kernel) and returns
 * KILN_ERR_CANCELLED; runs started while it is set fail at once. 0 clears it. Safe to call from
 * any thread at any time (e.g. a watchdog or a signal-handling thread). A stopped run leaks
 * nothing and leaves the session usable. */
KILN_API kiln_status kiln_run_options_set_terminate(kiln_run_options *options, int terminate);
/* A run using these options that is still going timeout_ms milliseconds after it was called
 * returns KILN_ERR_DEADLINE (checked where terminate is). 0 (the default) = no limit; negative is
 * KILN_ERR_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_run_options_set_timeout_ms(kiln_run_options *options, int64_t timeout_ms);

/* kiln_session_run and kiln_session_run_into with run options (borrowed for the call; NULL = none,
 * as the plain forms). */
KILN_API kiln_status kiln_session_run_with(kiln_session *session, const kiln_run_options *run_options,
                                           const char *const *input_names, kiln_tensor *const *inputs,
                                           size_t n_inputs, const char *const *output_names, size_t n_outputs,
                                           kiln_tensor **outputs_out);
KILN_API kiln_status kiln_session_run_into_with(kiln_session *session, const kiln_run_options *run_options,
                                                const char *const *input_names, kiln_tensor *const *inputs,
                                                size_t n_inputs, const char *const *output_names,
                                                size_t n_outputs, kiln_tensor *const *outputs);

/* A limit on the memory one run of the session holds at a time: the bytes of the values it has
 * computed and not yet released (intermediates, whether in the memory plan's arena or not; the
 * outputs a Loop or Scan body hands its operator; on the host and on a device). A node whose
 * outputs would take a run past it fails the run with KILN_ERR_OUT_OF_MEMORY naming the node, the
 * value and the limit (nothing leaks; the session stays usable). 0 (the default) = no limit.
 * Weights, the caller's inputs, and the run's scratch inside kernels are not counted. */
KILN_API kiln_status kiln_session_options_set_memory_limit(kiln_session_options *options, uint64_t max_bytes);
/* At most this many calls of one session run at once; more wait for one to return. 0 (the
 * default) = no bound (the session keeps one run context per call it has seen at once). */
KILN_API kiln_status kiln_session_options_set_max_concurrent_runs(kiln_session_options *options, int max_runs);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H */
