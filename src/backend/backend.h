/* The backend interface: a provider ("cpu", "cuda") is a table of functions. A session makes one
 * instance of each provider it uses (kn_runtime), places every node on one of them
 * (kn_graph_place), and the executor calls through the table: allocate outputs where the kernel
 * wants them, copy inputs that are on the wrong side, run.
 *
 * Device awareness in one paragraph: a tensor's `device` says where its elements live. A kernel
 * of a device backend receives device tensors, except for the inputs its table marks "host"
 * (values an op's infer function must read: Reshape's shape, Slice's starts, ...), which the
 * executor keeps on (or brings to) the host; a kernel may also produce a host output (Shape). */
#ifndef KN_BACKEND_H
#define KN_BACKEND_H

#include "exec/kernel.h"
#include "exec/session.h"
#include "ir/graph.h"

#include <stdbool.h>

typedef enum kn_precision {
    KN_PRECISION_FP32 = 0, /* fp32 math everywhere, TF32 off */
    KN_PRECISION_TF32 = 1, /* fp32 tensors, TF32 tensor-core math in matrix products/convolutions */
    KN_PRECISION_FP16 = 2, /* matrix products/convolutions on fp16 operands, fp32 accumulation */
    KN_PRECISION_BF16 = 3, /* same with bf16 operands */
} kn_precision;

/* A provider's options, parsed. */
typedef struct kn_backend_config {
    int device_id;
    kn_precision precision;
    bool strict;          /* a node this provider cannot run is an error, not a fallback */
    int64_t workspace_mb; /* scratch memory limit for library calls (0 = the backend's default) */
    bool exhaustive;      /* tuning=exhaustive: measure candidate algorithms instead of heuristics */
    int graphs;           /* graphs=0|1: capture runs into device graphs, one per input-shape set; -1 (unset) = 1 */
    bool conv_graph;      /* conv_graph=0|1 (default 1): FusedConv's SiLU & co. in cuDNN's operation graph (cuda_conv_graph.c) */
    /* activations=fp32|half: with precision fp16/bf16 at optimisation level 3, whether activations
     * between the operators that run in that type stay in it (pass lower_precision) */
    bool half_activations;
    /* activations=fp32 given explicitly: on the CPU with bf16, the values residuals read stay fp32
     * even where values are kept channel-blocked (plain bf16 exact; pass cpu_bf16_values) */
    bool fp32_activations;
} kn_backend_config;

