/* The memory plan (src/exec/memplan.c): host intermediates at planned offsets in one arena.
 * What must hold: no two values whose lifetimes meet share a byte (checked here from the graph
 * alone, for test graphs and every zoo model), a value read late is not overwritten, a graph
 * output is never a slice of the arena (outputs of one run survive the next), a view takes its
 * input's slot, outputs equal those without the plan (KILN_MEMORY_PLAN=0) and the references
 * computed here, and the compiled file keeps the plan and rejects a section that does not fit. */
#include "test_model_builder.h"
#include "unit_zoo.h"

#include "backend/backend.h"
#include "cache/backend.h"
#include "cache/buf.h"
#include "exec/exec.h"
#include "exec/memplan.h"
#include "exec/session.h"
#include "kiln.h"

#include <stdio.h>
#include <unistd.h>

/* ------------------------------------------------------------------ an independent check */

/* Every planned value's slot inside the arena and large enough; the slots of two values (a view
 * counted with the value whose slot it takes) never overlap while both are live: from the value's
 * node to its last reader, in the order the executor runs the live nodes. */
static void check_sound(const kn_graph *g, const kn_memplan *p, const char *what) {
    int nv = g->n_values;
    int *start = malloc(sizeof(int) * (size_t)nv), *end = malloc(sizeof(int) * (size_t)nv);
    for (int v = 0; v < nv; v++) start[v] = end[v] = -1;
    int step = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const kn_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) end[n->inputs[k]] = step;
        for (int k = 0; k < n->n_outputs; k++)
            if (n->outputs[k] >= 0) start[n->outputs[k]] = step;
        step++;
    }
    /* a view's reads keep its slot's owner alive */
    for (int v = 0; v < nv; v++) {
        if (p->offset[v] < 0) continue;
        if (end[v] < start[v]) end[v] = start[v];
        int r = p->alias[v];
        if (r >= 0 && end[v] > end[r]) end[r] = end[v];
    }
    int bad = 0;
    for (int v = 0; v < nv && bad < 3; v++) {
        if (p->offset[v] < 0) continue;
        CHECK_MSG(p->size[v] >= kn_memplan_slot_bytes(&g->values[v].type), "%s: '%s' has %lld bytes, needs %lld", what,
                  g->values[v].name, (long long)p->size[v], (long long)kn_memplan_slot_bytes(&g->values[v].type));
        CHECK_MSG(!g->values[v].is_graph_output, "%s: graph output '%s' is planned", what, g->values[v].name);
        CHECK_MSG(p->offset[v] % KN_MEMPLAN_ALIGN == 0 && (uint64_t)(p->offset[v] + p->size[v]) <= p->arena_bytes,
                  "%s: '%s' at %lld + %lld outside the arena of %llu", what, g->values[v].name, (long long)p->offset[v],
                  (long long)p->size[v], (unsigned long long)p->arena_bytes);
        if (p->alias[v] >= 0) continue;
        for (int u = v + 1; u < nv; u++) {
            if (p->offset[u] < 0 || p->alias[u] >= 0) continue;
            bool live_together = start[u] <= end[v] && start[v] <= end[u];
            bool share = p->offset[u] < p->offset[v] + p->size[v] && p->offset[v] < p->offset[u] + p->size[u];
            if (live_together && share) {
                CHECK_MSG(false, "%s: '%s' [%d, %d] and '%s' [%d, %d] share bytes", what, g->values[v].name, start[v],
                          end[v], g->values[u].name, start[u], end[u]);
                bad++;
            }
        }
    }
    free(start);
    free(end);
}

static kiln_session *session_of(const unsigned char *model, size_t size, int level) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_intra_op_threads(o, 1);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session *s = NULL;
    CHECK_STATUS(kiln_session_create_from_memory(model, size, NULL, o, &s), KILN_OK);
    kiln_session_options_destroy(o);
    return s;
}

