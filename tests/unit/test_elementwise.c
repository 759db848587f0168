/* Unit tests of the elementwise family: broadcasting edge cases, integer semantics, half and
 * float8 conversions, and the accuracy of the vectorised float math. Expected values are
 * computed here independently (plain loops, libm in double). */
#include "backend/cpu/cpu.h"
#include "exec/exec.h"
#include "ops/op.h"
#include "test_op_call.h"
#include "unit.h"
#include "util/threadpool.h"

#include <float.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ helpers */

typedef struct ew_call {
    const char *op;
    int opset;
    const kn_attr *attrs;
    int n_attrs;
    kn_threadpool *pool;
} ew_call;

static kn_tensor *tensor_f32(int rank, const int64_t *dims, const float *vals) {
    kn_tensor *t = NULL;
    if (kn_tensor_new(KILN_DTYPE_FLOAT, rank, dims, &t) != KILN_OK) return NULL;
    int64_t n = kn_tensor_count(t);
    for (int64_t i = 0; i < n; i++) ((float *)t->data)[i] = vals ? vals[i] : (float)((i * 37) % 23) - 11.0f;
    return t;
}

static kn_tensor *tensor_of(kiln_dtype dt, int rank, const int64_t *dims) {
    kn_tensor *t = NULL;
    kn_tensor_new(dt, rank, dims, &t);
    return t;
}

static void node_init(kn_node *n, const ew_call *call) {
    memset(n, 0, sizeof *n);
    n->name = "test_node";
    n->op_type = call->op;
    n->domain = "";
    n->opset = call->opset ? call->opset : 20;
    n->attrs = (kn_attr *)call->attrs;
    n->n_attrs = call->n_attrs;
}

/* Runs shape inference then the CPU kernel, as the executor does; *out gets the output (owned by
 * the caller) or NULL on failure. */
static kiln_status run_op(const ew_call *call, kn_tensor **in, int n_in, kn_tensor **out) {
    kn_node node;
    node_init(&node, call);
    return toc_run(&node, call->pool, in, n_in, out);
}

/* Runs only the kernel, with no preallocated output (it must size the output itself). */
static kiln_status run_kernel_only(const ew_call *call, kn_tensor **in, int n_in, kn_tensor **out) {
    kn_node node;
    node_init(&node, call);
    char why[256];
    const kn_cpu_kernel *k = kn_cpu_find(&node, NULL, n_in, why, sizeof why);
    if (!k) return kn_error(KILN_ERR_UNSUPPORTED, "%s", why);
    kn_tensor *outs[1] = {NULL};
    kn_kernel_ctx kc = {&node, NULL, n_in, in, 1, outs, call->pool, NULL};
    kiln_status st = k->run(&kc);
    *out = outs[0];
    if (st != KILN_OK) {
        kn_tensor_free(outs[0]);
        *out = NULL;
    }
    return st;
}

static bool dims_are(const kn_tensor *t, int rank, const int64_t *dims) {
    if (!t || t->rank != rank) return false;
    for (int d = 0; d < rank; d++)
        if (t->dims[d] != dims[d]) return false;
    return true;
}

/* ------------------------------------------------------------------ broadcasting */

KN_TEST(ew_broadcast_column_by_row) {
    int64_t da[2] = {3, 1}, db[2] = {1, 4}, want[2] = {3, 4};
    float a[3] = {1, 2, 3}, b[4] = {10, 20, 30, 40};
    kn_tensor *in[2] = {tensor_f32(2, da, a), tensor_f32(2, db, b)}, *o;
    ew_call call = {"Add", 14, NULL, 0, NULL};
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    CHECK(dims_are(o, 2, want));
    if (o)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) CHECK_NEAR(((float *)o->data)[i * 4 + j], a[i] + b[j], 0);
    kn_tensor_free(o);
    /* and the other way round, through Sub (order matters) */
    kn_tensor *sw[2] = {in[1], in[0]};
    call.op = "Sub";
    CHECK_STATUS(run_op(&call, sw, 2, &o), KILN_OK);
    CHECK(dims_are(o, 2, want));
    if (o)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++) CHECK_NEAR(((float *)o->data)[i * 4 + j], b[j] - a[i], 0);
    kn_tensor_free(o);
    kn_tensor_free(in[0]);
    kn_tensor_free(in[1]);
}

KN_TEST(ew_broadcast_rank0_scalars) {
    int64_t d23[2] = {2, 3};
    float s = 2.5f, x[6] = {1, -2, 3, -4, 5, -6};
    kn_tensor *sc = tensor_f32(0, NULL, &s), *m = tensor_f32(2, d23, x), *o;
    ew_call call = {"Mul", 14, NULL, 0, NULL};
    kn_tensor *in[2] = {sc, m};
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    CHECK(dims_are(o, 2, d23));
    if (o)
        for (int i = 0; i < 6; i++) CHECK_NEAR(((float *)o->data)[i], 2.5f * x[i], 0);
    kn_tensor_free(o);
    /* scalar op scalar stays rank 0 */
    kn_tensor *ss[2] = {sc, sc};
    CHECK_STATUS(run_op(&call, ss, 2, &o), KILN_OK);
    CHECK(o && o->rank == 0 && kn_tensor_count(o) == 1);
    if (o) CHECK_NEAR(((float *)o->data)[0], 6.25f, 0);
    kn_tensor_free(o);
    kn_tensor_free(sc);
    kn_tensor_free(m);
}

