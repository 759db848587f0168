/* kiln.Attention through cuDNN's fused attention: the scaled dot-product as one cuDNN operation
 * graph (the graph API's flash-attention engines, the kernels PyTorch's SDPA runs on Hopper).
 * On the H200, BERT-base's attention at batch 32 took 35 us a layer in kiln's own flash kernel
 * (cu_flash_attention.cu) and 8.9 us in cuDNN's (bench/results/gpu-profile-2026-12-03.md).
 *
 * The graph, in cuDNN's backend terms (Q [b, h, sq, d], KT [b, h, d, sk], V [b, h, sk, d]):
 *   S = Q x KT (float), S = S * scale (a scalar passed by value), S = S + mask (optional),
 *   softmax as reductions and pointwise steps (max, subtract, exp, sum, divide; the engine
 *   recognises the pattern), P in the inputs' type, O = P x V.
 * float16/bfloat16 with float accumulation; head dims contiguous (K's too: a K whose keys are
 * contiguous is copied to rows first); an additive mask of the inputs' type that broadcasts to
 * [b, h, sq, sk]. A plan per problem (shapes, strides, mask layout) is built once and shared by the
 * session's lanes and by every node of that problem (BERT's 12 layers share one); where cuDNN has
 * no engine for it the problem is marked and the node runs kiln's own kernels. The engines compile
 * their kernels when the plan is built (NVRTC); the plan goes to the compiled file as a tuning
 * record (KN_CU_TUNE_SDPA: its serialized form), from which a later session makes it instead.
 *
 * Differences from kiln's own kernel, within the type's precision: the scaled and masked scores
 * stay in float (kiln's kernel rounds them to the inputs' type, as the unfused graph does) and the
 * probabilities are normalised before the second product. Bool masks stay on kiln's kernel (see
 * kn_cu_sdpa_run); a float mask with a row of -inf is one of the tests' forms: what cuDNN gives
 * for a row with no key is checked against kiln's answer (the same, on the H200).
 *
 * The softmax's statistics branch (log of the sum plus the max, to a virtual tensor) is part of the
 * graph although nothing reads it: cuDNN's frontend (before 9.21) gives every softmax of its SDPA
 * that branch, and the engines match that pattern. Without it (H200, cuDNN 9.14) the graph
 * finalises but no engine takes it; with it, heuristics mode A ranks an engine first. On by
 * default; KILN_CUDA_SDPA=0 keeps every node on kiln's own kernels. */
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_dnn_graph.h"

#include "util/clock.h"
#include "util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_HAVE_CUDNN

#define SDPA_CANDIDATES 4

/* unique ids of the graph's tensors */
enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_SCALE, UID_BIAS,
    UID_S = 20, UID_SCALED, UID_BIASED, UID_MAX, UID_SUB, UID_EXP, UID_SUM, UID_P, UID_LOG, UID_STATS
};

typedef kn_cu_sdpa_key sdpa_key;

typedef struct sdpa_plan {
    sdpa_key key;
    cudnnBackendDescriptor_t plan; /* NULL: cuDNN has no engine for this problem */
    int64_t ws;
    bool built; /* built here (or tried): not made from a record */
} sdpa_plan;

static _Atomic unsigned long long sdpa_runs, plans_loaded;

unsigned long long kn_cu_sdpa_runs(void) { return sdpa_runs; }
unsigned long long kn_cu_sdpa_plans_loaded(void) { return plans_loaded; }

/* KILN_CUDA_SDPA=0 turns it off (to compare, or to rule it out). */
static bool sdpa_enabled(void) {
    const char *v = getenv("KILN_CUDA_SDPA");
    return !(v && !strcmp(v, "0"));
}

/* A 4-D operand's strides: a dim of 1 gets the stride a dense layout would give it (a view's
 * stride there is arbitrary, 0 included, and cuDNN reads 0 as overlapping rows). False where one
 * does not fit the key's 32 bits. */
