/* Sessions: a model loaded, checked, inferred, optimised and bound to kernels, ready to run. */
#ifndef KN_SESSION_H
#define KN_SESSION_H

#include "ir/graph.h"
#include "util/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>

#define KN_MAX_PROVIDERS 4
#define KN_MAX_PROVIDER_OPTIONS 16

typedef struct kn_provider_request {
    char *name;
    int n_options;
    char *keys[KN_MAX_PROVIDER_OPTIONS];
    char *values[KN_MAX_PROVIDER_OPTIONS];
} kn_provider_request;

typedef struct kn_dim_override {
    char *name;
    int64_t value;
} kn_dim_override;

struct kiln_session_options {
    kn_provider_request providers[KN_MAX_PROVIDERS];
    int n_providers;
    int opt_level;
    int intra_op_threads;
    kiln_log_level log_level;
    char **disabled_passes;
    int n_disabled_passes;
    char *dump_path;
    int cache_enabled;
    char *cache_dir;
    char *save_path, *load_path;
    int cache_strict;         /* a broken or mismatching cache entry is an error, not a rebuild */
    uint64_t cache_max_bytes; /* cache directory size limit; 0 = $KILN_CACHE_MAX_SIZE or 2 GiB */
    kn_dim_override *dims;
    int n_dims;
    int output_device; /* kiln_device_type where kiln_session_run returns outputs */
    uint64_t memory_limit;   /* bytes one run may hold (0 = no limit); not a compile option */
    int max_concurrent_runs; /* 0 = no bound; not a compile option */
};

/* kiln_run_options (api: kiln_run_options_*). */
struct kiln_run_options {
    uint32_t magic;
    _Atomic int terminate;
    _Atomic int64_t timeout_ms;
};
#define KN_RUN_OPTIONS_MAGIC 0x6b52554eu /* "kRUN" */
#define KN_SESSION_MAGIC 0x6b53534eu     /* "kSSN" */

struct kn_run_ctx;

typedef struct kn_io_info {
    int value;      /* value id in the main graph */
    int64_t dims[KILN_MAX_RANK];
    const char *dim_names[KILN_MAX_RANK];
} kn_io_info;

struct kiln_session {
    kiln_session_options opts;
    kn_model *model;
    kn_threadpool *pool;
    kn_buffer_pool *buffers;
    struct kn_runtime *rt; /* the provider instances nodes are placed on */
    kn_io_info *inputs;
    int n_inputs;
    kn_io_info *outputs;
    int n_outputs;
    struct kn_graph_cache *graphs; /* captured runs (graph_run.c); NULL when runs are not captured */
    /* the compiled plan (exec/plan.h): the steps every run walks, made once after placement and
     * read only while calls run; each call's run context points at it */
    struct kn_plan *plan;
    /* Called once as the session is destroyed, while its providers still exist: the compiled
     * cache writes the tuning results its runs made into the session's compiled file. */
    void (*at_end)(kiln_session *s);
    void *at_end_arg;
    /* Concurrent calls (session.c). Everything a call mutates is in a run context from the pool
     * (free list under ctx_mu; a kn_call_ctx, graph_run.h): the executor's part, a lane per device
     * backend (its stream, library handles, scratch, recorded graphs) and the graphs recorded on
     * it. The rest of the session is read-only while calls run, except what is locked: the CPU
     * backend's constant cache, the runtime's device copies of constants, and the device
     * backend's shared tables and allocator (each its own lock). A device backend without lanes
     * (or KILN_CUDA_LANES=0) makes the session serial: one run context, calls take turns. */
    _Atomic uint32_t magic;      /* KN_SESSION_MAGIC while the session is live */
    pthread_mutex_t ctx_mu;
    pthread_cond_t ctx_cv;       /* a context came back / the last call left */
    struct kn_run_ctx *free_ctx; /* contexts not in use */
    int n_ctx;                   /* contexts made */
    int active;                  /* calls inside (running, or waiting for a context) */
    int running;                 /* calls holding a context */
    int peak_active;             /* the most calls holding a context at once */
    bool closing;                /* kiln_session_destroy has begun: new calls are refused */
    bool serial;                 /* a device provider without lanes: one run context, one call at a time */
    bool sync_made;              /* ctx_mu, ctx_cv initialised */
    /* the environment's switches for runs, read once as the session is made (finish_session):
     * KILN_SHAPE_MEMO=0, KILN_MEMORY_PLAN=0, KILN_OUTPUTS_IN_PLACE=0 (each for measuring and
     * checking what its part saves) and the tensor size limit (KILN_MAX_TENSOR_BYTES) */
    bool memo_off, memplan_off, outputs_copy;
    uint64_t bytes_limit;
};

/* For tests: run contexts made so far and the most calls seen inside at once. */
void kn_session_ctx_stats(const kiln_session *s, int *contexts, int *peak_active);

typedef struct kn_graph_cache kn_graph_cache;

kiln_status kn_session_options_copy(const kiln_session_options *src, kiln_session_options *dst);
void kn_session_options_clear(kiln_session_options *o);
void kn_session_options_defaults(kiln_session_options *o);
/* Builds a session around a loaded model (takes ownership of it, also on failure). */
kiln_status kn_session_from_model(kn_model *model, const kiln_session_options *options,
                                  kiln_session **out);
/* Builds a session around a model read from a compiled file (already resolved and optimised:
 * only placement, threads and I/O are set up). Takes ownership of the model, also on failure. */
kiln_status kn_session_from_compiled(kn_model *model, const kiln_session_options *options,
                                     kiln_session **out);

#endif
