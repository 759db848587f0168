/* kiln_session_run_into writing outputs straight into the caller's tensors (exec.c, bind_direct).
 *
 * Every case compares with kiln_session_run on the same session (bit for bit: one thread), and
 * every caller tensor sits between guard bytes that must come back untouched (a kernel writing
 * past its output's end would now write into the caller's memory). White-box checks
 * (kn_session_execute) say which outputs were written in place: every output made by a node
 * (a graph input passed through, an initializer and the second of two outputs of one value are
 * copied).
 *
 * - outputs that later nodes also read (BatchNormalization -> Sigmoid, Split -> Concat,
 *   Transpose -> Softmax), a view chain ending in an output (Relu -> Flatten: no copy at all),
 *   Conv, MatMul, Exp, an Identity of an output, at levels 0 and 3;
 * - the same output asked for twice; one tensor given for two outputs; an input's tensor given as
 *   an output (read by the run while it would be written);
 * - symbolic batch: shapes change run to run (a plan per shape set) and come back;
 * - wrong element type or shape: KILN_ERR_INVALID_ARGUMENT naming the output, nothing written;
 *   for a symbolic dim, the mismatch named after the run;
 * - 8 threads calling run_into on one session, each with its own buffers. */
#include "test_model_builder.h"

#include "exec/exec.h"
#include "exec/graph_run.h"
#include "exec/session.h"
#include "kiln.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ models */

/* x [N,3,5,7] (N fixed to 2 unless symbolic) and many outputs; see the file comment. */
static unsigned char *mixed_model(bool symbolic, size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    const char *sym[4] = {"N", NULL, NULL, NULL};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 4, (int64_t[]){symbolic ? -1 : 2, 3, 5, 7}, symbolic ? sym : NULL);
    int w = tmb_const(&b, "w", 4, (int64_t[]){4, 3, 3, 3}, 0.3f);
    int scale = tmb_const(&b, "scale", 1, (int64_t[]){4}, 1.0f), bias = tmb_const(&b, "bias", 1, (int64_t[]){4}, 0.5f);
    int mean = tmb_const(&b, "mean", 1, (int64_t[]){4}, 0.2f), var = tmb_const(&b, "var", 1, (int64_t[]){4}, 0.1f);
    for (int i = 0; i < 4; i++) ((float *)b.g->values[var].constant->data)[i] += 1.5f;
    int k = tmb_const(&b, "k", 1, (int64_t[]){3}, 1.0f);
    int mw = tmb_const(&b, "mw", 2, (int64_t[]){105, 9}, 0.1f);
    int split = tmb_const_i64(&b, "split", (int64_t[]){1, 2}, 2, false);
    int c = tmb_value(&b, "c"), bn = tmb_value(&b, "bn"), s = tmb_value(&b, "s"), e = tmb_value(&b, "e");
    int sp0 = tmb_value(&b, "sp0"), sp1 = tmb_value(&b, "sp1"), cat = tmb_value(&b, "cat");
    int r = tmb_value(&b, "r"), fl = tmb_value(&b, "fl"), tr = tmb_value(&b, "tr"), sm = tmb_value(&b, "sm");
    int id = tmb_value(&b, "id"), xf = tmb_value(&b, "xf"), mm = tmb_value(&b, "mm");
    int conv = tmb_node(&b, "Conv", (int[]){x, w}, 2, c);
    tmb_ints(&b, conv, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    tmb_node(&b, "BatchNormalization", (int[]){c, scale, bias, mean, var}, 5, bn);
    tmb_node(&b, "Sigmoid", (int[]){bn}, 1, s);
    tmb_node(&b, "Exp", (int[]){x}, 1, e);
    int outs[2] = {sp0, sp1};
    int sn = kn_graph_add_node(b.g, NULL, "Split", "", (int[]){x, split}, 2, outs, 2);
    tmb_int(&b, sn, "axis", 1);
    int cn = tmb_node(&b, "Concat", (int[]){sp0, x}, 2, cat);
    tmb_int(&b, cn, "axis", 1);
    tmb_node(&b, "Relu", (int[]){bn}, 1, r);
    int fn = tmb_node(&b, "Flatten", (int[]){r}, 1, fl);
    tmb_int(&b, fn, "axis", 1);
    int tn = tmb_node(&b, "Transpose", (int[]){x}, 1, tr);
    tmb_ints(&b, tn, "perm", (int64_t[]){0, 2, 3, 1}, 4);
    int smn = tmb_node(&b, "Softmax", (int[]){tr}, 1, sm);
    tmb_int(&b, smn, "axis", -1);
    tmb_node(&b, "Identity", (int[]){s}, 1, id);
    int xfn = tmb_node(&b, "Flatten", (int[]){x}, 1, xf);
    tmb_int(&b, xfn, "axis", 1);
    tmb_node(&b, "MatMul", (int[]){xf, mw}, 2, mm);
    const int order[] = {bn, s, e, sp0, sp1, cat, fl, tr, sm, x, k, id, mm};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) tmb_output(&b, order[i]);
    return tmb_finish(&b, size);
}