static bool strides4(int32_t *out, const int64_t dims[4], int64_t s0, int64_t s1, int64_t s2, int64_t s3) {
    int64_t st[4] = {s0, s1, s2, s3};
    for (int i = 3; i >= 0; i--) {
        if (dims[i] != 1) continue;
        int64_t span = 1;
        for (int j = i + 1; j < 4; j++)
            if (dims[j] != 1 && st[j] * dims[j] > span) span = st[j] * dims[j];
        st[i] = span;
    }
    for (int i = 0; i < 4; i++) {
        if (st[i] < 0 || st[i] > INT32_MAX) return false;
        out[i] = (int32_t)st[i];
    }
    return true;
}

/* The mask's dims and strides in the graph: broadcast dims as dims of 1 (form 1) or as full dims
 * with stride 0 (form 2); cuDNN's engines take one or the other depending on the version. */
static void mask_layout(const sdpa_key *k, int form, int64_t *dims, int64_t *strides) {
    const int64_t full[4] = {k->b, k->h, k->sq, k->sk};
    for (int i = 0; i < 4; i++) {
        dims[i] = k->m[i] == 0 && form == 1 ? 1 : full[i];
        strides[i] = k->m[i];
    }
    if (form == 1) { /* dims of 1: strides of the dense layout over those dims */
        int64_t acc = 1;
        for (int i = 3; i >= 0; i--) {
            if (dims[i] == 1) strides[i] = acc;
            else acc = strides[i] * dims[i] > acc ? strides[i] * dims[i] : acc;
        }
    }
}

/* A reduction (max or sum over the last dim) x -> y in float. */
static cudnnBackendDescriptor_t reduction(kn_dnn_builder *b, cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x,
                                          cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t *desc_out, const char *what) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t r = kn_dnn_make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    kn_dnn_set(b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op, what);
    kn_dnn_set(b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
    kn_dnn_finish(b, r, what);
    *desc_out = r;
    cudnnBackendDescriptor_t o = kn_dnn_make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    kn_dnn_set(b, o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, what);
    kn_dnn_set(b, o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, what);
    kn_dnn_set(b, o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, what);
    kn_dnn_finish(b, o, what);
    return o;
}

/* A product a x b -> c with float accumulation. */
static cudnnBackendDescriptor_t matmul(kn_dnn_builder *b, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bb,
                                       cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t *desc_out, const char *what) {
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t m = kn_dnn_make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    kn_dnn_set(b, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, what);
    kn_dnn_finish(b, m, what);
    *desc_out = m;
    cudnnBackendDescriptor_t o = kn_dnn_make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    kn_dnn_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, what);
    kn_dnn_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bb, what);
    kn_dnn_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, what);
    kn_dnn_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, what);
    kn_dnn_finish(b, o, what);
    return o;
}

/* The plan of problem k with the mask in form `form` (mask_layout), the scale a scalar of rank
 * scale_rank (4, or 1 as cuDNN's frontend writes it) and, with `stats`, the softmax statistics
 * (max + log of the sum) computed into a virtual tensor: cuDNN's frontend (before 9.21) adds that
 * branch to an inference graph too, so the engines may look for it. NULL with why. */