KN_TEST(ew_broadcast_zero_sized) {
    int64_t d03[2] = {0, 3}, d13[2] = {1, 3}, d20[2] = {2, 0};
    kn_tensor *a = tensor_f32(2, d03, NULL), *b = tensor_f32(2, d13, NULL), *c = tensor_f32(2, d20, NULL), *o;
    ew_call call = {"Add", 14, NULL, 0, NULL};
    kn_tensor *in[2] = {a, b};
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    CHECK(dims_are(o, 2, d03));
    kn_tensor_free(o);
    float one = 1.0f;
    kn_tensor *s = tensor_f32(0, NULL, &one);
    kn_tensor *in2[2] = {c, s};
    CHECK_STATUS(run_op(&call, in2, 2, &o), KILN_OK);
    CHECK(dims_are(o, 2, d20));
    kn_tensor_free(o);
    /* a 0-dim broadcasts against 1 but not against 3 */
    int64_t d01[2] = {0, 1}, d31[2] = {3, 1};
    kn_tensor *z = tensor_f32(2, d01, NULL), *t = tensor_f32(2, d31, NULL);
    kn_tensor *in3[2] = {z, t};
    CHECK_STATUS(run_op(&call, in3, 2, &o), KILN_ERR_SHAPE);
    kn_tensor *un[1] = {a};
    call.op = "Relu";
    CHECK_STATUS(run_op(&call, un, 1, &o), KILN_OK);
    CHECK(dims_are(o, 2, d03));
    kn_tensor_free(o);
    kn_tensor_free(a);
    kn_tensor_free(b);
    kn_tensor_free(c);
    kn_tensor_free(s);
    kn_tensor_free(z);
    kn_tensor_free(t);
}

KN_TEST(ew_broadcast_mismatch_names_shapes) {
    int64_t da[2] = {2, 3}, db[2] = {4, 3};
    kn_tensor *a = tensor_f32(2, da, NULL), *b = tensor_f32(2, db, NULL), *o;
    kn_tensor *in[2] = {a, b};
    ew_call call = {"Add", 14, NULL, 0, NULL};
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_ERR_SHAPE);
    CHECK_ERROR_HAS("[2,3]");
    CHECK_ERROR_HAS("[4,3]");
    CHECK_ERROR_HAS("test_node");
    /* the kernel alone (no inference) checks too */
    CHECK_STATUS(run_kernel_only(&call, in, 2, &o), KILN_ERR_SHAPE);
    CHECK_ERROR_HAS("[2,3]");
    CHECK_ERROR_HAS("[4,3]");
    /* a preallocated output of the wrong shape is not written past its end */
    kn_tensor_free(a);
    kn_tensor_free(b);
}

/* [2,1,4] + [3,1] -> [2,3,4], and a many-thread run with chunks that split rows */
KN_TEST(ew_broadcast_both_sides_threaded) {
    kn_threadpool *pool = NULL;
    CHECK_STATUS(kn_threadpool_create(4, &pool), KILN_OK);
    int64_t da[3] = {2, 1, 4}, db[2] = {3, 1}, want[3] = {2, 3, 4};
    kn_tensor *a = tensor_f32(3, da, NULL), *b = tensor_f32(2, db, NULL), *o;
    kn_tensor *in[2] = {a, b};
    ew_call call = {"Sub", 14, NULL, 0, pool};
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    CHECK(dims_are(o, 3, want));
    if (o)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 4; k++)
                    CHECK_NEAR(((float *)o->data)[(i * 3 + j) * 4 + k],
                               ((float *)a->data)[i * 4 + k] - ((float *)b->data)[j], 0);
    kn_tensor_free(o);
    kn_tensor_free(a);
    kn_tensor_free(b);
    /* [5,1,70001] * [5,3,1]: inner rows of 70001 split across tasks */
    int64_t dx[3] = {5, 1, 70001}, dy[3] = {5, 3, 1}, dz[3] = {5, 3, 70001};
    kn_tensor *x = tensor_f32(3, dx, NULL), *y = tensor_f32(3, dy, NULL);
    kn_tensor *in2[2] = {x, y};
    call.op = "Mul";
    CHECK_STATUS(run_op(&call, in2, 2, &o), KILN_OK);
    CHECK(dims_are(o, 3, dz));
    int bad = 0;
    if (o)
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 70001; k++) {
                    float want_v = ((float *)x->data)[i * 70001 + k] * ((float *)y->data)[i * 3 + j];
                    if (((float *)o->data)[((int64_t)i * 3 + j) * 70001 + k] != want_v) bad++;
                }
    CHECK_EQ_INT(bad, 0);
    kn_tensor_free(o);
    kn_tensor_free(x);
    kn_tensor_free(y);
    kn_threadpool_destroy(pool);
}

/* Broadcast shapes whose rows are short and whose tasks start mid-row and mid-plane, checked
 * element by element against index arithmetic done here. */