static kn_tensor *input_64x64(float shift) {
    kn_tensor *t = NULL;
    kn_tensor_new(KILN_DTYPE_FLOAT, 2, (int64_t[]){64, 64}, &t);
    float *p = t->data;
    for (int i = 0; i < 64 * 64; i++) p[i] = (float)((i * 37) % 101 - 50) / 25.0f + shift;
    return t;
}

/* ------------------------------------------------------------------ a chain */

/* x [64,64] -> a1 = Relu -> a2 = Neg -> a3 = Abs -> a4 = Neg -> y = Abs(a4) (= relu(x));
 * z = Add(a1, a3) (= 2 relu(x)) reads a1 last, after everything else. */
static unsigned char *chain_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){64, 64}, NULL);
    int a1 = tmb_value(&b, "a1"), a2 = tmb_value(&b, "a2"), a3 = tmb_value(&b, "a3"), a4 = tmb_value(&b, "a4");
    int y = tmb_value(&b, "y"), z = tmb_value(&b, "z");
    tmb_node(&b, "Relu", (int[]){x}, 1, a1);
    tmb_node(&b, "Neg", (int[]){a1}, 1, a2);
    tmb_node(&b, "Abs", (int[]){a2}, 1, a3);
    tmb_node(&b, "Neg", (int[]){a3}, 1, a4);
    tmb_node(&b, "Abs", (int[]){a4}, 1, y);
    tmb_node(&b, "Add", (int[]){a1, a3}, 2, z);
    tmb_output(&b, y);
    tmb_output(&b, z);
    return tmb_finish(&b, size);
}

/* At level 0 (nothing fused): a1..a4 planned (16 KB each); a1 and a3 live to the end, a2 and a4
 * can share one slot: 48 KB instead of 64. Outputs: relu(x) and 2 relu(x), the same with the
 * plan turned off, and the same on a second run. */
KN_TEST(memplan_chain_shares_slots_and_keeps_late_reads) {
    size_t size = 0;
    unsigned char *model = chain_model(&size);
    kiln_session *s = session_of(model, size, 0);
    if (!s) {
        free(model);
        return;
    }
    const kn_memplan *p = s->rt->memplan;
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ_INT(p->n_planned, 4);
        CHECK_EQ_INT((long long)p->unshared_bytes, 4 * 16384);
        CHECK_EQ_INT((long long)p->arena_bytes, 3 * 16384);
        check_sound(s->model->graph, p, "chain");
    }
    const char *names[1] = {"x"};
    for (int mode = 0; mode < 3; mode++) { /* plan, plan again, no plan */
        if (mode == 2) { /* (the switch is read as a session is made) */
            setenv("KILN_MEMORY_PLAN", "0", 1);
            kiln_session_destroy(s);
            if (!(s = session_of(model, size, 0))) break;
        }
        kn_tensor *in = input_64x64((float)mode * 0.25f), *out[2] = {NULL, NULL};
        CHECK_STATUS(kiln_session_run(s, names, &in, 1, NULL, 2, out), KILN_OK);
        const float *x = in->data;
        int wrong = 0;
        for (int i = 0; out[0] && out[1] && i < 64 * 64; i++) {
            float r = x[i] > 0 ? x[i] : 0;
            wrong += ((const float *)out[0]->data)[i] != r || ((const float *)out[1]->data)[i] != 2 * r;
        }
        CHECK_MSG(wrong == 0, "run %d: %d of 4096 elements wrong", mode, wrong);
        kn_tensor_free(in);
        kn_tensor_free(out[0]);
        kn_tensor_free(out[1]);
    }
    unsetenv("KILN_MEMORY_PLAN");
    free(model);
    kiln_session_destroy(s);
}

/* ------------------------------------------------------------------ views and outputs */

/* x [64,64] -> a = Relu -> r = Reshape(a, [4096]) (a's only reader: takes a's slot)
 *           -> n = Neg(r) -> o = Flatten(Abs(n)) (o a graph output: never in the arena) */