/* x [4,4]: y = Add(Relu(x), x) and z = Neg(Transpose(x)), for a tensor given both as the input and
 * as an output. */
static unsigned char *alias_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){4, 4}, NULL);
    int r = tmb_value(&b, "r"), y = tmb_value(&b, "y"), t = tmb_value(&b, "t"), z = tmb_value(&b, "z");
    tmb_node(&b, "Relu", (int[]){x}, 1, r);
    tmb_node(&b, "Add", (int[]){r, x}, 2, y);
    int tn = tmb_node(&b, "Transpose", (int[]){x}, 1, t);
    tmb_ints(&b, tn, "perm", (int64_t[]){1, 0}, 2);
    tmb_node(&b, "Neg", (int[]){t}, 1, z);
    tmb_output(&b, y);
    tmb_output(&b, z);
    return tmb_finish(&b, size);
}

static kiln_tensor *random_tensor(const int64_t *dims, int rank, uint32_t seed) {
    kiln_tensor *t = NULL;
    kiln_tensor_create(KILN_DTYPE_FLOAT, dims, rank, &t);
    float *p = kiln_tensor_data(t);
    for (int64_t i = 0; i < kiln_tensor_element_count(t); i++) p[i] = tmb_rand(&seed) * 2.0f;
    return t;
}

/* ------------------------------------------------------------------ guarded caller tensors */

#define GUARD 64 /* bytes before and after */

typedef struct guarded {
    unsigned char *block;
    size_t bytes;
    kiln_tensor *t; /* wraps block + GUARD */
} guarded;

/* A caller tensor shaped like `like`, filled with 0x5a, between guard bytes 0xa5; offset: bytes
 * past a 64-byte boundary (a multiple of 4: caller memory is not always aligned). */
static guarded guarded_like(const kiln_tensor *like, size_t offset) {
    guarded gd = {0};
    gd.bytes = kiln_tensor_bytes(like);
    gd.block = aligned_alloc(64, (gd.bytes + 2 * GUARD + offset + 63) / 64 * 64);
    memset(gd.block, 0xa5, gd.bytes + 2 * GUARD + offset);
    memset(gd.block + GUARD + offset, 0x5a, gd.bytes);
    kiln_status st = kiln_tensor_wrap(kiln_tensor_dtype(like), kiln_tensor_dims(like), kiln_tensor_rank(like),
                                      gd.block + GUARD + offset, gd.bytes, &gd.t);
    CHECK_MSG(st == KILN_OK, "wrap: %s", kiln_last_error());
    return gd;
}

static bool guards_intact(const guarded *gd) {
    const unsigned char *d = kiln_tensor_data(gd->t);
    for (const unsigned char *p = gd->block; p < d; p++)
        if (*p != 0xa5) return false;
    for (size_t i = 0; i < GUARD; i++)
        if (d[gd->bytes + i] != 0xa5) return false;
    return true;
}