typedef struct kn_backend_ops {
    const char *name;
    kn_device device; /* where its kernels want their (non-host) inputs and outputs */
    /* Whether the provider can run on this machine; when not, *reason (static storage) says why. */
    int (*available)(const char **reason);
    size_t (*device_count)(void);
    const char *(*device_description)(size_t index);
    kiln_status (*init)(const kn_backend_config *cfg, void **state_out);
    void (*destroy)(void *state);
    /* The kernel for a node with these (static) input types, or NULL with the reason in why. */
    const void *(*select)(void *state, const kn_node *n, const kn_type *const *in, int n_in, char *why,
                          size_t cap);
    /* Whether input i / output o of the node with this kernel is on the host (NULL: the backend's
     * device for both). */
    bool (*input_on_host)(const void *kernel, const kn_node *n, int i);
    bool (*output_on_host)(const void *kernel, const kn_node *n, int o);
    /* Optional: input i is read for its shape only (Shape, Size): it stays where it is. */
    bool (*input_metadata_only)(const void *kernel, const kn_node *n, int i);
    /* Whether the kernel writes every element of its outputs (so they need not be zeroed). */
    bool (*overwrites)(const void *kernel);
    kiln_status (*run)(void *state, const void *kernel, kn_kernel_ctx *c);
    /* Optional: the kernel's prepare hook (exec/kernel.h: kn_params_fn), or NULL, with the size of
     * the block it fills in *bytes. The compiled plan (exec/plan.c) calls the hook once per node
     * when the session is created and hands the block to each call as kn_kernel_ctx.params, so the
     * kernel reads its attributes through kn_ctx_params instead of by name at every run. */
    kn_params_fn (*kernel_params)(const void *kernel, size_t *bytes);
    /* Device memory (NULL for the host backend). upload: persistent marks a value that lives as
     * long as the session (a constant), so the backend may cache derived forms of it. download
     * waits for the device work that produces the value. */
    kiln_status (*new_tensor)(void *state, kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out);
    kiln_status (*upload)(void *state, const kn_tensor *host, bool persistent, kn_tensor **dev_out);
    kiln_status (*download)(void *state, const kn_tensor *dev, kn_tensor **host_out);
    /* Optional: a host tensor the device copies into at full speed (pinned memory), for values the
     * caller gets on the host. NULL: plain host memory. */
    kiln_status (*new_host_tensor)(void *state, kiln_dtype dtype, int rank, const int64_t *dims, kn_tensor **out);
    kiln_status (*sync)(void *state);
    /* Optional: device memory statistics (allocation calls made, bytes live, peak bytes). */
    void (*stats)(void *state, uint64_t *device_allocs, size_t *live_bytes, size_t *peak_bytes);
    /* Optional: the device's fingerprint for the compiled-model cache key, as "name=value;..."
     * pairs (name, compute capability, driver and library versions: what changes the compiled
     * result); 0 when the device does not exist. */
    int (*fingerprint)(size_t device, char *buf, size_t cap);
    /* Optional: called at the start and end of each session run. */
    kiln_status (*run_begin)(void *state);
    kiln_status (*run_end)(void *state);
    /* Optional, for caller memory (kiln_tensor_wrap_device): whether `data` (bytes long) is memory
     * of device `device_id` this provider can use; an error saying why not. No session needed. */
    kiln_status (*check_pointer)(const void *data, size_t bytes, int device_id);
    /* Optional: copies src into dst (same dtype and shape; each on the host or on this backend's
     * device) in stream order, without waiting (a copy to pageable host memory may wait). */
    kiln_status (*copy)(void *state, const kn_tensor *src, kn_tensor *dst);
    /* Optional: graph capture (src/exec/graph_run.c). capture_begin starts recording the work
     * issued to the backend's stream; memory allocated or freed while recording stays reserved for
     * the graph. capture_end stops recording: with ok, it makes a replayable graph (*graph_out),
     * else (or when recording failed: the status says why) it discards what was recorded.
     * graph_launch replays a graph on the stream without waiting; graph_destroy frees it and
     * returns its memory. */
    kiln_status (*capture_begin)(void *state);
    kiln_status (*capture_end)(void *state, bool ok, void **graph_out);
    /* Optional: false while the backend runs stand-ins for work it would record otherwise (the CUDA
     * backend's own kernels while its libraries start): the run then goes uncaptured, and a later
     * one is recorded. NULL: always ready. */
    bool (*capture_ready)(void *state);
    /* Optional: whether work the backend does beside the runs (plans built in the background) is
     * still going, so that later runs may take faster kernels (kiln bench warms up past it). */
    bool (*background_busy)(void *state);
    kiln_status (*graph_launch)(void *state, void *graph);
    void (*graph_destroy)(void *state, void *graph);
    /* Optional: tuning results (the algorithm each library call was given, chosen by heuristics or
     * measured) as opaque key -> value records, kept in the compiled file so a warm start repeats
     * no choice. tuning_count: records held, and in *made_here those this session made itself (not
     * imported). tuning_record: record i, false past the end. tuning_import: one record read from a
     * file; it is validated (kind, sizes, ranges) and a malformed one is an error saying why. */
    int (*tuning_count)(void *state, int *made_here);
    bool (*tuning_record)(void *state, int i, const void **key, size_t *key_len, const void **val, size_t *val_len);
    kiln_status (*tuning_import)(void *state, const void *key, size_t key_len, const void *val, size_t val_len);
    /* Optional: begins, on a thread of the backend's own, the slow part of init for a device that a
     * session being created asked for (the CUDA driver's start and the device's context), so it runs
     * beside the session's other start-up work (hashing, reading, compiling); init then finds it done
     * or waits for it. Called once per session creation, for each listed provider. */
    void (*prepare)(int device_id);
    /* Optional: lanes, the per-call state of a device (its stream, library handles, scratch,
     * recorded graphs' memory, data-error record), so that calls overlap. A session's run context
     * opens one per such backend at its first call (lane_open) and keeps it until the session ends
     * (lane_close, before destroy). lane_enter binds it to the calling thread for one call: every
     * entry of this table the call makes on that thread then works on the lane; lane_leave unbinds
     * it, after waiting for the lane's work, and returns an error a device kernel recorded (an
     * index out of range: KILN_ERR_INVALID_ARGUMENT naming the node). lanes_overlap: whether calls
     * on different lanes may run at once (else the session's calls take turns on one context).
     * NULL lane_open: the backend has one state, and a session with it runs calls one at a time. */
    bool (*lanes_overlap)(void *state);
    kiln_status (*lane_open)(void *state, void **lane_out);
    void (*lane_close)(void *state, void *lane);
    void (*lane_enter)(void *state, void *lane);
    kiln_status (*lane_leave)(void *state, void *lane);
} kn_backend_ops;

typedef struct kn_backend {
    const kn_backend_ops *ops;
    void *state;
    kn_backend_config cfg;
    bool listed; /* the user asked for it (the CPU instance is always made for host work) */
} kn_backend;

