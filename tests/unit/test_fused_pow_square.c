/* kiln.FusedElementwise's Pow by the constant 2 (or a scalar input of 2) as x * x, and Pow by
 * other exponents unchanged: y = Pow(x, 2) + Pow(x, 3) + Pow(x, s) at level 3 (one fused chain)
 * against x^2 + x^3 + x^s computed here in double, s a graph input (a scalar register of the
 * chain) of 2 and of 3, at levels 0 and 3 (level 0: the unfused Pow kernels). */
#include "exec/session.h"
#include "test_model_builder.h"
#include "unit.h"

#include <math.h>
#include <stdlib.h>

static int fused_count(const kiln_session *s) {
    const kn_graph *g = s->model->graph;
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead && !strcmp(g->nodes[i].op_type, "FusedElementwise")) n++;
    return n;
}

static int scalar_const(tmb *b, const char *name, float v) {
    kn_tensor *t;
    kn_tensor_new(KILN_DTYPE_FLOAT, 0, NULL, &t);
    ((float *)t->data)[0] = v;
    return tmb_const_tensor(b, name, t);
}

KN_TEST(fused_pow_square) {
    const int64_t dims[2] = {5, 301}; /* more than a block of the chain, not a multiple of one */
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, dims, NULL);
    int s = tmb_input(&b, "s", KILN_DTYPE_FLOAT, 0, NULL, NULL);
    int two = scalar_const(&b, "two", 2.0f), three = scalar_const(&b, "three", 3.0f);
    int p2 = tmb_value(&b, "p2"), p3 = tmb_value(&b, "p3"), ps = tmb_value(&b, "ps");
    int a = tmb_value(&b, "a"), y = tmb_value(&b, "y");
    tmb_node(&b, "Pow", (int[]){x, two}, 2, p2);
    tmb_node(&b, "Pow", (int[]){x, three}, 2, p3);
    tmb_node(&b, "Pow", (int[]){x, s}, 2, ps);
    tmb_node(&b, "Add", (int[]){p2, p3}, 2, a);
    tmb_node(&b, "Add", (int[]){a, ps}, 2, y);
    tmb_output(&b, y);
    size_t size = 0;
    unsigned char *m = tmb_finish(&b, &size);
    if (!m) return;
    const int64_t n = dims[0] * dims[1];
    kiln_tensor *xt = NULL, *st = NULL;
    kiln_tensor_create(KILN_DTYPE_FLOAT, dims, 2, &xt);
    kiln_tensor_create(KILN_DTYPE_FLOAT, NULL, 0, &st);
    float *xp = kiln_tensor_data(xt);
    uint32_t seed = 7;
    for (int64_t i = 0; i < n; i++) xp[i] = 3.0f * tmb_rand(&seed);
    double *want = malloc(sizeof(double) * (size_t)n);
    for (int sv = 2; sv <= 3; sv++) {
        ((float *)kiln_tensor_data(st))[0] = (float)sv;
        for (int64_t i = 0; i < n; i++) {
            const double v = xp[i];
            want[i] = v * v + v * v * v + pow(v, sv);
        }
        for (int level = 0; level <= 3; level += 3) {
            kiln_session *ses = tmb_session(m, size, 1, level);
            if (!ses) continue;
            if (level == 3) CHECK_EQ_INT(fused_count(ses), 1);
            const char *names[2] = {"x", "s"};
            kiln_tensor *ins[2] = {xt, st}, *out = NULL;
            CHECK_STATUS(kiln_session_run(ses, names, ins, 2, NULL, 1, &out), KILN_OK);
            if (out) {
                size_t first = 0;
                const size_t bad = tmb_count_off(kiln_tensor_data(out), want, NULL, (size_t)n, 1e-6, 1e-6, &first);
                CHECK_MSG(bad == 0, "s = %d, level %d: %zu of %lld differ, first at %zu: %.9g, want %.9g", sv, level,
                          bad, (long long)n, first, bad ? ((float *)kiln_tensor_data(out))[first] : 0.0,
                          bad ? want[first] : 0.0);
                kiln_tensor_destroy(out);
            }
            kiln_session_destroy(ses);
        }
    }
    free(want);
    free(m);
    kiln_tensor_destroy(xt);
    kiln_tensor_destroy(st);
}