static void guarded_free(guarded *gd) {
    kiln_tensor_destroy(gd->t);
    free(gd->block);
    memset(gd, 0, sizeof *gd);
}

static bool same_bytes(kiln_tensor *a, kiln_tensor *b) {
    if (kiln_tensor_dtype(a) != kiln_tensor_dtype(b) || kiln_tensor_rank(a) != kiln_tensor_rank(b)) return false;
    if (kiln_tensor_rank(a) &&
        memcmp(kiln_tensor_dims(a), kiln_tensor_dims(b), sizeof(int64_t) * (size_t)kiln_tensor_rank(a)))
        return false;
    return kiln_tensor_bytes(a) == kiln_tensor_bytes(b) &&
           !memcmp(kiln_tensor_data(a), kiln_tensor_data(b), kiln_tensor_bytes(a));
}

#define MAX_OUT 16

/* run_into on every output (guarded, each `offset` bytes off alignment) against kiln_session_run;
 * what: the case, for messages. */
static void check_run_into(kiln_session *s, kiln_tensor *x, size_t offset, const char *what) {
    const char *in_names[1] = {"x"};
    kiln_tensor *ins[1] = {x};
    size_t no = kiln_session_output_count(s);
    kiln_tensor *want[MAX_OUT] = {0};
    guarded gd[MAX_OUT] = {0};
    kiln_tensor *into[MAX_OUT] = {0};
    CHECK_STATUS(kiln_session_run(s, in_names, ins, 1, NULL, no, want), KILN_OK);
    if (!want[0]) return;
    for (size_t i = 0; i < no; i++) {
        gd[i] = guarded_like(want[i], offset);
        into[i] = gd[i].t;
    }
    for (int rep = 0; rep < 2; rep++) { /* the second run: contexts and plans reused */
        kiln_status st = kiln_session_run_into(s, in_names, ins, 1, NULL, no, into);
        CHECK_MSG(st == KILN_OK, "%s: run_into: %s", what, kiln_last_error());
        for (size_t i = 0; i < no; i++) {
            kiln_value_info info;
            kiln_session_output_info(s, i, &info);
            CHECK_MSG(same_bytes(into[i], want[i]), "%s, run %d: output '%s' differs from kiln_session_run's", what,
                      rep, info.name);
            CHECK_MSG(guards_intact(&gd[i]), "%s, run %d: output '%s': bytes around the caller's tensor written", what,
                      rep, info.name);
        }
    }
    for (size_t i = 0; i < no; i++) {
        guarded_free(&gd[i]);
        kiln_tensor_destroy(want[i]);
    }
}

/* White box: runs s through kn_session_execute with the caller's tensors (graph output order) and
 * checks which outputs came back in the caller's memory: those made by a node, the first time
 * their value is listed. */
