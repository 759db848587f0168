/* Tuning results of the CUDA backend: for each library call kiln has configured (a cuBLASLt
 * product, a cuDNN convolution), the algorithm it runs with. They are chosen once per problem, by
 * the libraries' heuristics or, with tuning=exhaustive, by measuring the candidates, and are kept
 * in the compiled file (section "cuda.tuning"): the heuristics' first calls cost 50-150 ms each at
 * start-up (they load the libraries' selection tables), so a warm start that finds its choices
 * there makes none of them.
 *
 * A record is opaque to the cache: a key (kind byte + the problem: shapes, types, layout,
 * alignment) and a value (the algorithm). Imported records are validated here for kind, sizes and
 * ranges; the library itself checks an imported algorithm against its problem at first use
 * (cublasLtMatmul refuses one that does not fit, cudnnGet*WorkspaceSize one that does not apply:
 * cuda_linalg.c, cuda_conv.c), and a refused choice falls back to the heuristic. */
#include "backend/cuda/cuda_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kn_cu_tuned *kn_cu_tuning_find(kn_cuda *cu, const void *key, size_t key_len) {
    for (int i = 0; i < cu->sh->n_tuned; i++)
        if (cu->sh->tuned[i].key_len == key_len && !memcmp(cu->sh->tuned[i].key, key, key_len)) return &cu->sh->tuned[i];
    return NULL;
}

static kiln_status put(kn_cuda *cu, const void *key, size_t key_len, const void *val, size_t val_len, bool imported) {
    if (key_len == 0 || key_len > KN_CU_TUNE_KEY_MAX || val_len > KN_CU_TUNE_BIG_MAX)
        return kn_error(KILN_ERR_INTERNAL, "tuning record of %zu/%zu bytes", key_len, val_len);
    uint8_t *big = NULL;
    if (val_len > KN_CU_TUNE_VAL_MAX) {
        big = malloc(val_len);
        if (!big) return KN_OOM();
        memcpy(big, val, val_len);
    }
    kn_cu_tuned *t = kn_cu_tuning_find(cu, key, key_len);
    if (!t) {
        if (cu->sh->n_tuned == cu->sh->cap_tuned) {
            int nc = cu->sh->cap_tuned ? cu->sh->cap_tuned * 2 : 32;
            kn_cu_tuned *b = realloc(cu->sh->tuned, sizeof *b * (size_t)nc);
            if (!b) {
                free(big);
                return KN_OOM();
            }
            cu->sh->tuned = b;
            cu->sh->cap_tuned = nc;
        }
        t = &cu->sh->tuned[cu->sh->n_tuned++];
        memset(t, 0, sizeof *t);
        memcpy(t->key, key, key_len);
        t->key_len = (uint16_t)key_len;
        if (!imported) cu->sh->n_tuned_here++;
    } else if (t->imported && !imported) {
        cu->sh->n_tuned_here++; /* an imported choice the library rejected, replaced */
    }
    free(t->big);
    t->big = big;
    if (!big) memcpy(t->val, val, val_len);
    t->val_len = (uint32_t)val_len;
    t->imported = imported;
    return KILN_OK;
}

kiln_status kn_cu_tuning_add(kn_cuda *cu, const void *key, size_t key_len, const void *val, size_t val_len) {
    pthread_mutex_lock(&cu->sh->cache_mu);
    kiln_status st = put(cu, key, key_len, val, val_len, false);
    pthread_mutex_unlock(&cu->sh->cache_mu);
    return st;
}

void kn_cu_tuning_forget(kn_cuda *cu, const void *key, size_t key_len) {
    pthread_mutex_lock(&cu->sh->cache_mu);
    kn_cu_tuned *t = kn_cu_tuning_find(cu, key, key_len);
    if (t) {
        if (!t->imported) cu->sh->n_tuned_here--;
        free(t->big);
        *t = cu->sh->tuned[--cu->sh->n_tuned];
    }
    pthread_mutex_unlock(&cu->sh->cache_mu);
}

void kn_cu_tuning_release(kn_cuda *cu) {
    for (int i = 0; i < cu->sh->n_tuned; i++) free(cu->sh->tuned[i].big);
    free(cu->sh->tuned);
    cu->sh->tuned = NULL;
    cu->sh->n_tuned = cu->sh->cap_tuned = cu->sh->n_tuned_here = 0;
}

int kn_cu_tuning_count(void *state, int *made_here) {
    kn_cuda *cu = state;
    pthread_mutex_lock(&cu->sh->cache_mu);
    if (made_here) *made_here = cu->sh->n_tuned_here;
    int n = cu->sh->n_tuned;
    pthread_mutex_unlock(&cu->sh->cache_mu);
    return n;
}

bool kn_cu_tuning_record(void *state, int i, const void **key, size_t *key_len, const void **val, size_t *val_len) {
    kn_cuda *cu = state;
    if (i < 0 || i >= cu->sh->n_tuned) return false;
    *key = cu->sh->tuned[i].key;
    *key_len = cu->sh->tuned[i].key_len;
    *val = kn_cu_tuned_value(&cu->sh->tuned[i]);
    *val_len = cu->sh->tuned[i].val_len;
    return true;
}

/* Whether an imported key describes a problem (a warm start rebuilds the problem from it and runs
 * it on scratch memory: cuda_warmup.c); why not in why. */