KN_TEST(ew_broadcast_short_rows_threaded) {
    kn_threadpool *pool = NULL;
    CHECK_STATUS(kn_threadpool_create(3, &pool), KILN_OK);
    static const int64_t shapes[][2][4] = {
        {{43, 51, 73, 1}, {43, 1, 73, 1}},  /* [43,51,73] + [43,1,73] (4th dim 1) */
        {{7, 13, 41, 49}, {1, 13, 1, 1}},   /* a per-channel scale over 7x7-like maps */
        {{3, 1, 300, 170}, {3, 4, 1, 170}}, /* both sides broadcast */
        {{1, 2, 1, 90001}, {5, 2, 3, 1}},
    };
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int64_t *sa = shapes[t][0], *sb = shapes[t][1];
        int64_t so[4];
        for (int d = 0; d < 4; d++) so[d] = sa[d] > sb[d] ? sa[d] : sb[d];
        kn_tensor *a = tensor_f32(4, sa, NULL), *b = tensor_f32(4, sb, NULL), *o;
        float *bv = b->data;
        for (int64_t i = 0; i < kn_tensor_count(b); i++) bv[i] = (float)i * 0.5f;
        kn_tensor *in[2] = {a, b};
        ew_call call = {"Add", 14, NULL, 0, pool};
        CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
        CHECK(dims_are(o, 4, so));
        int64_t bad = 0, i = 0;
        if (o)
            for (int64_t i0 = 0; i0 < so[0]; i0++)
                for (int64_t i1 = 0; i1 < so[1]; i1++)
                    for (int64_t i2 = 0; i2 < so[2]; i2++)
                        for (int64_t i3 = 0; i3 < so[3]; i3++, i++) {
                            int64_t ia = (((sa[0] > 1 ? i0 : 0) * sa[1] + (sa[1] > 1 ? i1 : 0)) * sa[2] +
                                          (sa[2] > 1 ? i2 : 0)) * sa[3] + (sa[3] > 1 ? i3 : 0);
                            int64_t ib = (((sb[0] > 1 ? i0 : 0) * sb[1] + (sb[1] > 1 ? i1 : 0)) * sb[2] +
                                          (sb[2] > 1 ? i2 : 0)) * sb[3] + (sb[3] > 1 ? i3 : 0);
                            float want = ((float *)a->data)[ia] + bv[ib];
                            if (((float *)o->data)[i] != want) bad++;
                        }
        CHECK_MSG(bad == 0, "shape case %zu: %lld wrong elements", t, (long long)bad);
        kn_tensor_free(o);
        kn_tensor_free(a);
        kn_tensor_free(b);
    }
    kn_threadpool_destroy(pool);
}

KN_TEST(ew_where_three_way_broadcast) {
    int64_t dc[2] = {2, 1}, dx[1] = {3}, dy[2] = {1, 1}, want[2] = {2, 3};
    kn_tensor *c = tensor_of(KILN_DTYPE_BOOL, 2, dc);
    ((uint8_t *)c->data)[0] = 1;
    float xv[3] = {1, 2, 3}, yv = -7;
    kn_tensor *x = tensor_f32(1, dx, xv), *y = tensor_f32(2, dy, &yv), *o;
    kn_tensor *in[3] = {c, x, y};
    ew_call call = {"Where", 16, NULL, 0, NULL};
    CHECK_STATUS(run_op(&call, in, 3, &o), KILN_OK);
    CHECK(dims_are(o, 2, want));
    float exp6[6] = {1, 2, 3, -7, -7, -7};
    if (o)
        for (int i = 0; i < 6; i++) CHECK_NEAR(((float *)o->data)[i], exp6[i], 0);
    kn_tensor_free(o);
    kn_tensor_free(c);
    kn_tensor_free(x);
    kn_tensor_free(y);
}

KN_TEST(ew_variadic_sum_mean_max) {
    int64_t d1[1] = {3}, d2[2] = {2, 1}, d0[1] = {1};
    float a[3] = {1, 2, 3}, b[2] = {10, 20}, c = 0.5f;
    kn_tensor *ta = tensor_f32(1, d1, a), *tb = tensor_f32(2, d2, b), *tc = tensor_f32(1, d0, &c), *o;
    kn_tensor *in[3] = {ta, tb, tc};
    ew_call call = {"Sum", 13, NULL, 0, NULL};
    CHECK_STATUS(run_op(&call, in, 3, &o), KILN_OK);
    int64_t want[2] = {2, 3};
    CHECK(dims_are(o, 2, want));
    if (o)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) CHECK_NEAR(((float *)o->data)[i * 3 + j], a[j] + b[i] + c, 0);
    kn_tensor_free(o);
    call.op = "Mean";
    CHECK_STATUS(run_op(&call, in, 3, &o), KILN_OK);
    if (o)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++) CHECK_NEAR(((float *)o->data)[i * 3 + j], (a[j] + b[i] + c) / 3.0f, 1e-6);
    kn_tensor_free(o);
    /* Max propagates NaN */
    ((float *)ta->data)[1] = NAN;
    call.op = "Max";
    CHECK_STATUS(run_op(&call, in, 3, &o), KILN_OK);
    if (o) {
        CHECK(isnan(((float *)o->data)[1]) && isnan(((float *)o->data)[4]));
        CHECK_NEAR(((float *)o->data)[0], 10.0f, 0);
    }
    kn_tensor_free(o);
    kn_tensor_free(ta);
    kn_tensor_free(tb);
    kn_tensor_free(tc);
}