static unsigned char *views_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){64, 64}, NULL);
    int shape = tmb_const_i64(&b, "shape", (int64_t[]){4096}, 1, false);
    int a = tmb_value(&b, "a"), r = tmb_value(&b, "r"), n = tmb_value(&b, "n"), m = tmb_value(&b, "m"), o = tmb_value(&b, "o");
    tmb_node(&b, "Relu", (int[]){x}, 1, a);
    tmb_node(&b, "Reshape", (int[]){a, shape}, 2, r);
    tmb_node(&b, "Neg", (int[]){r}, 1, n);
    tmb_node(&b, "Abs", (int[]){n}, 1, m);
    tmb_node(&b, "Flatten", (int[]){m}, 1, o);
    tmb_output(&b, o);
    return tmb_finish(&b, size);
}

KN_TEST(memplan_views_take_slots_outputs_stay_out) {
    size_t size = 0;
    unsigned char *model = views_model(&size);
    kiln_session *s = session_of(model, size, 0);
    free(model);
    if (!s) return;
    const kn_graph *g = s->model->graph;
    const kn_memplan *p = s->rt->memplan;
    CHECK(p != NULL);
    if (p) {
        int r = kn_graph_find_value(g, "r"), a = kn_graph_find_value(g, "a"), o = kn_graph_find_value(g, "o");
        CHECK_EQ_INT(p->alias[r], a);
        CHECK_EQ_INT((long long)p->offset[o], -1);
        CHECK_EQ_INT(p->n_aliases, 1);
        check_sound(g, p, "views");
    }
    /* the first run's output must hold its values after a second run reuses the arena */
    const char *names[1] = {"x"};
    kn_tensor *in1 = input_64x64(0), *in2 = input_64x64(3), *o1 = NULL, *o2 = NULL;
    CHECK_STATUS(kiln_session_run(s, names, &in1, 1, NULL, 1, &o1), KILN_OK);
    CHECK_STATUS(kiln_session_run(s, names, &in2, 1, NULL, 1, &o2), KILN_OK);
    int wrong = 0;
    for (int k = 0; k < 2; k++) {
        const kn_tensor *in = k ? in2 : in1, *out = k ? o2 : o1;
        if (!out) continue;
        CHECK(out->owns_data || out->pool);
        for (int i = 0; i < 64 * 64; i++) {
            float v = ((const float *)in->data)[i];
            wrong += ((const float *)out->data)[i] != (v > 0 ? v : 0);
        }
    }
    CHECK_MSG(wrong == 0, "%d elements wrong over two runs", wrong);
    kn_tensor_free(in1);
    kn_tensor_free(in2);
    kn_tensor_free(o1);
    kn_tensor_free(o2);
    kiln_session_destroy(s);
}

/* ------------------------------------------------------------------ the zoo */

static void zoo_plan(const char *dir, const char *name, void *arg) {
    (void)arg;
    kiln_session *s = kn_unit_zoo_session(dir, name, 0, 3);
    if (!s) return;
    kn_unit_zoo_data d;
    kn_unit_zoo_read(dir, s, &d);
    /* the zoo's inputs have symbolic dims: the first run records, the second runs on the plan */
    kn_tensor *first[KN_UNIT_ZOO_MAX_IO] = {0}, *second[KN_UNIT_ZOO_MAX_IO] = {0};
    CHECK_STATUS(kiln_session_run(s, d.names, d.in, d.n_in, NULL, d.n_out, first), KILN_OK);
    CHECK_STATUS(kiln_session_run(s, d.names, d.in, d.n_in, NULL, d.n_out, second), KILN_OK);
    /* a run-time plan belongs to the run context that made it (one here: the calls were serial) */
    const kn_memplan *p = s->rt->memplan ? s->rt->memplan : s->free_ctx ? s->free_ctx->shaped[0] : NULL;
    CHECK_MSG(p != NULL, "%s: nothing planned", name);
    if (p) {
        check_sound(s->model->graph, p, name);
        CHECK_MSG(p->arena_bytes <= p->unshared_bytes, "%s: arena %llu > unshared %llu", name,
                  (unsigned long long)p->arena_bytes, (unsigned long long)p->unshared_bytes);
    }
    /* the run on the plan gives the first run's outputs, bit for bit (the CPU kernels are
     * deterministic; the first run's are the zoo test's, checked against the references) */
    for (size_t k = 0; k < d.n_out; k++) {
        if (!first[k] || !second[k]) continue;
        CHECK_MSG(first[k]->nbytes == second[k]->nbytes && !memcmp(first[k]->data, second[k]->data, first[k]->nbytes),
                  "%s: output %zu differs on the planned run", name, k);
        kn_tensor_free(first[k]);
        kn_tensor_free(second[k]);
    }
    kn_unit_zoo_free(&d);
    kiln_session_destroy(s);
}