static bool key_well_formed(const uint8_t *k, size_t key_len, char *why, size_t cap) {
    if (k[0] == KN_CU_TUNE_MATMUL) {
        kn_cu_lt_key p;
        if (key_len != 1 + sizeof p) {
            snprintf(why, cap, "a product's key of %zu bytes, %zu expected", key_len, 1 + sizeof p);
            return false;
        }
        memcpy(&p, k + 1, sizeof p);
        bool ok = p.m >= 1 && p.n >= 1 && p.k >= 1 && p.batch >= 1 && p.lda >= 1 && p.ldb >= 1 && p.ldc >= 1 && p.sa >= 0 &&
                  p.sb >= 0 && p.sc >= 0 && (p.ta | p.tb | p.device_scalars) >= 0 && (p.ta | p.tb | p.device_scalars) <= 1 &&
                  (p.epilogue == 0 || p.epilogue == CUBLASLT_EPILOGUE_BIAS || p.epilogue == CUBLASLT_EPILOGUE_RELU ||
                   p.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS || p.epilogue == CUBLASLT_EPILOGUE_GELU ||
                   p.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS) && p.zero == 0;
        if (!ok) snprintf(why, cap, "a product's key with sizes, strides, flags or epilogue out of range");
        return ok;
    }
    if (k[0] == KN_CU_TUNE_CONV_GRAPH) {
        kn_cu_graph_key g;
        if (key_len != 1 + sizeof g) {
            snprintf(why, cap, "a cuDNN graph's key of %zu bytes, %zu expected", key_len, 1 + sizeof g);
            return false;
        }
        memcpy(&g, k + 1, sizeof g);
        if (!kn_cu_conv_graph_key_valid(&g)) {
            snprintf(why, cap, "a cuDNN graph's key with a type, activation, size, stride or padding out of range");
            return false;
        }
        return true;
    }
    if (k[0] == KN_CU_TUNE_SDPA) {
        kn_cu_sdpa_key a;
        if (key_len != 1 + sizeof a) {
            snprintf(why, cap, "a fused attention's key of %zu bytes, %zu expected", key_len, 1 + sizeof a);
            return false;
        }
        memcpy(&a, k + 1, sizeof a);
        if (!kn_cu_sdpa_key_valid(&a)) {
            snprintf(why, cap, "a fused attention's key with a type, size or stride out of range");
            return false;
        }
        return true;
    }
    int32_t nb = 0;
    if ((key_len - 1) % sizeof(int32_t) == 0 && key_len >= 1 + sizeof nb) memcpy(&nb, k + 1, sizeof nb);
    size_t words = (key_len - 1) / sizeof(int32_t);
    int32_t format = nb >> 4; /* KN_CU_CONV_NHWC: channels last */
    nb &= 15;
    if ((key_len - 1) % sizeof(int32_t) != 0 || nb < 4 || nb > 5 || format < 0 || format > 1 ||
        words != (size_t)(4 + 3 * nb + 3 * (nb - 2))) {
        snprintf(why, cap, "a convolution's key of %zu bytes that is no description of one", key_len);
        return false;
    }
    return true;
}

kiln_status kn_cu_tuning_import(void *state, const void *key, size_t key_len, const void *val, size_t val_len) {
    kn_cuda *cu = state;
    const uint8_t *k = key;
    if (key_len < 2 || key_len > KN_CU_TUNE_KEY_MAX)
        return kn_error(KILN_ERR_CACHE, "tuning record key of %zu bytes (2..%d expected)", key_len, KN_CU_TUNE_KEY_MAX);
    size_t want;
    switch (k[0]) {
    case KN_CU_TUNE_MATMUL: want = sizeof(cublasLtMatmulAlgo_t); break;
    case KN_CU_TUNE_CONV_FWD:
    case KN_CU_TUNE_CONV_BWD_DATA: {
        want = sizeof(int32_t);
        if (val_len == want) {
            int32_t algo;
            memcpy(&algo, val, sizeof algo);
            /* both cuDNN enumerations have fewer than 16 members */
            if (algo < 0 || algo >= 16)
                return kn_error(KILN_ERR_CACHE, "tuning record: convolution algorithm %d out of range", (int)algo);
        }
        break;
    }
    case KN_CU_TUNE_CONV_GRAPH:
    case KN_CU_TUNE_SDPA:
        /* a cuDNN execution plan's serialized form (JSON text: cuda_conv_graph.c, cuda_sdpa.c),
         * which cuDNN parses and checks against the device when the plan is made from it */
        if (val_len < 2 || val_len > KN_CU_TUNE_BIG_MAX || memchr(val, 0, val_len))
            return kn_error(KILN_ERR_CACHE, "tuning record of kind '%c': a %zu-byte plan that is no plan's text", k[0],
                            val_len);
        want = val_len;
        break;
    default: return kn_error(KILN_ERR_CACHE, "tuning record of unknown kind 0x%02x", k[0]);
    }
    if (val_len != want)
        return kn_error(KILN_ERR_CACHE, "tuning record of kind '%c' has a %zu-byte value, %zu expected", k[0], val_len, want);
    char why[160];
    if (!key_well_formed(k, key_len, why, sizeof why)) return kn_error(KILN_ERR_CACHE, "tuning record: %s", why);
    return put(cu, key, key_len, val, val_len, true);
}
