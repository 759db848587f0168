/* The operator registry: the family tables, searched by (domain, op_type, opset). */
#include "ops/op.h"
#include "ops/families.h"

#include <string.h>

static const kn_op_schema *const kn_families[] = {
#define KN_FAMILY(name) kn_ops_##name,
    KN_OP_FAMILIES
#undef KN_FAMILY
};

const kn_op_schema *kn_op_find(const char *domain, const char *op_type, int opset,
                               const kn_op_schema **near_out) {
    const kn_op_schema *near = NULL;
    for (size_t f = 0; f < sizeof kn_families / sizeof kn_families[0]; f++)
        for (const kn_op_schema *s = kn_families[f]; s->op_type; s++) {
            if (strcmp(s->op_type, op_type) || strcmp(s->domain, domain)) continue;
            if (opset >= s->since && (s->until == 0 || opset <= s->until)) return s;
            near = s;
        }
    if (near_out) *near_out = near;
    return NULL;
}

void kn_op_foreach(void (*fn)(const kn_op_schema *s, void *arg), void *arg) {
    for (size_t f = 0; f < sizeof kn_families / sizeof kn_families[0]; f++)
        for (const kn_op_schema *s = kn_families[f]; s->op_type; s++) fn(s, arg);
}