/* The backends of one session: index = kn_node.provider. */
typedef struct kn_runtime {
    kn_backend backends[KN_MAX_PROVIDERS + 1];
    int n_backends;
    int cpu;                /* index of the CPU instance */
    const kn_graph *main;   /* the session's main graph (for the constants' device copies) */
    kn_tensor **const_dev;  /* per value of `main`: device copy of its constant, made on first use */
    int n_const_dev;
    /* where `main`'s host intermediates live (exec/memplan.h): the plan made with the session from
     * static input shapes, or those made by runs, one per input-shape set */
    struct kn_memplan *memplan;
    struct kn_memplan *shaped[4];
    uint64_t runs;
    unsigned char *arena; /* the plans' host memory (the largest one's bytes), made by the first run using one */
    uint64_t arena_bytes;
    /* device copies of the constants of control-flow bodies run on a device, by host tensor, made on
     * first use (so a Loop's body does not copy them again at each iteration) */
    const kn_tensor **body_const_host;
    kn_tensor **body_const_dev;
    int n_body_const, cap_body_const;
    /* const_dev and body_const_*: made by whichever call needs a constant first (calls of a
     * session with device lanes run at once) */
    pthread_mutex_t const_mu;
} kn_runtime;

extern const kn_backend_ops kn_backend_cpu;
/* Whether the CPU backend's run does work around this node's kernel (precision=bf16: it marks the
 * thread so that the node's products run in bf16), so that an executor must call the kernel through
 * kn_backend_cpu.run with this state, not directly. */
bool kn_cpu_node_wraps(void *state, const kn_node *n);
#ifdef KILN_HAVE_CUDA
extern const kn_backend_ops kn_backend_cuda;
/* cuBLASLt and cuDNN, loaded at first use (cuda_libs.c): loads them, says whether cuBLASLt loaded
 * (else why), how many of their functions resolved and whether cuDNN loaded. No GPU needed. */
int kn_cuda_libs_report(char *why, size_t cap, int *n_resolved, int *cudnn_loaded);
/* Tests: waits for a CUDA session's warm-start threads and returns how many imported library
 * calls they replayed (cuda_warmup.c). */
int kn_cuda_warmup_replayed(void *cuda_state);
/* Tests: how many products and convolutions of a CUDA session ran on kiln's stand-in kernels, and a
 * switch that makes every session see its libraries as still starting (the stand-ins in use, no
 * recording) until it is turned off or the warm-start threads are joined (cuda_warmup.c). */
int kn_cuda_standin_count(void *cuda_state);
void kn_cuda_warmup_hold(bool hold);
/* Tests: lanes open now (the primary one included) and the most calls inside at once on a CUDA
 * session's lanes (cuda_backend.c). */
void kn_cuda_lane_stats(void *cuda_state, int *lanes, int *peak_overlap);
#endif

/* The provider of this name compiled into this build, or NULL. */
const kn_backend_ops *kn_backend_find(const char *name);
/* The providers compiled into this build, in a fixed order ("cpu" first). */
int kn_backend_count(void);
const kn_backend_ops *kn_backend_at(int i);

/* Whether the named provider of this build has a kernel for the node with these input types
 * (from its kernel tables; no device needed). For the optimiser: a fusion is formed only when
 * every provider that may run it says yes. */
bool kn_backend_supports(const char *provider, const kn_node *n, const kn_type *const *in, int n_in, char *why,
                         size_t cap);

/* Parses one provider's options (keys and values as given to
 * kiln_session_options_append_provider); errors name the key and the bad value. */
kiln_status kn_backend_parse_config(const kn_provider_request *req, kn_backend_config *cfg);

/* Makes the instances for the session's providers, in order, with the CPU one always present.
 * A device provider that cannot run here is skipped when a later provider is listed, else an
 * error "no CUDA device: <reason>". */
kiln_status kn_runtime_create(const kiln_session_options *o, kn_runtime **out);
/* The listed providers' prepare, first thing in a session's creation (options it cannot parse are
 * left to kn_runtime_create to report). */
void kn_runtime_prepare(const kiln_session_options *o);
void kn_runtime_destroy(kn_runtime *rt);
/* The device copy of constant value v of rt->main for backend b (uploaded on first use). */
kiln_status kn_runtime_const_on(kn_runtime *rt, int b, int v, const kn_tensor *host, kn_tensor **out);
/* The same for `host`, a constant of a subgraph body (it lives as long as the session's model). */
kiln_status kn_runtime_body_const_on(kn_runtime *rt, int b, const kn_tensor *host, kn_tensor **out);

/* Placement: every live node of g and of its subgraph bodies gets a provider and a kernel (the body
 * of a node on the CPU runs on the CPU; that of a node on a device is placed by the same rules).
 * report (may be NULL) is told, per node, where it went and why when not on the first listed
 * provider. */
typedef enum kn_place_kind {
    KN_PLACE_FIRST = 0,    /* on the first listed provider */
    KN_PLACE_FALLBACK = 1, /* the first provider cannot run it: on a later one (why says why) */
    KN_PLACE_SHAPE = 2,    /* a small integer shape computation kept on the host by design */
    KN_PLACE_SUBGRAPH = 3, /* inside the body of a control-flow node on the CPU: on the CPU */
} kn_place_kind;
typedef void (*kn_place_report_fn)(void *arg, const kn_graph *g, const kn_node *n, int provider,
                                   kn_place_kind kind, const char *why);
kiln_status kn_graph_place(kn_graph *g, kn_runtime *rt, kn_place_report_fn report, void *arg);

#endif