static void check_in_place(kiln_session *s, kiln_tensor *x, const char *what) {
    const kn_graph *g = s->model->graph;
    kn_tensor *bound[1] = {x};
    kn_tensor *want[MAX_OUT] = {0}, *outs[MAX_OUT] = {0};
    guarded gd[MAX_OUT] = {0};
    kn_tensor *into[MAX_OUT] = {0};
    if (g->n_outputs > MAX_OUT || g->n_inputs != 1) {
        CHECK_MSG(0, "%s: unexpected graph", what);
        return;
    }
    const char *in_names[1] = {"x"};
    CHECK_STATUS(kiln_session_run(s, in_names, bound, 1, NULL, (size_t)g->n_outputs, want), KILN_OK);
    if (!want[0]) return;
    for (int i = 0; i < g->n_outputs; i++) {
        gd[i] = guarded_like(want[i], 0);
        into[i] = gd[i].t;
    }
    kn_call_ctx cc; /* a CPU session's call context: no lanes, no graphs */
    memset(&cc, 0, sizeof cc);
    kn_run_ctx_begin(&cc.run, NULL, 0, 0);
    bool borrowed = false;
    kiln_status st = kn_session_execute(s, &cc, bound, outs, KN_EXEC_DEVICE_OUTPUTS, &borrowed, into);
    CHECK_MSG(st == KILN_OK, "%s: kn_session_execute: %s", what, kiln_last_error());
    for (int i = 0; st == KILN_OK && i < g->n_outputs; i++) {
        int v = g->outputs[i];
        const kn_value *val = &g->values[v];
        bool first = true;
        for (int j = 0; j < i; j++) first &= g->outputs[j] != v;
        bool expect = first && !val->constant && !val->is_graph_input;
        CHECK_MSG((outs[i] && outs[i]->data == into[i]->data) == expect, "%s: output '%s' %s in the caller's memory",
                  what, val->name, expect ? "not written" : "unexpectedly");
        if (outs[i] && outs[i]->data == into[i]->data)
            CHECK_MSG(same_bytes(into[i], want[i]), "%s: output '%s' differs", what, val->name);
        CHECK_MSG(guards_intact(&gd[i]), "%s: output '%s': guard bytes written", what, val->name);
    }
    for (int i = 0; i < g->n_outputs; i++) {
        kn_tensor_free(outs[i]);
        kn_tensor_free(want[i]);
        guarded_free(&gd[i]);
    }
    kn_run_ctx_clear(&cc.run);
}

/* ------------------------------------------------------------------ tests */

KN_TEST(run_into_writes_outputs_in_place) {
    size_t size;
    unsigned char *m = mixed_model(false, &size);
    if (!m) return;
    kiln_tensor *x = random_tensor((int64_t[]){2, 3, 5, 7}, 4, 7);
    for (int level = 0; level <= 3; level += 3) {
        kiln_session *s = tmb_session(m, size, 1, level);
        if (!s) continue;
        char what[64];
        for (size_t off = 0; off <= 4; off += 4) {
            snprintf(what, sizeof what, "level %d, caller memory %zu bytes off alignment", level, off);
            check_run_into(s, x, off, what);
        }
        snprintf(what, sizeof what, "level %d", level);
        check_in_place(s, x, what);
        kiln_session_destroy(s);
    }
    kiln_tensor_destroy(x);
    free(m);
}

KN_TEST(run_into_without_in_place_matches) {
    /* KILN_OUTPUTS_IN_PLACE=0 (the copy after the run) gives the same bytes */
    size_t size;
    unsigned char *m = mixed_model(false, &size);
    if (!m) return;
    kiln_tensor *x = random_tensor((int64_t[]){2, 3, 5, 7}, 4, 11);
    setenv("KILN_OUTPUTS_IN_PLACE", "0", 1); /* (read as the session is made) */
    kiln_session *s = tmb_session(m, size, 1, 3);
    unsetenv("KILN_OUTPUTS_IN_PLACE");
    if (s) {
        check_run_into(s, x, 0, "KILN_OUTPUTS_IN_PLACE=0");
        kiln_session_destroy(s);
    }
    kiln_tensor_destroy(x);
    free(m);
}