/* Every zoo model on the CPU at level 3: its plan (made by its first run) is sound, and a run on
 * it gives the first run's outputs. */
KN_TEST(memplan_zoo_plans_are_sound) {
    if (kn_unit_each_zoo_model(zoo_plan, NULL) == 0) KN_SKIP("the model zoo is not there (set KILN_ZOO)");
}

/* ------------------------------------------------------------------ the compiled file */

static const kn_cache_backend *plan_section(void) {
    for (const kn_cache_backend *b = kn_cache_backends; b->section; b++)
        if (!strcmp(b->section, "memory.plan")) return b;
    return NULL;
}

/* A saved compiled file holds the plan; a session loaded from it has the same one. The section's
 * loader refuses a slot outside the arena, a value out of range, a slot smaller than its value and
 * a value that may not be planned, each as KILN_ERR_CACHE naming the section. */
KN_TEST(memplan_kept_in_compiled_file) {
    size_t size = 0;
    unsigned char *model = chain_model(&size);
    char dir[] = "/tmp/kiln_memplan_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char file[256];
    snprintf(file, sizeof file, "%s/chain.kiln", dir);
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_opt_level(o, 0);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_compiled_paths(o, file, NULL);
    kiln_session *a = NULL, *b = NULL;
    CHECK_STATUS(kiln_session_create_from_memory(model, size, NULL, o, &a), KILN_OK);
    kiln_session_options_set_compiled_paths(o, NULL, file);
    CHECK_STATUS(kiln_session_create_from_memory(model, size, NULL, o, &b), KILN_OK);
    kiln_session_options_destroy(o);
    free(model);
    const kn_cache_backend *sec = plan_section();
    CHECK(sec != NULL);
    if (a && b && sec && a->rt->memplan && b->rt->memplan) {
        const kn_memplan *pa = a->rt->memplan, *pb = b->rt->memplan;
        CHECK_EQ_INT(pa->n_values, pb->n_values);
        CHECK_EQ_INT((long long)pa->arena_bytes, (long long)pb->arena_bytes);
        int differ = 0;
        for (int v = 0; v < pa->n_values && pa->n_values == pb->n_values; v++)
            differ += pa->offset[v] != pb->offset[v] || pa->size[v] != pb->size[v] || pa->alias[v] != pb->alias[v];
        CHECK_EQ_INT(differ, 0);
        kn_buf buf = {0};
        CHECK_STATUS(sec->save(a, &buf), KILN_OK);
        /* header 24 bytes, then entries of 24: value u32, alias i32, offset u64, size u64 */
        static const struct {
            size_t at;
            uint64_t value;
            int width;
            const char *field;
        } bad[] = {
            {24 + 8, 1u << 30, 8, "slot"},  /* the first slot far outside the arena */
            {24 + 0, 1u << 20, 4, "value"}, /* a value id out of range */
            {24 + 16, 64, 8, "slot"},       /* a slot smaller than its value */
            {0, 0, 8, "arena bytes"},       /* no arena */
        };
        for (size_t k = 0; k < sizeof bad / sizeof bad[0] && buf.n >= 48; k++) {
            unsigned char *copy = malloc(buf.n);
            memcpy(copy, buf.d, buf.n);
            for (int i = 0; i < bad[k].width; i++) copy[bad[k].at + (size_t)i] = (unsigned char)(bad[k].value >> (8 * i));
            kiln_status st = sec->load(b, copy, buf.n, "test.kiln");
            CHECK_MSG(st == KILN_ERR_CACHE && strstr(kiln_last_error(), "memory.plan") &&
                          strstr(kiln_last_error(), bad[k].field),
                      "case %zu: status %d, '%s'", k, st, kiln_last_error());
            free(copy);
        }
        /* a value that may not be planned: the graph input x (value 0 in the builder's order) */
        unsigned char *copy = malloc(buf.n);
        memcpy(copy, buf.d, buf.n);
        int x = kn_graph_find_value(b->model->graph, "x");
        for (int i = 0; i < 4; i++) copy[24 + (size_t)i] = (unsigned char)((uint32_t)x >> (8 * i));
        kiln_status st = sec->load(b, copy, buf.n, "test.kiln");
        CHECK_MSG(st == KILN_ERR_CACHE && strstr(kiln_last_error(), "cannot be planned"), "input planned: %d '%s'", st,
                  kiln_last_error());
        free(copy);
        kn_buf_free(&buf);
        /* the session keeps the plan it loaded */
        CHECK(b->rt->memplan != NULL);
    }
    /* a view's entry may come before its slot's (the loader checks views after every entry): the
     * views model's section with the view's entry moved to the front loads as the same plan;
     * a view taking over a value that has no slot is refused */
    size_t vsize = 0;
    unsigned char *vmodel = views_model(&vsize);
    kiln_session *v = session_of(vmodel, vsize, 0);
    free(vmodel);
    if (v && sec && v->rt->memplan) {
        const kn_memplan *pv = v->rt->memplan;
        int nv = pv->n_values;
        int64_t *off = malloc(sizeof(int64_t) * (size_t)nv);
        int32_t *al = malloc(sizeof(int32_t) * (size_t)nv);
        for (int i = 0; i < nv; i++) off[i] = pv->offset[i], al[i] = pv->alias[i];
        kn_buf buf = {0};
        CHECK_STATUS(sec->save(v, &buf), KILN_OK);
        size_t n_entries = (buf.n - 24) / 24;
        CHECK_EQ_INT((long long)n_entries, 4); /* a, n, m and the view r */
        size_t view = 0; /* the view's entry: alias (bytes 4-7) not -1 */
        for (size_t e = 0; e < n_entries; e++)
            if (buf.d[24 + e * 24 + 4] != 0xff) view = e;
        unsigned char *moved = malloc(buf.n);
        size_t at = 24;
        memcpy(moved, buf.d, 24);
        memcpy(moved + at, buf.d + 24 + view * 24, 24);
        at += 24;
        for (size_t e = 0; e < n_entries; e++) {
            if (e == view) continue;
            memcpy(moved + at, buf.d + 24 + e * 24, 24);
            at += 24;
        }
        CHECK_STATUS(sec->load(v, moved, buf.n, "test.kiln"), KILN_OK);
        int differ = 0;
        for (int i = 0; i < nv && v->rt->memplan; i++) differ += v->rt->memplan->offset[i] != off[i] || v->rt->memplan->alias[i] != al[i];
        CHECK_EQ_INT(differ, 0);
        int o = kn_graph_find_value(v->model->graph, "o");
        for (int i = 0; i < 4; i++) moved[24 + 4 + (size_t)i] = (unsigned char)((uint32_t)o >> (8 * i));
        kiln_status st = sec->load(v, moved, buf.n, "test.kiln");
        CHECK_MSG(st == KILN_ERR_CACHE && strstr(kiln_last_error(), "alias"), "view of an unplanned value: %d '%s'", st,
                  kiln_last_error());
        free(moved);
        free(off);
        free(al);
        kn_buf_free(&buf);
    }
    kiln_session_destroy(v);
    kiln_session_destroy(a);
    kiln_session_destroy(b);
    unlink(file);
    rmdir(dir);
}