static cudnnBackendDescriptor_t build(kn_cuda *cu, const sdpa_key *k, int form, int scale_rank, bool stats, int64_t *ws_out,
                                      char *why, size_t cap) {
    const cudnnDataType_t io = k->dtype == KILN_DTYPE_FLOAT16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
    const int64_t B = k->b, H = k->h, SQ = k->sq, SK = k->sk, D = k->d;
    kn_dnn_builder b = KN_DNN_BUILDER_INIT;
    cudnnBackendDescriptor_t ds[18] = {0}, ops[12] = {0}, descs[12] = {0}, cfgs[SDPA_CANDIDATES] = {0};
    int nd = 0, nops = 0;
    const int64_t qd[4] = {B, H, SQ, D}, ktd[4] = {B, H, D, SK}, vd[4] = {B, H, SK, D};
    const int64_t sd[4] = {B, H, SQ, SK}, ss[4] = {H * SQ * SK, SQ * SK, SK, 1};
    const int64_t rd[4] = {B, H, SQ, 1}, rs[4] = {H * SQ, SQ, 1, 1};
    const int64_t one[4] = {1, 1, 1, 1};
    int64_t qs[4], kts[4], vs[4], os[4];
    for (int i = 0; i < 4; i++) qs[i] = k->q[i], kts[i] = k->kt[i], vs[i] = k->v[i], os[i] = k->o[i];
    cudnnBackendDescriptor_t q = ds[nd++] = kn_dnn_tensor(&b, UID_Q, io, 4, qd, qs, false, false, "Q");
    cudnnBackendDescriptor_t kt = ds[nd++] = kn_dnn_tensor(&b, UID_K, io, 4, ktd, kts, false, false, "K");
    cudnnBackendDescriptor_t v = ds[nd++] = kn_dnn_tensor(&b, UID_V, io, 4, vd, vs, false, false, "V");
    cudnnBackendDescriptor_t o = ds[nd++] = kn_dnn_tensor(&b, UID_O, io, 4, qd, os, false, false, "O");
    cudnnBackendDescriptor_t s = ds[nd++] = kn_dnn_tensor(&b, UID_S, f32, 4, sd, ss, true, false, "scores");
    cudnnBackendDescriptor_t scale = ds[nd++] = kn_dnn_tensor(&b, UID_SCALE, f32, scale_rank, one, one, false, true, "scale");
    cudnnBackendDescriptor_t scaled = ds[nd++] = kn_dnn_tensor(&b, UID_SCALED, f32, 4, sd, ss, true, false, "scaled");
    ops[nops] = matmul(&b, q, kt, s, &descs[nops], "Q x KT");
    nops++;
    ops[nops] = kn_dnn_pointwise(&b, CUDNN_POINTWISE_MUL, s, scale, scaled, &descs[nops], "scale");
    nops++;
    cudnnBackendDescriptor_t cur = scaled;
    if (k->mask) {
        int64_t md[4], ms[4];
        mask_layout(k, form, md, ms);
        cudnnBackendDescriptor_t m = ds[nd++] = kn_dnn_tensor(&b, UID_BIAS, io, 4, md, ms, false, false, "mask");
        cudnnBackendDescriptor_t t = ds[nd++] = kn_dnn_tensor(&b, UID_BIASED, f32, 4, sd, ss, true, false, "masked");
        ops[nops] = kn_dnn_pointwise(&b, CUDNN_POINTWISE_ADD, cur, m, t, &descs[nops], "mask add");
        nops++;
        cur = t;
    }
    cudnnBackendDescriptor_t mx = ds[nd++] = kn_dnn_tensor(&b, UID_MAX, f32, 4, rd, rs, true, false, "row max");
    cudnnBackendDescriptor_t sub = ds[nd++] = kn_dnn_tensor(&b, UID_SUB, f32, 4, sd, ss, true, false, "shifted");
    cudnnBackendDescriptor_t ex = ds[nd++] = kn_dnn_tensor(&b, UID_EXP, f32, 4, sd, ss, true, false, "exp");
    cudnnBackendDescriptor_t sum = ds[nd++] = kn_dnn_tensor(&b, UID_SUM, f32, 4, rd, rs, true, false, "row sum");
    cudnnBackendDescriptor_t p = ds[nd++] = kn_dnn_tensor(&b, UID_P, io, 4, sd, ss, true, false, "probabilities");
    ops[nops] = reduction(&b, CUDNN_REDUCE_TENSOR_MAX, cur, mx, &descs[nops], "row max");
    nops++;
    ops[nops] = kn_dnn_pointwise(&b, CUDNN_POINTWISE_SUB, cur, mx, sub, &descs[nops], "subtract max");
    nops++;
    ops[nops] = kn_dnn_pointwise(&b, CUDNN_POINTWISE_EXP, sub, NULL, ex, &descs[nops], "exp");
    nops++;
    ops[nops] = reduction(&b, CUDNN_REDUCE_TENSOR_ADD, ex, sum, &descs[nops], "row sum");
    nops++;
    if (stats) { /* the softmax's statistics, max + log(sum), to a virtual tensor (what the frontend adds) */
        cudnnBackendDescriptor_t lg = ds[nd++] = kn_dnn_tensor(&b, UID_LOG, f32, 4, rd, rs, true, false, "log of sum");
        cudnnBackendDescriptor_t st = ds[nd++] = kn_dnn_tensor(&b, UID_STATS, f32, 4, rd, rs, true, false, "statistics");
        ops[nops] = kn_dnn_pointwise(&b, CUDNN_POINTWISE_LOG, sum, NULL, lg, &descs[nops], "log of sum");
        nops++;
        ops[nops] = kn_dnn_pointwise(&b, CUDNN_POINTWISE_ADD, mx, lg, st, &descs[nops], "statistics");
        nops++;
    }
    ops[nops] = kn_dnn_pointwise(&b, CUDNN_POINTWISE_DIV, ex, sum, p, &descs[nops], "normalise");
    nops++;
    ops[nops] = matmul(&b, p, v, o, &descs[nops], "P x V");
    nops++;

    cudnnBackendDescriptor_t graph = kn_dnn_op_graph(&b, cu->dnn, ops, nops, false);
    /* the engines cuDNN's heuristics rank (modes A, B, then the fallback list), else any engine that
     * takes the graph: the first that builds within the lane's workspace */
    cudnnBackendDescriptor_t plan = NULL;
    const cudnnBackendHeurMode_t modes[3] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK};
    int64_t n_cfg = 0, ws = 0;
    for (int m = 0; m < 3 && !plan && b.s == CUDNN_STATUS_SUCCESS; m++) {
        kn_dnn_builder hb = KN_DNN_BUILDER_INIT; /* (a mode without results is no failure) */
        n_cfg = kn_dnn_engine_configs(&hb, graph, cfgs, SDPA_CANDIDATES, modes[m]);
        for (int64_t i = 0; i < n_cfg && !plan && hb.s == CUDNN_STATUS_SUCCESS; i++) {
            plan = kn_dnn_plan(cu->dnn, cfgs[i], NULL, &ws);
            if (plan && ws > (int64_t)cu->workspace_size) kn_dnn_drop(&plan);
        }
        for (int i = 0; i < SDPA_CANDIDATES; i++) kn_dnn_drop(&cfgs[i]);
        if (plan) snprintf(why, cap, "heuristics mode %d", m);
    }
    const int64_t n_engines = b.s == CUDNN_STATUS_SUCCESS ? kn_dnn_engine_count(graph) : 0;
    for (int64_t e = 0; e < n_engines && !plan; e++) {
        cudnnBackendDescriptor_t cfg = kn_dnn_engine_config(graph, e);
        if (!cfg) continue;
        plan = kn_dnn_plan(cu->dnn, cfg, NULL, &ws);
        if (plan && ws > (int64_t)cu->workspace_size) kn_dnn_drop(&plan);
        kn_dnn_drop(&cfg);
        if (plan) snprintf(why, cap, "engine %lld", (long long)e);
    }
    if (plan) *ws_out = ws;
    else if (b.s != CUDNN_STATUS_SUCCESS) snprintf(why, cap, "%s: %s", b.what ? b.what : "building", cudnnGetErrorString(b.s));
    else snprintf(why, cap, "no engine of %lld built within the lane's workspace", (long long)n_engines);
    kn_dnn_drop(&graph);
    for (int i = 0; i < nops; i++) kn_dnn_drop(&ops[i]), kn_dnn_drop(&descs[i]);
    for (int i = 0; i < nd; i++) kn_dnn_drop(&ds[i]);
    return plan;
}