KN_TEST(run_into_repeated_and_shared_tensors) {
    size_t size;
    unsigned char *m = mixed_model(false, &size);
    if (!m) return;
    kiln_tensor *x = random_tensor((int64_t[]){2, 3, 5, 7}, 4, 13);
    kiln_session *s = tmb_session(m, size, 1, 0);
    if (s) {
        const char *in_names[1] = {"x"};
        kiln_tensor *ins[1] = {x};
        const char *names[3] = {"s", "cat", "s"};
        kiln_tensor *want[3] = {0};
        CHECK_STATUS(kiln_session_run(s, in_names, ins, 1, names, 3, want), KILN_OK);
        if (want[0]) {
            /* the same output asked for twice, each into its own tensor */
            guarded a = guarded_like(want[0], 0), c = guarded_like(want[1], 0), b2 = guarded_like(want[2], 0);
            kiln_tensor *into[3] = {a.t, c.t, b2.t};
            CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, names, 3, into), KILN_OK);
            CHECK(same_bytes(a.t, want[0]) && same_bytes(b2.t, want[0]) && same_bytes(c.t, want[1]));
            CHECK(guards_intact(&a) && guards_intact(&b2) && guards_intact(&c));
            /* one tensor given for two outputs of one shape (bn and s): both are copied after the
             * run, the later one stays (as before outputs were written in place); fl, made from
             * bn after s, must still see bn */
            const char *three[3] = {"bn", "s", "fl"};
            kiln_tensor *fl_want[3] = {0};
            CHECK_STATUS(kiln_session_run(s, in_names, ins, 1, three, 3, fl_want), KILN_OK);
            if (fl_want[2]) {
                guarded f = guarded_like(fl_want[2], 0);
                kiln_tensor *same[3] = {a.t, a.t, f.t};
                CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, three, 3, same), KILN_OK);
                CHECK(same_bytes(a.t, want[0]));
                CHECK_MSG(same_bytes(f.t, fl_want[2]), "output 'fl' read bn after s was written over it");
                CHECK(guards_intact(&a) && guards_intact(&f));
                guarded_free(&f);
            }
            for (int i = 0; i < 3; i++) kiln_tensor_destroy(fl_want[i]);
            guarded_free(&a);
            guarded_free(&c);
            guarded_free(&b2);
        }
        for (int i = 0; i < 3; i++) kiln_tensor_destroy(want[i]);
        kiln_session_destroy(s);
    }
    kiln_tensor_destroy(x);
    free(m);
}

KN_TEST(run_into_input_tensor_given_as_output) {
    size_t size;
    unsigned char *m = alias_model(&size);
    if (!m) return;
    for (int level = 0; level <= 3; level += 3) {
        kiln_session *s = tmb_session(m, size, 1, level);
        if (!s) continue;
        const char *in_names[1] = {"x"};
        for (int which = 0; which < 2; which++) {
            kiln_tensor *x = random_tensor((int64_t[]){4, 4}, 2, 17 + (uint32_t)which);
            kiln_tensor *ins[1] = {x};
            kiln_tensor *want[2] = {0};
            CHECK_STATUS(kiln_session_run(s, in_names, ins, 1, NULL, 2, want), KILN_OK);
            if (!want[0]) {
                kiln_tensor_destroy(x);
                continue;
            }
            /* the input's own tensor receives output `which` (read by the run as it is written) */
            kiln_tensor *other = NULL;
            kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){4, 4}, 2, &other);
            kiln_tensor *into[2] = {which == 0 ? x : other, which == 0 ? other : x};
            CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, NULL, 2, into), KILN_OK);
            CHECK_MSG(same_bytes(into[0], want[0]) && same_bytes(into[1], want[1]),
                      "level %d: the input's tensor as output %d: wrong results", level, which);
            kiln_tensor_destroy(other);
            kiln_tensor_destroy(want[0]);
            kiln_tensor_destroy(want[1]);
            kiln_tensor_destroy(x);
        }
        kiln_session_destroy(s);
    }
    free(m);
}

