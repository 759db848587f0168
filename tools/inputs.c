/* Made-up inputs for kiln run and kiln bench: a graph input's shape from its declared dims and
 * --dim, filled with reproducible random values. */
#include "cli.h"

#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rng_uniform(void) { /* xorshift64*: the same inputs every process */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

kiln_status cli_random_input(const kiln_value_info *info, const cli_dim *dims, int n_dims, const char *unnamed_hint,
                             int int_value, kn_tensor **out) {
    int64_t shape[KILN_MAX_RANK];
    if (info->rank < 0)
        return kn_error(KILN_ERR_INVALID_ARGUMENT, "its rank is unknown: %s", unnamed_hint);
    for (int d = 0; d < info->rank; d++) {
        shape[d] = info->dims[d];
        if (shape[d] >= 0) continue;
        const char *sym = info->dim_names[d];
        for (int k = 0; sym && k < n_dims; k++)
            if (!strcmp(dims[k].name, sym)) shape[d] = dims[k].value;
        if (shape[d] < 0 && !sym) /* declared unknown without a name (dim_value -1, or no dim_param) */
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "dimension %d has no size and no name, so --dim cannot set it: %s", d, unnamed_hint);
        if (shape[d] < 0)
            return kn_error(KILN_ERR_INVALID_ARGUMENT,
                            "dimension %d is symbolic ('%s'): give its size with --dim %s=VALUE", d, sym, sym);
    }
    KN_TRY(kn_tensor_new(info->dtype, info->rank, shape, out));
    int64_t n = kn_tensor_count(*out);
    for (int64_t i = 0; i < n; i++) {
        if (kn_dtype_is_float(info->dtype)) kn_tensor_set_f64(*out, i, rng_uniform() * 2 - 1);
        else if (info->dtype == KILN_DTYPE_BOOL) kn_tensor_set_i64(*out, i, rng_uniform() < 0.5);
        else if (info->dtype != KILN_DTYPE_STRING)
            kn_tensor_set_i64(*out, i, int_value >= 0 ? int_value : (int64_t)(rng_uniform() * 10));
    }
    return KILN_OK;
}