/* opset 6 Add with broadcast=1, axis=1: B [3] lands on A's dim 1 */
KN_TEST(ew_legacy_axis_broadcast) {
    int64_t da[3] = {2, 3, 4}, db[1] = {3};
    kn_tensor *a = tensor_f32(3, da, NULL);
    float bv[3] = {100, 200, 300};
    kn_tensor *b = tensor_f32(1, db, bv), *o;
    kn_attr attrs[2];
    memset(attrs, 0, sizeof attrs);
    attrs[0].name = "broadcast", attrs[0].type = KN_ATTR_INT, attrs[0].i = 1;
    attrs[1].name = "axis", attrs[1].type = KN_ATTR_INT, attrs[1].i = 1;
    ew_call call = {"Add", 6, attrs, 2, NULL};
    kn_tensor *in[2] = {a, b};
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    CHECK(dims_are(o, 3, da));
    if (o)
        for (int i = 0; i < 24; i++)
            CHECK_NEAR(((float *)o->data)[i], ((float *)a->data)[i] + bv[(i / 4) % 3], 0);
    kn_tensor_free(o);
    /* without broadcast=1 the shapes must match */
    call.n_attrs = 0;
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_ERR_SHAPE);
    kn_tensor_free(a);
    kn_tensor_free(b);
}

/* ------------------------------------------------------------------ integer semantics */

KN_TEST(ew_integer_div_mod_wrap) {
    int64_t d[1] = {6};
    int32_t xa[6] = {7, -7, 7, -7, INT32_MIN, 5}, ya[6] = {2, 2, -2, -2, -1, 0};
    kn_tensor *x = tensor_of(KILN_DTYPE_INT32, 1, d), *y = tensor_of(KILN_DTYPE_INT32, 1, d), *o;
    memcpy(x->data, xa, sizeof xa);
    memcpy(y->data, ya, sizeof ya);
    kn_tensor *in[2] = {x, y};
    ew_call call = {"Div", 14, NULL, 0, NULL};
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    /* truncation toward zero; MIN/-1 wraps; x/0 is 0 rather than a trap */
    int32_t wdiv[6] = {3, -3, -3, 3, INT32_MIN, 0};
    if (o)
        for (int i = 0; i < 6; i++) CHECK_EQ_INT(((int32_t *)o->data)[i], wdiv[i]);
    kn_tensor_free(o);
    call.op = "Mod";
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    /* fmod=0: the sign of the divisor */
    int32_t wmod[6] = {1, 1, -1, -1, 0, 0};
    if (o)
        for (int i = 0; i < 6; i++) CHECK_EQ_INT(((int32_t *)o->data)[i], wmod[i]);
    kn_tensor_free(o);
    kn_attr fm;
    memset(&fm, 0, sizeof fm);
    fm.name = "fmod", fm.type = KN_ATTR_INT, fm.i = 1;
    call.attrs = &fm, call.n_attrs = 1;
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    int32_t wfmod[6] = {1, -1, 1, -1, 0, 0};
    if (o)
        for (int i = 0; i < 6; i++) CHECK_EQ_INT(((int32_t *)o->data)[i], wfmod[i]);
    kn_tensor_free(o);
    /* int8 addition wraps */
    kn_tensor *p = tensor_of(KILN_DTYPE_INT8, 1, d), *q = tensor_of(KILN_DTYPE_INT8, 1, d);
    for (int i = 0; i < 6; i++) ((int8_t *)p->data)[i] = 120, ((int8_t *)q->data)[i] = (int8_t)(i * 3);
    kn_tensor *in8[2] = {p, q};
    ew_call add = {"Add", 14, NULL, 0, NULL};
    CHECK_STATUS(run_op(&add, in8, 2, &o), KILN_OK);
    if (o)
        for (int i = 0; i < 6; i++) CHECK_EQ_INT(((int8_t *)o->data)[i], (int8_t)(uint8_t)(120 + i * 3));
    kn_tensor_free(o);
    kn_tensor_free(p);
    kn_tensor_free(q);
    kn_tensor_free(x);
    kn_tensor_free(y);
}

KN_TEST(ew_mixed_type_pow) {
    int64_t d[1] = {4};
    kn_tensor *x = tensor_of(KILN_DTYPE_INT64, 1, d), *e = tensor_of(KILN_DTYPE_FLOAT, 1, d), *o;
    int64_t xv[4] = {2, 3, -2, 10};
    float ev[4] = {3.0f, 0.5f, 2.0f, -1.0f};
    memcpy(x->data, xv, sizeof xv);
    memcpy(e->data, ev, sizeof ev);
    kn_tensor *in[2] = {x, e};
    ew_call call = {"Pow", 15, NULL, 0, NULL};
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    CHECK(o && o->dtype == KILN_DTYPE_INT64);
    if (o)
        for (int i = 0; i < 4; i++) CHECK_EQ_INT(((int64_t *)o->data)[i], (int64_t)pow((double)xv[i], (double)ev[i]));
    kn_tensor_free(o);
    kn_tensor_free(x);
    kn_tensor_free(e);
}