KN_TEST(run_into_symbolic_batch) {
    size_t size;
    unsigned char *m = mixed_model(true, &size);
    if (!m) return;
    kiln_session *s = tmb_session(m, size, 1, 3);
    if (s) {
        const int64_t batches[] = {2, 3, 1, 2, 3};
        for (size_t k = 0; k < sizeof batches / sizeof batches[0]; k++) {
            kiln_tensor *x = random_tensor((int64_t[]){batches[k], 3, 5, 7}, 4, 23 + (uint32_t)k);
            char what[64];
            snprintf(what, sizeof what, "batch %lld (run %zu)", (long long)batches[k], k);
            check_run_into(s, x, 0, what);
            check_in_place(s, x, what);
            kiln_tensor_destroy(x);
        }
        /* a caller tensor for another batch than the input's: found when the output is computed,
         * named after the run */
        kiln_tensor *x = random_tensor((int64_t[]){2, 3, 5, 7}, 4, 29);
        const char *in_names[1] = {"x"};
        kiln_tensor *ins[1] = {x};
        const char *names[2] = {"e", "mm"};
        kiln_tensor *e = NULL, *mm = NULL;
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){2, 3, 5, 7}, 4, &e);
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){3, 9}, 2, &mm);
        kiln_tensor *into[2] = {e, mm};
        CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, names, 2, into), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("output 'mm'");
        CHECK_ERROR_HAS("[3,9]");
        kiln_tensor_destroy(e);
        kiln_tensor_destroy(mm);
        kiln_tensor_destroy(x);
        kiln_session_destroy(s);
    }
    free(m);
}

KN_TEST(run_into_wrong_tensors_are_refused_with_nothing_written) {
    size_t size;
    unsigned char *m = mixed_model(false, &size);
    if (!m) return;
    kiln_session *s = tmb_session(m, size, 1, 3);
    if (s) {
        kiln_tensor *x = random_tensor((int64_t[]){2, 3, 5, 7}, 4, 31);
        const char *in_names[1] = {"x"};
        kiln_tensor *ins[1] = {x};
        const char *names[2] = {"e", "sm"};
        kiln_tensor *e = NULL, *bad = NULL, *bad_type = NULL;
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){2, 3, 5, 7}, 4, &e);
        kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){2, 5, 7, 4}, 4, &bad);
        kiln_tensor_create(KILN_DTYPE_INT32, (int64_t[]){2, 5, 7, 3}, 4, &bad_type);
        memset(kiln_tensor_data(e), 0x5a, kiln_tensor_bytes(e));
        kiln_tensor *into[2] = {e, bad};
        CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, names, 2, into), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("output 'sm'");
        CHECK_ERROR_HAS("[2,5,7,4]");
        CHECK_MSG(((unsigned char *)kiln_tensor_data(e))[0] == 0x5a &&
                      ((unsigned char *)kiln_tensor_data(e))[kiln_tensor_bytes(e) - 1] == 0x5a,
                  "output 'e' was written although the call was refused");
        into[1] = bad_type;
        CHECK_STATUS(kiln_session_run_into(s, in_names, ins, 1, names, 2, into), KILN_ERR_INVALID_ARGUMENT);
        CHECK_ERROR_HAS("output 'sm'");
        CHECK_ERROR_HAS("int32");
        CHECK(((unsigned char *)kiln_tensor_data(e))[0] == 0x5a);
        kiln_tensor_destroy(e);
        kiln_tensor_destroy(bad);
        kiln_tensor_destroy(bad_type);
        kiln_tensor_destroy(x);
        kiln_session_destroy(s);
    }
    free(m);
}

/* ------------------------------------------------------------------ threads */

typedef struct thread_arg {
    kiln_session *s;
    kiln_tensor *x;
    kiln_tensor *want[MAX_OUT];
    size_t n_out;
    int rounds;
    atomic_int *bad;
} thread_arg;

static void *thread_main(void *p) {
    thread_arg *a = p;
    guarded gd[MAX_OUT] = {0};
    kiln_tensor *into[MAX_OUT] = {0};
    for (size_t i = 0; i < a->n_out; i++) {
        gd[i] = guarded_like(a->want[i], (i % 2) * 4);
        into[i] = gd[i].t;
    }
    const char *in_names[1] = {"x"};
    kiln_tensor *ins[1] = {a->x};
    for (int r = 0; r < a->rounds; r++) {
        for (size_t i = 0; i < a->n_out; i++) memset(kiln_tensor_data(into[i]), 0, kiln_tensor_bytes(into[i]));
        if (kiln_session_run_into(a->s, in_names, ins, 1, NULL, a->n_out, into) != KILN_OK) {
            atomic_fetch_add(a->bad, 1);
            break;
        }
        for (size_t i = 0; i < a->n_out; i++)
            if (!same_bytes(into[i], a->want[i]) || !guards_intact(&gd[i])) atomic_fetch_add(a->bad, 1);
    }
    for (size_t i = 0; i < a->n_out; i++) guarded_free(&gd[i]);
    return NULL;
}