/* The problem of p, or false where the graph cannot describe it. K rows (head dim contiguous) in
 * a dense copy's layout when K arrives transposed (keys contiguous: k_copied). */
static bool key_of(kiln_dtype dt, const kn_cu_flash *p, bool k_copied, sdpa_key *k) {
    memset(k, 0, sizeof *k); /* (compared and stored whole) */
    const int64_t sizes[5] = {p->b0, p->b1, p->sq, p->sk, p->d};
    for (int i = 0; i < 5; i++)
        if (sizes[i] < 1 || sizes[i] > INT32_MAX) return false;
    k->dtype = (int32_t)dt;
    k->b = (int32_t)p->b0, k->h = (int32_t)p->b1, k->sq = (int32_t)p->sq, k->sk = (int32_t)p->sk, k->d = (int32_t)p->d;
    const int64_t qd[4] = {p->b0, p->b1, p->sq, p->d}, ktd[4] = {p->b0, p->b1, p->d, p->sk},
                  vd[4] = {p->b0, p->b1, p->sk, p->d};
    bool ok = strides4(k->q, qd, p->q_s0, p->q_s1, p->q_si, 1) && strides4(k->v, vd, p->v_s0, p->v_s1, p->v_sj, 1) &&
              strides4(k->o, qd, p->y_s0, p->y_s1, p->y_si, 1);
    if (k_copied) /* a dense copy [b0, b1, sk, d] */
        ok = ok && strides4(k->kt, ktd, p->b1 * p->sk * p->d, p->sk * p->d, 1, p->d);
    else
        ok = ok && strides4(k->kt, ktd, p->k_s0, p->k_s1, p->k_sc, p->k_sj);
    if (p->mask) {
        const int64_t m[4] = {p->m_s0, p->m_s1, p->m_si, p->m_sj};
        k->mask = 1;
        for (int i = 0; i < 4; i++) {
            if (m[i] < 0 || m[i] > INT32_MAX) return false;
            k->m[i] = (int32_t)m[i];
        }
    }
    /* 16-byte rows for the engines' tile loads: strides (but the unit ones) multiples of 8 */
    const int32_t *all[4] = {k->q, k->kt, k->v, k->o};
    for (int t = 0; t < 4 && ok; t++)
        for (int i = 0; i < 4; i++)
            if (all[t][i] != 1 && all[t][i] % 8) return false;
    return ok;
}