/* float base by float exponent tensors (the powf path): same shapes and a broadcast exponent row,
 * against double pow rounded to float, within one ulp; NaN for a negative base with a fractional
 * exponent, the special cases of pow */
KN_TEST(ew_pow_float_tensors) {
    enum { R = 3, C = 37 };
    int64_t d2[2] = {R, C}, d1[1] = {C};
    kn_tensor *x = tensor_of(KILN_DTYPE_FLOAT, 2, d2), *e2 = tensor_of(KILN_DTYPE_FLOAT, 2, d2),
              *e1 = tensor_of(KILN_DTYPE_FLOAT, 1, d1), *o = NULL;
    float *xv = x->data, *ev2 = e2->data, *ev1 = e1->data;
    for (int i = 0; i < R * C; i++) {
        xv[i] = (float)(((i * 7919) % 613) - 300) * 0.017f;
        ev2[i] = (float)(((i * 104729) % 401) - 200) * 0.019f;
    }
    for (int i = 0; i < C; i++) ev1[i] = (float)(i % 9) - 3.5f + (i % 2 ? 0.5f : 0.0f);
    xv[0] = 0.0f, ev2[0] = -1.0f;      /* inf */
    xv[1] = -2.0f, ev2[1] = 3.0f;      /* -8 */
    xv[2] = -2.0f, ev2[2] = 0.5f;      /* NaN */
    xv[3] = 1.0f, ev2[3] = NAN;        /* 1 */
    xv[4] = NAN, ev2[4] = 0.0f;        /* 1 */
    xv[5] = INFINITY, ev2[5] = -2.0f;  /* 0 */
    for (int bc = 0; bc < 2; bc++) {
        kn_tensor *in[2] = {x, bc ? e1 : e2};
        ew_call call = {"Pow", 15, NULL, 0, NULL};
        CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
        if (o)
            for (int i = 0; i < R * C; i++) {
                const float ei = bc ? ev1[i % C] : ev2[i];
                const float want = (float)pow((double)xv[i], (double)ei), got = ((float *)o->data)[i];
                if (isnan(want)) {
                    CHECK_MSG(isnan(got), "pow(%g, %g) = %g, want NaN", xv[i], ei, got);
                    continue;
                }
                const double ulp = isinf(want) ? 0 : (double)nextafterf(fabsf(want), INFINITY) - fabsf(want);
                CHECK_MSG(got == want || fabs((double)got - want) <= ulp, "pow(%.9g, %.9g) = %.9g, want %.9g", xv[i], ei,
                          got, want);
            }
        kn_tensor_free(o);
        o = NULL;
    }
    kn_tensor_free(x);
    kn_tensor_free(e1);
    kn_tensor_free(e2);
}

/* ------------------------------------------------------------------ conversions */

KN_TEST(ew_half_arithmetic) {
    int64_t d[1] = {5};
    kn_tensor *a = tensor_of(KILN_DTYPE_FLOAT16, 1, d), *b = tensor_of(KILN_DTYPE_FLOAT16, 1, d), *o;
    float av[5] = {1.5f, -2.25f, 1000.0f, 0.1f, 65504.0f}, bv[5] = {0.25f, 4.0f, -0.5f, 0.2f, 65504.0f};
    for (int i = 0; i < 5; i++) {
        ((uint16_t *)a->data)[i] = kn_f32_to_f16(av[i]);
        ((uint16_t *)b->data)[i] = kn_f32_to_f16(bv[i]);
    }
    kn_tensor *in[2] = {a, b};
    ew_call call = {"Add", 14, NULL, 0, NULL};
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    if (o)
        for (int i = 0; i < 5; i++) {
            float want = kn_f16_to_f32(((uint16_t *)a->data)[i]) + kn_f16_to_f32(((uint16_t *)b->data)[i]);
            CHECK_EQ_INT(((uint16_t *)o->data)[i], kn_f32_to_f16(want)); /* 65504+65504 -> inf */
        }
    kn_tensor_free(o);
    call.op = "Less";
    CHECK_STATUS(run_op(&call, in, 2, &o), KILN_OK);
    CHECK(o && o->dtype == KILN_DTYPE_BOOL);
    if (o)
        for (int i = 0; i < 5; i++) CHECK_EQ_INT(((uint8_t *)o->data)[i], av[i] < bv[i]);
    kn_tensor_free(o);
    kn_tensor_free(a);
    kn_tensor_free(b);
}