KN_TEST(run_into_from_threads_on_one_session) {
    size_t size;
    unsigned char *m = mixed_model(true, &size);
    if (!m) return;
    kiln_session *s = tmb_session(m, size, 1, 3);
    if (s) {
        enum { T = 8 };
        thread_arg args[T];
        atomic_int bad = 0;
        const char *in_names[1] = {"x"};
        size_t no = kiln_session_output_count(s);
        for (int t = 0; t < T; t++) {
            memset(&args[t], 0, sizeof args[t]);
            args[t].s = s;
            args[t].x = random_tensor((int64_t[]){1 + t % 3, 3, 5, 7}, 4, 100 + (uint32_t)t);
            args[t].n_out = no;
            args[t].rounds = 25;
            args[t].bad = &bad;
            kiln_tensor *ins[1] = {args[t].x};
            CHECK_STATUS(kiln_session_run(s, in_names, ins, 1, NULL, no, args[t].want), KILN_OK);
        }
        pthread_t th[T];
        for (int t = 0; t < T; t++) pthread_create(&th[t], NULL, thread_main, &args[t]);
        for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
        CHECK_MSG(atomic_load(&bad) == 0, "%d wrong outputs or failed calls from %d threads", atomic_load(&bad), T);
        for (int t = 0; t < T; t++) {
            for (size_t i = 0; i < no; i++) kiln_tensor_destroy(args[t].want[i]);
            kiln_tensor_destroy(args[t].x);
        }
        kiln_session_destroy(s);
    }
    free(m);
}

/* ------------------------------------------------------------------ kernels that write every element */

/* Kernels flagged KN_KERNEL_OVERWRITES get the caller's memory as it is (not zeroed): run_into over
 * tensors full of 0xff bytes (NaN) must give what kiln_session_run gives. MatMul and Gemm over
 * their paths: K = 0, one row, batched B, broadcast batch, float16, int32, Gemm with and without
 * C, transposed. */
