#include "exec/kernel.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

kiln_status kn_ctx_output(kn_kernel_ctx *c, int i, kiln_dtype dtype, int rank, const int64_t *dims,
                          kn_tensor **out) {
    if (i < 0 || i >= c->n_outputs) return KN_INTERNAL("output index out of range");
    kn_tensor *t = c->out[i];
    if (t && t->kind == KN_VALUE_TENSOR && t->dtype == dtype && t->rank == rank &&
        (rank == 0 || !memcmp(t->dims, dims, sizeof(int64_t) * (size_t)rank))) {
        *out = t;
        return KILN_OK;
    }
    kn_tensor *n;
    kiln_status s = kn_tensor_new(dtype, rank, dims, &n);
    if (s != KILN_OK) {
        char lbl[256];
        return kn_error_prefix(s, "%s: output %d: ", kn_node_label(c->node, lbl, sizeof lbl), i);
    }
    kn_tensor_free(t);
    c->out[i] = n;
    *out = n;
    return KILN_OK;
}

kiln_status kn_kernel_error(const kn_kernel_ctx *c, kiln_status status, const char *fmt, ...) {
    char lbl[256], msg[1024], shapes[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t used = 0;
    shapes[0] = 0;
    for (int i = 0; i < c->n_inputs && used < sizeof shapes; i++) {
        char d[256];
        used += (size_t)snprintf(shapes + used, sizeof shapes - used, "%s%s", i ? ", " : "",
                                 c->in[i] ? kn_tensor_describe(c->in[i], d, sizeof d) : "(none)");
    }
    return kn_error(status, "%s: %s (inputs: %s)", kn_node_label(c->node, lbl, sizeof lbl), msg, shapes);
}