KN_TEST(ew_cast_semantics) {
    int64_t d[1] = {6};
    float xv[6] = {2.7f, -2.7f, 300.0f, 0.0f, -0.0f, NAN};
    kn_tensor *x = tensor_f32(1, d, xv), *o;
    kn_attr to;
    memset(&to, 0, sizeof to);
    to.name = "to", to.type = KN_ATTR_INT, to.i = KILN_DTYPE_INT8;
    ew_call call = {"Cast", 21, &to, 1, NULL};
    kn_tensor *in[1] = {x};
    CHECK_STATUS(run_op(&call, in, 1, &o), KILN_OK);
    if (o) {
        int8_t *r = o->data;
        CHECK_EQ_INT(r[0], 2);
        CHECK_EQ_INT(r[1], -2);
        CHECK_EQ_INT(r[2], (int8_t)(uint8_t)300); /* wraps like numpy's astype */
    }
    kn_tensor_free(o);
    to.i = KILN_DTYPE_BOOL;
    CHECK_STATUS(run_op(&call, in, 1, &o), KILN_OK);
    uint8_t wb[6] = {1, 1, 1, 0, 0, 1};
    if (o)
        for (int i = 0; i < 6; i++) CHECK_EQ_INT(((uint8_t *)o->data)[i], wb[i]);
    kn_tensor_free(o);
    /* float8 e4m3fn: 1.0 = 0x38, 448 = 0x7e; 464 ties to even (448); 1e9 saturates to 448, or is
     * NaN (0x7f) with saturate=0; 2^-10 ties to even between 0 and the smallest subnormal */
    float fv[6] = {1.0f, 448.0f, 464.0f, 1e9f, -0.0f, 0.001953125f /* 2^-9: the smallest subnormal */};
    kn_tensor *f = tensor_f32(1, d, fv);
    kn_tensor *fin[1] = {f};
    kn_attr a2[2];
    memset(a2, 0, sizeof a2);
    a2[0].name = "to", a2[0].type = KN_ATTR_INT, a2[0].i = KILN_DTYPE_FLOAT8E4M3FN;
    a2[1].name = "saturate", a2[1].type = KN_ATTR_INT, a2[1].i = 1;
    ew_call c8 = {"Cast", 21, a2, 2, NULL};
    CHECK_STATUS(run_op(&c8, fin, 1, &o), KILN_OK);
    uint8_t w8[6] = {0x38, 0x7e, 0x7e, 0x7e, 0x80, 0x01};
    if (o)
        for (int i = 0; i < 6; i++) CHECK_EQ_INT(((uint8_t *)o->data)[i], w8[i]);
    /* and back */
    if (o) {
        kn_tensor *back, *bin[1] = {o};
        kn_attr tf;
        memset(&tf, 0, sizeof tf);
        tf.name = "to", tf.type = KN_ATTR_INT, tf.i = KILN_DTYPE_FLOAT;
        ew_call cb = {"Cast", 21, &tf, 1, NULL};
        CHECK_STATUS(run_op(&cb, bin, 1, &back), KILN_OK);
        float wf[6] = {1.0f, 448.0f, 448.0f, 448.0f, -0.0f, 0.001953125f};
        if (back)
            for (int i = 0; i < 6; i++) CHECK_NEAR(((float *)back->data)[i], wf[i], 0);
        kn_tensor_free(back);
    }
    kn_tensor_free(o);
    a2[1].i = 0;
    CHECK_STATUS(run_op(&c8, fin, 1, &o), KILN_OK);
    if (o) CHECK_EQ_INT(((uint8_t *)o->data)[3], 0x7f);
    kn_tensor_free(o);
    kn_tensor_free(f);
    kn_tensor_free(x);
}

/* ------------------------------------------------------------------ float math accuracy */

static double ref_gelu(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double ref_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static double ref_mish(double x) { return x * tanh(ref_softplus(x)); }
static double ref_elu(double x) { return x < 0 ? expm1(x) : x; }

/* Relative error against double libm, with an absolute floor for results near 0. */
static void check_unary_accuracy(const char *op, double (*ref)(double), double lo, double hi, double rel,
                                 double abs_floor) {
    const int64_t n = 200001;
    int64_t d[1] = {n};
    kn_tensor *x = tensor_f32(1, d, NULL), *o;
    float *xv = x->data;
    for (int64_t i = 0; i < n; i++) xv[i] = (float)(lo + (hi - lo) * (double)i / (double)(n - 1));
    kn_threadpool *pool = NULL;
    kn_threadpool_create(2, &pool);
    kn_tensor *in[1] = {x};
    ew_call call = {op, 20, NULL, 0, pool};
    CHECK_STATUS(run_op(&call, in, 1, &o), KILN_OK);
    double worst = 0;
    float worst_x = 0;
    if (o)
        for (int64_t i = 0; i < n; i++) {
            double want = ref((double)xv[i]), got = ((float *)o->data)[i];
            double err = fabs(got - want) / fmax(fabs(want), abs_floor);
            if (err > worst) worst = err, worst_x = xv[i];
        }
    CHECK_MSG(worst <= rel, "%s: relative error %g at x=%g exceeds %g", op, worst, worst_x, rel);
    kn_tensor_free(o);
    kn_tensor_free(x);
    kn_threadpool_destroy(pool);
}

/* Sin / Cos at the ends of the vector forms' range and beyond (libm's there), the special values,
 * and in a tail shorter than a vector: 19 values, in place of none of them */
KN_TEST(ew_sin_cos_extremes) {
    const float v[19] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 8192.0f, -8192.0f, 8192.5f, 1e10f, -3e38f,
                         1e-30f, 3.14159265f, -1.5707964f, 100.0f, 7.0f, 0.785398185f, -2.35619450f, 5000.5f, 1e-3f};
    int64_t d[1] = {19};
    for (int c = 0; c < 2; c++) {
        kn_tensor *x = tensor_f32(1, d, v), *o = NULL;
        kn_tensor *in[1] = {x};
        ew_call call = {c ? "Cos" : "Sin", 7, NULL, 0, NULL};
        CHECK_STATUS(run_op(&call, in, 1, &o), KILN_OK);
        if (o) {
            const float *y = o->data;
            for (int i = 0; i < 19; i++) {
                const double want = c ? cos((double)v[i]) : sin((double)v[i]);
                if (isnan(want)) {
                    CHECK_MSG(isnan(y[i]), "%s(%g) = %g, want NaN", call.op, v[i], y[i]);
                    continue;
                }
                CHECK_MSG(fabs(y[i] - want) <= 1.2e-7 * fmax(fabs(want), 1.0),
                          "%s(%.9g) = %.9g, want %.9g", call.op, v[i], y[i], want);
            }
            CHECK_MSG(c || (y[0] == 0.0f && !signbit(y[0]) && y[1] == 0.0f && signbit(y[1])), "sin(+-0) = %g, %g", y[0], y[1]);
            CHECK_MSG(!c || (y[0] == 1.0f && y[1] == 1.0f), "cos(+-0) = %g, %g", y[0], y[1]);
            CHECK_MSG(c || y[10] == 1e-30f, "sin(1e-30) = %g", y[10]);
        }
        kn_tensor_free(o);
        kn_tensor_free(x);
    }
}