bool kn_cu_sdpa_key_valid(const kn_cu_sdpa_key *k) {
    if ((k->dtype != KILN_DTYPE_FLOAT16 && k->dtype != KILN_DTYPE_BFLOAT16) || (k->mask != 0 && k->mask != 1) ||
        k->b < 1 || k->h < 1 || k->sq < 1 || k->sk < 1 || k->d < 8 || k->d > 256 || k->d % 8)
        return false;
    const int32_t *all[5] = {k->q, k->kt, k->v, k->o, k->m};
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < 4; i++)
            if (all[t][i] < (t == 4 ? 0 : 1) || (t == 4 && !k->mask && all[t][i] != 0)) return false;
    return true;
}

static sdpa_plan *lookup(kn_cuda *cu, const sdpa_key *k) {
    sdpa_plan *ps = cu->sh->sdpa_plans;
    for (int i = 0; i < cu->sh->n_sdpa_plans; i++)
        if (!memcmp(&ps[i].key, k, sizeof *k)) return &ps[i];
    return NULL;
}

kiln_status kn_cu_sdpa_run(kn_cuda *cu, kn_kernel_ctx *c, kiln_dtype dt, const kn_cu_flash *p, bool *ran) {
    *ran = false;
    if (!sdpa_enabled() || p->force || (dt != KILN_DTYPE_FLOAT16 && dt != KILN_DTYPE_BFLOAT16)) return KILN_OK;
    kn_cu_handles_wait(cu); /* (cuDNN's handle is made beside the start) */
    if (!cu->dnn) return KILN_OK;
    /* a bool mask would need a select in the graph, and a row whose every key is masked out has
     * no softmax (kiln: NaN, or 0 with nan_to_zero): kiln's own kernel keeps those semantics */
    if (p->mask && (p->mask_bool || p->m_sj != 1)) return KILN_OK;
    if (p->d % 8 || p->d > 256 || p->sq < 1 || p->sk < 1 || p->b0 < 1 || p->b1 < 1) return KILN_OK;
    /* head dims contiguous; K either [key][d] or transposed [d][key] (then copied to rows) */
    const bool k_rows = p->k_sc == 1, k_copy = !k_rows && p->k_sj == 1;
    if (!k_rows && !k_copy) return KILN_OK;
    const void *ptrs[5] = {p->q, p->k, p->v, p->y, p->mask};
    for (int i = 0; i < 5; i++)
        if ((uintptr_t)ptrs[i] % 16) return KILN_OK;
    sdpa_key key;
    if (!key_of(dt, p, k_copy, &key)) return KILN_OK;

    uint8_t rkey[1 + sizeof key]; /* its tuning record's key */
    rkey[0] = KN_CU_TUNE_SDPA;
    memcpy(rkey + 1, &key, sizeof key);
    char *keep = NULL; /* the serialized form of a plan built here */
    size_t keep_len = 0;
    pthread_mutex_lock(&cu->sh->cache_mu);
    sdpa_plan *e = lookup(cu, &key);
    if (!e) {
        if (cu->sh->n_sdpa_plans == cu->sh->cap_sdpa_plans) {
            const int nc = cu->sh->cap_sdpa_plans ? cu->sh->cap_sdpa_plans * 2 : 8;
            sdpa_plan *grown = realloc(cu->sh->sdpa_plans, sizeof *grown * (size_t)nc);
            if (!grown) {
                pthread_mutex_unlock(&cu->sh->cache_mu);
                return kn_kernel_error(c, KILN_ERR_OUT_OF_MEMORY, "out of memory for cuDNN's attention plans");
            }
            cu->sh->sdpa_plans = grown;
            cu->sh->cap_sdpa_plans = nc;
        }
        e = &((sdpa_plan *)cu->sh->sdpa_plans)[cu->sh->n_sdpa_plans++];
        memset(e, 0, sizeof *e);
        e->key = key;
        const kn_cu_tuned *kept = kn_cu_tuning_find(cu, rkey, sizeof rkey);
        if (kept) { /* a plan a compiled file carried */
            char why[256] = "";
            e->plan = kn_dnn_plan_from_text(cu->dnn, kn_cu_tuned_value(kept), kept->val_len, cu->workspace_size, &e->ws, why,
                                            sizeof why);
            if (e->plan) plans_loaded++;
            else /* (then built below) */
                kn_log(KILN_LOG_INFO, "cuda: node '%s': the compiled file's fused-attention plan was not usable (%s): building it",
                       c->node->name, why);
        }
    }
    if (!e->plan && !e->built) {
        e->built = true;
        const double t0 = kn_now_ms();
        /* the descriptions cuDNN's versions take: the mask's broadcast as dims of 1 or strides of 0,
         * the scale as a scalar of rank 4 or 1; the first that builds */
        char why[8][120] = {"", "", "", "", "", "", "", ""};
        int tried = 0;
        for (int stats = 1; stats >= 0 && !e->plan; stats--)
            for (int scale_rank = 4; scale_rank >= 1 && !e->plan; scale_rank -= 3)
                for (int form = 1; form <= (key.mask ? 2 : 1) && !e->plan; form++, tried++)
                    e->plan = build(cu, &key, form, scale_rank, stats, &e->ws, why[tried], sizeof why[tried]);
        if (e->plan) {
            kn_log(KILN_LOG_DEBUG,
                   "cuda: node '%s': attention [%lld, %lld, %lld, %lld] x %lld keys%s as cuDNN's fused attention (%.1f ms to "
                   "build, description %d, %s)",
                   c->node->name, (long long)key.b, (long long)key.h, (long long)key.sq, (long long)key.d, (long long)key.sk,
                   key.mask ? " with a mask" : "", kn_now_ms() - t0, tried, why[tried - 1]);
            keep = kn_dnn_plan_text(e->plan, &keep_len);
        } else {
            kn_log(KILN_LOG_DEBUG,
                   "cuda: node '%s': no cuDNN fused attention for [%lld, %lld, %lld, %lld] x %lld keys (%s | %s | %s | %s | "
                   "%s | %s | %s | %s): kiln's kernels",
                   c->node->name, (long long)key.b, (long long)key.h, (long long)key.sq, (long long)key.d, (long long)key.sk,
                   why[0], why[1], why[2], why[3], why[4], why[5], why[6], why[7]);
        }
    }
    cudnnBackendDescriptor_t plan = e->plan;
    pthread_mutex_unlock(&cu->sh->cache_mu);
    if (keep) { /* for the compiled file: a later session makes the plan from it instead of compiling */
        if (kn_cu_tuning_add(cu, rkey, sizeof rkey, keep, keep_len) != KILN_OK) kn_clear_error();
        free(keep);
    }
    if (!plan) return KILN_OK;

    void *kbuf = NULL;
    const size_t kbytes = (size_t)(p->b0 * p->b1 * p->sk * p->d) * kiln_dtype_size(dt);
    const void *k = p->k;
    if (k_copy) { /* [b0, b1, d, sk] (keys contiguous) -> dense [b0, b1, sk, d] */
        KN_TRY(kn_cu_scratch(cu, kbytes, &kbuf));
        kn_cu_attn_copy_dims g;
        g.dims[0] = p->b0, g.dims[1] = p->b1, g.dims[2] = p->sk, g.dims[3] = p->d;
        g.src[0] = p->k_s0, g.src[1] = p->k_s1, g.src[2] = p->k_sj, g.src[3] = p->k_sc;
        g.dst[0] = p->b1 * p->sk * p->d, g.dst[1] = p->sk * p->d, g.dst[2] = p->d, g.dst[3] = 1;
        kiln_status st = kn_cu_check(c, kn_cu_attn_copy(dt, dt, p->k, kbuf, &g, 1.0f, KILN_DTYPE_UNDEFINED, cu->stream),
                                     "attention K rows");
        if (st != KILN_OK) {
            kn_cu_scratch_free(cu, kbuf, kbytes);
            return st;
        }
        k = kbuf;
    }
    float scale = p->scale;
    int64_t uids[6] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE, UID_BIAS};
    void *dp[6] = {(void *)p->q, (void *)k, (void *)p->v, p->y, &scale, (void *)p->mask};
    const cudnnStatus_t s = kn_dnn_execute(cu->dnn, plan, p->mask ? 6 : 5, uids, dp, cu->workspace);
    if (kbuf) kn_cu_scratch_free(cu, kbuf, kbytes);
    if (s != CUDNN_STATUS_SUCCESS) {
        cudaGetLastError();
        kn_log(KILN_LOG_DEBUG, "cuda: node '%s': cuDNN's fused attention did not run (%s): kiln's kernels", c->node->name,
               cudnnGetErrorString(s));
        return KILN_OK;
    }
    sdpa_runs++;
    *ran = true;
    return KILN_OK;
}

void kn_cu_sdpa_release(kn_cuda *cu) {
    sdpa_plan *ps = cu->sh->sdpa_plans;
    for (int i = 0; i < cu->sh->n_sdpa_plans; i++) kn_dnn_drop(&ps[i].plan);
    free(ps);
    cu->sh->sdpa_plans = NULL;
    cu->sh->n_sdpa_plans = cu->sh->cap_sdpa_plans = 0;
}

#else

bool kn_cu_sdpa_key_valid(const kn_cu_sdpa_key *k) {
    (void)k;
    return false; /* (no cuDNN: a record of this kind is of no use) */
}
unsigned long long kn_cu_sdpa_plans_loaded(void) { return 0; }
kiln_status kn_cu_sdpa_run(kn_cuda *cu, kn_kernel_ctx *c, kiln_dtype dt, const kn_cu_flash *p, bool *ran) {
    (void)cu, (void)c, (void)dt, (void)p;
    *ran = false;
    return KILN_OK;
}
void kn_cu_sdpa_release(kn_cuda *cu) { (void)cu; }
unsigned long long kn_cu_sdpa_runs(void) { return 0; }

#endif