static void check_overwrites(const char *op, kiln_dtype dt, int ra, const int64_t *da, int rb, const int64_t *db,
                             int rc, const int64_t *dc, bool ta, bool tb) {
    tmb b;
    tmb_init(&b, 17);
    int a = tmb_input(&b, "a", dt, ra, da, NULL), bb = tmb_input(&b, "b", dt, rb, db, NULL);
    int c = rc >= 0 ? tmb_input(&b, "c", dt, rc, dc, NULL) : -1, y = tmb_value(&b, "y");
    int node = tmb_node(&b, op, (int[]){a, bb, c}, c >= 0 ? 3 : 2, y);
    if (!strcmp(op, "Gemm")) {
        tmb_int(&b, node, "transA", ta);
        tmb_int(&b, node, "transB", tb);
    }
    tmb_output(&b, y);
    size_t size;
    unsigned char *m = tmb_finish(&b, &size);
    if (!m) return;
    kiln_session *s = tmb_session(m, size, 2, 0);
    if (s) {
        const char *names[3] = {"a", "b", "c"};
        kiln_tensor *ins[3] = {0};
        const int ranks[3] = {ra, rb, rc};
        const int64_t *dims[3] = {da, db, dc};
        uint32_t seed = 5;
        for (int i = 0; i < (rc >= 0 ? 3 : 2); i++) {
            kiln_tensor_create(dt, dims[i], ranks[i], &ins[i]);
            unsigned char *p = kiln_tensor_data(ins[i]);
            size_t es = kiln_dtype_size(dt), n = kiln_tensor_bytes(ins[i]) / es;
            for (size_t e = 0; e < n; e++) {
                float v = tmb_rand(&seed);
                if (dt == KILN_DTYPE_FLOAT) memcpy(p + e * 4, &v, 4);
                else if (dt == KILN_DTYPE_INT32) ((int32_t *)p)[e] = (int32_t)(v * 10);
                else ((uint16_t *)p)[e] = (uint16_t)(0x3c00 + ((int)(v * 100) & 0x3ff)); /* float16 in [1, 2) */
            }
        }
        kiln_tensor *want = NULL;
        CHECK_STATUS(kiln_session_run(s, names, ins, rc >= 0 ? 3 : 2, NULL, 1, &want), KILN_OK);
        if (want) {
            guarded g = guarded_like(want, 0);
            for (int run = 0; run < 2; run++) {
                memset(kiln_tensor_data(g.t), 0xff, kiln_tensor_bytes(g.t));
                CHECK_STATUS(kiln_session_run_into(s, names, ins, rc >= 0 ? 3 : 2, NULL, 1, &g.t), KILN_OK);
                CHECK_MSG(same_bytes(g.t, want) && guards_intact(&g),
                          "%s %s [%lld..] x [%lld..]: run_into over 0xff bytes differs from kiln_session_run", op,
                          kiln_dtype_name(dt), (long long)da[0], (long long)db[0]);
            }
            guarded_free(&g);
        }
        kiln_tensor_destroy(want);
        for (int i = 0; i < 3; i++) kiln_tensor_destroy(ins[i]);
        kiln_session_destroy(s);
    }
    free(m);
}

KN_TEST(run_into_kernels_that_overwrite_fill_every_element) {
    const kiln_dtype F = KILN_DTYPE_FLOAT;
    check_overwrites("MatMul", F, 2, (int64_t[]){5, 0}, 2, (int64_t[]){0, 7}, -1, NULL, false, false); /* K = 0 */
    check_overwrites("MatMul", F, 2, (int64_t[]){1, 33}, 2, (int64_t[]){33, 70}, -1, NULL, false, false);
    check_overwrites("MatMul", F, 3, (int64_t[]){3, 17, 40}, 3, (int64_t[]){3, 40, 19}, -1, NULL, false, false);
    check_overwrites("MatMul", F, 3, (int64_t[]){4, 9, 8}, 2, (int64_t[]){8, 65}, -1, NULL, false, false);
    check_overwrites("MatMul", F, 4, (int64_t[]){2, 1, 5, 6}, 3, (int64_t[]){3, 6, 7}, -1, NULL, false, false);
    check_overwrites("MatMul", KILN_DTYPE_FLOAT16, 2, (int64_t[]){6, 12}, 2, (int64_t[]){12, 5}, -1, NULL, false, false);
    check_overwrites("MatMul", KILN_DTYPE_INT32, 2, (int64_t[]){6, 12}, 2, (int64_t[]){12, 5}, -1, NULL, false, false);
    check_overwrites("Gemm", F, 2, (int64_t[]){7, 30}, 2, (int64_t[]){30, 21}, -1, NULL, false, false);
    check_overwrites("Gemm", F, 2, (int64_t[]){30, 7}, 2, (int64_t[]){21, 30}, 1, (int64_t[]){21}, true, true);
    check_overwrites("Gemm", F, 2, (int64_t[]){7, 0}, 2, (int64_t[]){0, 21}, 2, (int64_t[]){7, 1}, false, false);
    check_overwrites("Gemm", F, 2, (int64_t[]){7, 0}, 2, (int64_t[]){0, 21}, -1, NULL, false, false);
    check_overwrites("Gemm", KILN_DTYPE_INT32, 2, (int64_t[]){4, 6}, 2, (int64_t[]){6, 3}, 1, (int64_t[]){3}, false, false);
}