KN_TEST(ew_float_math_accuracy) {
    check_unary_accuracy("Exp", exp, -87.0, 88.0, 1e-6, 1e-30);
    check_unary_accuracy("Log", log, 1e-6, 1e6, 1e-6, 1e-30);
    check_unary_accuracy("Tanh", tanh, -12.0, 12.0, 1e-6, 1e-30);
    check_unary_accuracy("Sigmoid", ref_sigmoid, -80.0, 30.0, 1e-6, 1e-30);
    check_unary_accuracy("Erf", erf, -6.0, 6.0, 1e-6, 1e-30);
    check_unary_accuracy("Gelu", ref_gelu, -9.0, 9.0, 2e-6, 1e-20);
    check_unary_accuracy("Softplus", ref_softplus, -60.0, 60.0, 1e-6, 1e-30);
    check_unary_accuracy("Mish", ref_mish, -30.0, 30.0, 1e-6, 1e-30);
    check_unary_accuracy("Elu", ref_elu, -20.0, 5.0, 1e-6, 1e-30);
    /* Sin / Cos: relative away from their zeros, absolute (1e-7 of 1) near them; to 8192 the vector
     * forms (AVX2), beyond it libm's */
    check_unary_accuracy("Sin", sin, -100.0, 100.0, 1.2e-6, 0.1);
    check_unary_accuracy("Cos", cos, -100.0, 100.0, 1.2e-6, 0.1);
    check_unary_accuracy("Sin", sin, -9000.0, 9000.0, 2e-6, 0.1);
    check_unary_accuracy("Cos", cos, -9000.0, 9000.0, 2e-6, 0.1);
}

/* ------------------------------------------------------------------ shape values */

/* Shape arithmetic keeps what it can: [batch, 12] * [1, 64] = [batch, 768]; unknown * 2 is unknown */
KN_TEST(ew_shape_value_arithmetic) {
    kn_node node;
    ew_call call = {"Mul", 14, NULL, 0, NULL};
    node_init(&node, &call);
    const kn_op_schema *s = kn_op_find("", "Mul", 14, NULL);
    CHECK(s != NULL);
    if (!s) return;
    kn_type a, b, o;
    int64_t two = 2;
    kn_type_set_tensor(&a, KILN_DTYPE_INT64, 1, &two);
    a.n_shape_value = 2;
    a.shape_value[0] = (kn_dim){-1, "batch"};
    a.shape_value[1] = (kn_dim){12, NULL};
    int64_t dv[2] = {1, 64};
    kn_tensor *bv = tensor_of(KILN_DTYPE_INT64, 1, &two);
    memcpy(bv->data, dv, sizeof dv);
    kn_type_of_tensor(bv, &b);
    kn_type_init(&o);
    const kn_type *tp[2] = {&a, &b};
    const kn_tensor *vals[2] = {NULL, bv};
    kn_infer_ctx ic = {&node, 2, tp, vals, 1, &o, NULL};
    CHECK_STATUS(s->infer(&ic), KILN_OK);
    CHECK_EQ_INT(o.n_shape_value, 2);
    if (o.n_shape_value == 2) {
        CHECK(o.shape_value[0].symbol && !strcmp(o.shape_value[0].symbol, "batch"));
        CHECK_EQ_INT(o.shape_value[1].value, 768);
    }
    /* a symbol times 2 is no longer that symbol */
    dv[0] = 2;
    memcpy(bv->data, dv, sizeof dv);
    kn_type_init(&o);
    CHECK_STATUS(s->infer(&ic), KILN_OK);
    if (o.n_shape_value == 2) {
        CHECK_EQ_INT(o.shape_value[0].value, -1);
        CHECK(o.shape_value[0].symbol == NULL);
    }
    kn_tensor_free(bv);
}

