/* A graph with nothing to place in the arena (one node: only its input and output) keeps an
 * empty run-time plan after its first run, so that later runs of the same input shapes find it
 * instead of recording their allocations and building a plan again on every run (exec.c's
 * keep_plan); the runs' outputs stay right, across input shapes too. */
#include "test_model_builder.h"

#include "backend/backend.h"
#include "exec/exec.h"
#include "exec/memplan.h"
#include "exec/session.h"
#include "kiln.h"

static kn_tensor *one_node_input(int64_t rows, float shift) {
    kn_tensor *t = NULL;
    kn_tensor_new(KILN_DTYPE_FLOAT, 2, (int64_t[]){rows, 16}, &t);
    float *p = t->data;
    for (int64_t i = 0; i < rows * 16; i++) p[i] = (float)((i * 37) % 101 - 50) / 25.0f + shift;
    return t;
}

KN_TEST(memplan_one_node_keeps_an_empty_plan) {
    tmb b;
    tmb_init(&b, 17);
    /* x [N, 16], N symbolic: no plan at creation, the runs make theirs */
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){-1, 16}, (const char *[]){"N", NULL});
    int y = tmb_value(&b, "y");
    tmb_node(&b, "Relu", (int[]){x}, 1, y);
    tmb_output(&b, y);
    size_t size = 0;
    unsigned char *model = tmb_finish(&b, &size);
    kiln_session *s = tmb_session(model, size, 1, 0);
    free(model);
    CHECK(s != NULL);
    if (!s) return;
    const char *names[1] = {"x"};
    const int64_t rows[4] = {3, 3, 5, 3};
    for (int run = 0; run < 4; run++) {
        kn_tensor *in = one_node_input(rows[run], (float)run), *out = NULL;
        CHECK_STATUS(kiln_session_run(s, names, &in, 1, NULL, 1, &out), KILN_OK);
        int wrong = 0;
        for (int64_t i = 0; out && i < rows[run] * 16; i++) {
            const float v = ((const float *)in->data)[i];
            wrong += ((const float *)out->data)[i] != (v > 0 ? v : 0);
        }
        CHECK_MSG(out && wrong == 0, "run %d: %d elements wrong", run, wrong);
        kn_tensor_free(in);
        kn_tensor_free(out);
        /* one run context (serial calls): its plans, one per input-shape set seen, each empty */
        const kn_run_ctx *c = s->free_ctx;
        CHECK(s->rt->memplan == NULL && c != NULL);
        if (!c) continue;
        int kept = 0;
        for (int i = 0; i < KN_MEMPLAN_SHAPED; i++)
            if (c->shaped[i]) {
                kept++;
                CHECK_EQ_INT(c->shaped[i]->n_planned, 0);
                CHECK_EQ_INT((long long)c->shaped[i]->arena_bytes, 0);
            }
        CHECK_MSG(kept == (run < 2 ? 1 : 2), "run %d: %d plans kept", run, kept);
    }
    kiln_session_destroy(s);
}