/* torch's exports write a target shape as Where(Equal(shape, -1), ones, shape): Equal of
 * [batch, 1, seq, 64] and -1 is known false everywhere (a dim is never negative), so Where gives
 * back [batch, 1, seq, 64] with its symbols; an element Equal cannot decide stays unknown. */
KN_TEST(ew_shape_value_equal_where) {
    kn_node en, wn;
    ew_call ecall = {"Equal", 13, NULL, 0, NULL}, wcall = {"Where", 16, NULL, 0, NULL};
    node_init(&en, &ecall);
    node_init(&wn, &wcall);
    const kn_op_schema *es = kn_op_find("", "Equal", 13, NULL), *ws = kn_op_find("", "Where", 16, NULL);
    CHECK(es && ws);
    if (!es || !ws) return;
    int64_t four = 4;
    kn_type shape, neg, eq, ones, out;
    kn_type_set_tensor(&shape, KILN_DTYPE_INT64, 1, &four);
    shape.n_shape_value = 4;
    shape.shape_value[0] = (kn_dim){-1, "batch"};
    shape.shape_value[1] = (kn_dim){1, NULL};
    shape.shape_value[2] = (kn_dim){-1, "seq"};
    shape.shape_value[3] = (kn_dim){-1, NULL}; /* unknown: may be -1 */
    kn_tensor *nv = tensor_of(KILN_DTYPE_INT64, 1, &four), *ov = tensor_of(KILN_DTYPE_INT64, 1, &four);
    for (int k = 0; k < 4; k++) ((int64_t *)nv->data)[k] = -1, ((int64_t *)ov->data)[k] = 1;
    kn_type_of_tensor(nv, &neg);
    kn_type_of_tensor(ov, &ones);
    kn_type_init(&eq);
    const kn_type *etp[2] = {&shape, &neg};
    const kn_tensor *evals[2] = {NULL, nv};
    kn_infer_ctx eic = {&en, 2, etp, evals, 1, &eq, NULL};
    CHECK_STATUS(es->infer(&eic), KILN_OK);
    CHECK_EQ_INT(eq.n_shape_value, 4);
    if (eq.n_shape_value == 4) {
        CHECK_EQ_INT(eq.shape_value[0].value, 0);
        CHECK_EQ_INT(eq.shape_value[1].value, 0);
        CHECK_EQ_INT(eq.shape_value[2].value, 0);
        CHECK_EQ_INT(eq.shape_value[3].value, -1);
    }
    kn_type_init(&out);
    const kn_type *wtp[3] = {&eq, &ones, &shape};
    const kn_tensor *wvals[3] = {NULL, ov, NULL};
    kn_infer_ctx wic = {&wn, 3, wtp, wvals, 1, &out, NULL};
    CHECK_STATUS(ws->infer(&wic), KILN_OK);
    CHECK_EQ_INT(out.n_shape_value, 4);
    if (out.n_shape_value == 4) {
        CHECK(out.shape_value[0].symbol && !strcmp(out.shape_value[0].symbol, "batch"));
        CHECK_EQ_INT(out.shape_value[1].value, 1);
        CHECK(out.shape_value[2].symbol && !strcmp(out.shape_value[2].symbol, "seq"));
        CHECK_EQ_INT(out.shape_value[3].value, -1);
        CHECK(out.shape_value[3].symbol == NULL);
    }
    kn_tensor_free(nv);
    kn_tensor_free(ov);
}

/* Where's output type is X's even when the condition comes first */
KN_TEST(ew_where_infer_type) {
    kn_node node;
    ew_call call = {"Where", 16, NULL, 0, NULL};
    node_init(&node, &call);
    const kn_op_schema *s = kn_op_find("", "Where", 16, NULL);
    kn_type c, x, y, o;
    int64_t d[2] = {4, 1}, e[1] = {5};
    kn_type_set_tensor(&c, KILN_DTYPE_BOOL, 2, d);
    kn_type_set_tensor(&x, KILN_DTYPE_INT64, 1, e);
    kn_type_set_tensor(&y, KILN_DTYPE_INT64, 0, NULL);
    kn_type_init(&o);
    const kn_type *tp[3] = {&c, &x, &y};
    const kn_tensor *vals[3] = {NULL, NULL, NULL};
    kn_infer_ctx ic = {&node, 3, tp, vals, 1, &o, NULL};
    CHECK_STATUS(s->infer(&ic), KILN_OK);
    CHECK_EQ_INT(o.dtype, KILN_DTYPE_INT64);
    CHECK_EQ_INT(o.rank, 2);
    CHECK_EQ_INT(o.dims[0].value, 4);
    CHECK_EQ_INT(o.dims[1].value, 5);
    /* X and Y of different types are an error naming both */
    kn_type_set_tensor(&y, KILN_DTYPE_FLOAT, 0, NULL);
    kn_type_init(&o);
    CHECK_STATUS(s->infer(&ic), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("int64");
    CHECK_ERROR_HAS("float");
}
