/* CPU kernels of the ml family (domain ai.onnx.ml): LabelEncoder, TreeEnsemble, Binarizer,
 * ArrayFeatureExtractor. */
#include "backend/cpu/cpu.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ML "ai.onnx.ml"

static kiln_status put_str(kn_tensor *t, int64_t i, const char *s) {
    char *c = strdup(s ? s : "");
    if (!c) return KN_OOM();
    char **d = t->data;
    free(d[i]);
    d[i] = c;
    return KILN_OK;
}

/* ------------------------------------------------------------------ LabelEncoder */

enum { K_INT, K_FLT, K_STR };

/* A list attribute or tensor attribute as one of the three kinds. */
typedef struct le_list {
    int kind;
    int64_t n;
    const int64_t *i;
    const float *f;
    const char *const *s;
    const kn_tensor *t; /* for *_tensor: read through it */
} le_list;

static bool le_list_get(const kn_node *node, const char *kind, le_list *l) {
    char name[32];
    int n;
    memset(l, 0, sizeof *l);
    snprintf(name, sizeof name, "%s_int64s", kind);
    if ((l->i = kn_attr_ints(node, name, &n)) || kn_node_attr(node, name)) {
        l->kind = K_INT, l->n = n;
        return true;
    }
    snprintf(name, sizeof name, "%s_floats", kind);
    if ((l->f = kn_attr_floats(node, name, &n)) || kn_node_attr(node, name)) {
        l->kind = K_FLT, l->n = n;
        return true;
    }
    snprintf(name, sizeof name, "%s_strings", kind);
    const kn_attr *a = kn_node_attr(node, name);
    if (a && a->type == KN_ATTR_STRINGS) {
        l->kind = K_STR, l->n = a->n, l->s = a->strings;
        return true;
    }
    snprintf(name, sizeof name, "%s_tensor", kind);
    a = kn_node_attr(node, name);
    if (a && a->type == KN_ATTR_TENSOR && a->t) {
        l->t = a->t;
        l->n = kn_tensor_count(a->t);
        l->kind = a->t->dtype == KILN_DTYPE_STRING ? K_STR : kn_dtype_is_float(a->t->dtype) ? K_FLT : K_INT;
        if (l->kind == K_STR) l->s = (const char *const *)a->t->data;
        return true;
    }
    return false;
}

static int64_t le_int(const le_list *l, int64_t i) { return l->t ? kn_tensor_get_i64(l->t, i) : l->i[i]; }
static double le_flt(const le_list *l, int64_t i) { return l->t ? kn_tensor_get_f64(l->t, i) : l->f[i]; }

/* keys sorted by value (ties by position, so the last duplicate wins as in a dict); qsort's
 * comparator reads the keys through this */
static _Thread_local const le_list *le_keys;

static int le_cmp_key(const le_list *k, int64_t a, int64_t b) {
    switch (k->kind) {
    case K_INT: {
        int64_t x = le_int(k, a), y = le_int(k, b);
        return x < y ? -1 : x > y;
    }
    case K_FLT: {
        double x = le_flt(k, a), y = le_flt(k, b);
        if (isnan(x) || isnan(y)) return isnan(x) - isnan(y); /* NaN last; NaN keys equal */
        return x < y ? -1 : x > y;
    }
    default: return strcmp(k->s[a] ? k->s[a] : "", k->s[b] ? k->s[b] : "");
    }
}

static int le_qsort_cmp(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    int c = le_cmp_key(le_keys, a, b);
    return c ? c : (a < b ? -1 : a > b);
}

/* Compares key i with the input element (int64, double or string). */
static int le_cmp_in(const le_list *k, int64_t i, int64_t xi, double xf, const char *xs) {
    switch (k->kind) {
    case K_INT: {
        int64_t v = le_int(k, i);
        return v < xi ? -1 : v > xi;
    }
    case K_FLT: {
        double v = le_flt(k, i);
        if (isnan(v) || isnan(xf)) return isnan(v) - isnan(xf);
        return v < xf ? -1 : v > xf;
    }
    default: return strcmp(k->s[i] ? k->s[i] : "", xs);
    }
}

/* TreeEnsemble's attributes (the node's arrays and tensors) */
typedef struct te_attrs {
    int n_feat, n_tid, n_fid, n_tl, n_fl, n_miss, n_ltid, n_roots;
    const int64_t *feat, *tid, *fid, *tleaf, *fleaf, *miss, *leaf_tid, *roots;
    const kn_tensor *splits, *weights, *modes, *mv;
    int64_t n_targets;
    int agg, post;
} te_attrs;

/* The family's attributes, read once (their prepare hook); pointers are the node's */
typedef struct ml_prm {
    /* LabelEncoder: keys and values (keys_ok/vals_ok false: missing, the call says so), the
     * default tensor, the defaults; opset 1's classes_strings */
    bool keys_ok, vals_ok;
    le_list keys, vals, dl;
    int64_t d_i;
    float d_f;
    const char *d_s;
    const kn_attr *classes;
    double threshold; /* Binarizer */
    te_attrs te;
} ml_prm;

static void te_attrs_read(const kn_node *nd, te_attrs *t);

static kiln_status ml_prepare(const kn_node *n, void *params) {
    ml_prm *p = params;
    memset(p, 0, sizeof *p);
    if (!strcmp(n->op_type, "LabelEncoder")) {
        p->keys_ok = le_list_get(n, "keys", &p->keys);
        p->vals_ok = le_list_get(n, "values", &p->vals);
        const kn_attr *dt = kn_node_attr(n, "default_tensor");
        if (dt && dt->type == KN_ATTR_TENSOR && dt->t && kn_tensor_count(dt->t) >= 1) {
            p->dl.t = dt->t;
            p->dl.kind = p->vals.kind;
            p->dl.n = 1;
            if (p->dl.kind == K_STR) p->dl.s = (const char *const *)dt->t->data;
        }
        p->d_i = kn_attr_int(n, "default_int64", -1);
        p->d_f = kn_attr_float(n, "default_float", -0.0f);
        p->d_s = kn_attr_string(n, "default_string", "_Unused");
        p->classes = kn_node_attr(n, "classes_strings");
    }
    p->threshold = kn_attr_float(n, "threshold", 0.0f);
    if (!strcmp(n->op_type, "TreeEnsemble")) te_attrs_read(n, &p->te);
    return KILN_OK;
}

static kiln_status run_label_encoder_v1(kn_kernel_ctx *c, const ml_prm *prm) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    const kn_attr *cl = prm->classes;
    int nc = cl && cl->type == KN_ATTR_STRINGS ? cl->n : 0;
    int64_t n = kn_tensor_count(x);
    if (x->dtype == KILN_DTYPE_INT64) {
        const char *dflt = prm->d_s;
        for (int64_t i = 0; i < n; i++) {
            int64_t v = ((const int64_t *)x->data)[i];
            KN_TRY(put_str(y, i, v >= 0 && v < nc ? cl->strings[v] : dflt));
        }
    } else {
        int64_t dflt = prm->d_i;
        for (int64_t i = 0; i < n; i++) {
            const char *s = ((char *const *)x->data)[i];
            int64_t v = dflt;
            for (int k = 0; k < nc; k++)
                if (!strcmp(cl->strings[k], s ? s : "")) {
                    v = k;
                    break;
                }
            ((int64_t *)y->data)[i] = v;
        }
    }
    return KILN_OK;
}

static kiln_status run_label_encoder(kn_kernel_ctx *c) {
    KN_CTX_PRM(c, ml_prepare, ml_prm, prm);
    if (c->node->opset < 2) return run_label_encoder_v1(c, prm);
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    if (!prm->keys_ok || !prm->vals_ok)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "LabelEncoder needs one keys_* and one values_* attribute");
    const le_list keys = prm->keys, vals = prm->vals;
    if (keys.n != vals.n)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "%lld keys but %lld values", (long long)keys.n, (long long)vals.n);
    /* the default value */
    const le_list dl = prm->dl;
    int64_t d_i = prm->d_i;
    float d_f = prm->d_f;
    const char *d_s = prm->d_s;
    int64_t *order = malloc(sizeof *order * (size_t)(keys.n > 0 ? keys.n : 1));
    if (!order) return KN_OOM();
    for (int64_t i = 0; i < keys.n; i++) order[i] = i;
    le_keys = &keys;
    qsort(order, (size_t)keys.n, sizeof *order, le_qsort_cmp);
    int64_t n = kn_tensor_count(x);
    kiln_status st = KILN_OK;
    for (int64_t i = 0; i < n && st == KILN_OK; i++) {
        int64_t xi = 0;
        double xf = 0;
        const char *xs = "";
        if (x->dtype == KILN_DTYPE_STRING) xs = ((char *const *)x->data)[i] ? ((char *const *)x->data)[i] : "";
        else if (keys.kind == K_FLT) xf = kn_tensor_get_f64(x, i);
        else xi = kn_tensor_get_i64(x, i);
        /* the last key equal to x */
        int64_t lo = 0, hi = keys.n, hit = -1;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            int cmp = le_cmp_in(&keys, order[mid], xi, xf, xs);
            if (cmp <= 0) {
                if (cmp == 0) hit = order[mid];
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        const le_list *src = hit >= 0 ? &vals : dl.t ? &dl : NULL;
        int64_t at = hit >= 0 ? hit : 0;
        switch (vals.kind) {
        case K_STR: st = put_str(y, i, src ? src->s[at] : d_s); break;
        case K_INT: kn_tensor_set_i64(y, i, src ? le_int(src, at) : d_i); break;
        default: kn_tensor_set_f64(y, i, src ? le_flt(src, at) : d_f); break;
        }
    }
    free(order);
    return st;
}

/* ------------------------------------------------------------------ Binarizer */

static kiln_status run_binarizer(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    KN_CTX_PRM(c, ml_prepare, ml_prm, prm);
    double th = prm->threshold;
    int64_t n = kn_tensor_count(x);
    switch (x->dtype) {
    case KILN_DTYPE_FLOAT: {
        const float *a = x->data;
        float *o = y->data, t = (float)th;
        for (int64_t i = 0; i < n; i++) o[i] = a[i] > t ? 1.0f : 0.0f;
        break;
    }
    default:
        for (int64_t i = 0; i < n; i++) kn_tensor_set_f64(y, i, kn_tensor_get_f64(x, i) > th ? 1.0 : 0.0);
        break;
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ ArrayFeatureExtractor */

static kiln_status run_array_feature_extractor(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0], *idx = c->in[1];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    int64_t F = x->dims[x->rank - 1], rows = F ? kn_tensor_count(x) / F : 0, n = kn_tensor_count(idx);
    const int64_t *ix = idx->data;
    for (int64_t j = 0; j < n; j++)
        if (ix[j] < 0 || ix[j] >= F)
            return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "index %lld is outside the %lld features", (long long)ix[j],
                                   (long long)F);
    if (x->dtype == KILN_DTYPE_STRING) {
        char *const *s = x->data;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < n; j++) KN_TRY(put_str(y, r * n + j, s[r * F + ix[j]]));
        return KILN_OK;
    }
    size_t es = kiln_dtype_size(x->dtype);
    if (!es) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "element type %s is not supported", kiln_dtype_name(x->dtype));
    const char *src = x->data;
    char *dst = y->data;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) memcpy(dst + (size_t)(r * n + j) * es, src + (size_t)(r * F + ix[j]) * es, es);
    return KILN_OK;
}

/* ------------------------------------------------------------------ TreeEnsemble */

enum { M_LEQ, M_LT, M_GTE, M_GT, M_EQ, M_NEQ, M_MEMBER };
enum { AGG_AVERAGE, AGG_SUM, AGG_MIN, AGG_MAX };
enum { PT_NONE, PT_SOFTMAX, PT_LOGISTIC, PT_SOFTMAX_ZERO, PT_PROBIT };

/* Inverse error function (Giles' approximation, refined by two Newton steps). */
static double erfinv(double x) {
    if (x <= -1.0) return -INFINITY;
    if (x >= 1.0) return INFINITY;
    double w = -log((1.0 - x) * (1.0 + x)), p;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w;
        p = -3.5233877e-06 + p * w;
        p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;
        p = -0.00125372503 + p * w;
        p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;
        p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w;
        p = 0.00134934322 + p * w;
        p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;
        p = -0.0076224613 + p * w;
        p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;
        p = 2.83297682 + p * w;
    }
    double y = p * x;
    for (int i = 0; i < 2; i++) y -= (erf(y) - x) / (2.0 / sqrt(M_PI) * exp(-y * y));
    return y;
}

typedef struct te {
    int n_nodes, n_leaves;
    int64_t *set_off, *set_len; /* per node: its members in `members` */
    double *members;
} te;

static void te_attrs_read(const kn_node *nd, te_attrs *t) {
    memset(t, 0, sizeof *t);
    t->feat = kn_attr_ints(nd, "nodes_featureids", &t->n_feat);
    t->tid = kn_attr_ints(nd, "nodes_truenodeids", &t->n_tid);
    t->fid = kn_attr_ints(nd, "nodes_falsenodeids", &t->n_fid);
    t->tleaf = kn_attr_ints(nd, "nodes_trueleafs", &t->n_tl);
    t->fleaf = kn_attr_ints(nd, "nodes_falseleafs", &t->n_fl);
    t->miss = kn_attr_ints(nd, "nodes_missing_value_tracks_true", &t->n_miss);
    t->leaf_tid = kn_attr_ints(nd, "leaf_targetids", &t->n_ltid);
    t->roots = kn_attr_ints(nd, "tree_roots", &t->n_roots);
    const kn_attr *a;
    t->splits = (a = kn_node_attr(nd, "nodes_splits")) && a->type == KN_ATTR_TENSOR ? a->t : NULL;
    t->weights = (a = kn_node_attr(nd, "leaf_weights")) && a->type == KN_ATTR_TENSOR ? a->t : NULL;
    t->modes = (a = kn_node_attr(nd, "nodes_modes")) && a->type == KN_ATTR_TENSOR ? a->t : NULL;
    t->mv = (a = kn_node_attr(nd, "membership_values")) && a->type == KN_ATTR_TENSOR ? a->t : NULL;
    t->n_targets = kn_attr_int(nd, "n_targets", 0);
    t->agg = (int)kn_attr_int(nd, "aggregate_function", AGG_SUM);
    t->post = (int)kn_attr_int(nd, "post_transform", PT_NONE);
}

static kiln_status run_tree_ensemble(kn_kernel_ctx *c) {
    const kn_tensor *X = c->in[0];
    kn_tensor *Y = c->out[0];
    if (!Y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    KN_CTX_PRM(c, ml_prepare, ml_prm, prm);
    const te_attrs *ta = &prm->te;
    int n_feat = ta->n_feat, n_tid = ta->n_tid, n_fid = ta->n_fid, n_tl = ta->n_tl, n_fl = ta->n_fl, n_ltid = ta->n_ltid,
        n_roots = ta->n_roots;
    te t = {0};
    const int64_t *roots = ta->roots;
    const kn_tensor *mv = ta->mv;
    int64_t n_targets = ta->n_targets;
    int agg = ta->agg;
    int post = ta->post;
    t.n_nodes = n_feat;
    if (!ta->splits || !ta->weights || !ta->modes)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "nodes_splits, nodes_modes and leaf_weights are required tensors");
    if (n_tid != n_feat || n_fid != n_feat || n_tl != n_feat || n_fl != n_feat || kn_tensor_count(ta->splits) != n_feat ||
        kn_tensor_count(ta->modes) != n_feat || (ta->n_miss && ta->n_miss != n_feat))
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "the nodes_* attributes must all have %d entries", n_feat);
    t.n_leaves = n_ltid;
    if (kn_tensor_count(ta->weights) != n_ltid)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "leaf_weights has %lld entries, leaf_targetids %d",
                               (long long)kn_tensor_count(ta->weights), n_ltid);
    if (agg < AGG_AVERAGE || agg > AGG_MAX) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "aggregate_function %d is unknown", agg);
    if (post < PT_NONE || post > PT_PROBIT) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "post_transform %d is unknown", post);
    int64_t F = X->dims[1], N = X->dims[0];
    for (int i = 0; i < n_feat; i++) {
        int64_t m = kn_tensor_get_i64(ta->modes, i);
        if (m < M_LEQ || m > M_MEMBER) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "nodes_modes[%d] = %lld is unknown", i, (long long)m);
        if (ta->feat[i] < 0 || ta->feat[i] >= F)
            return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "node %d reads feature %lld of %lld", i, (long long)ta->feat[i], (long long)F);
        if (ta->tid[i] < 0 || ta->tid[i] >= (ta->tleaf[i] ? n_ltid : n_feat) || ta->fid[i] < 0 || ta->fid[i] >= (ta->fleaf[i] ? n_ltid : n_feat))
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "node %d branches to a node or leaf that does not exist", i);
    }
    for (int i = 0; i < n_ltid; i++)
        if (ta->leaf_tid[i] < 0 || ta->leaf_tid[i] >= n_targets)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "leaf %d has target %lld of %lld", i, (long long)ta->leaf_tid[i], (long long)n_targets);
    for (int r = 0; r < n_roots; r++)
        if (roots[r] < 0 || roots[r] >= n_feat) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "tree root %lld does not exist", (long long)roots[r]);
    /* set-membership nodes take their members from membership_values in node order, each set
     * ended by a NaN */
    kiln_status st = KILN_OK;
    double *acc = NULL;
    t.set_off = calloc((size_t)(n_feat ? n_feat : 1), sizeof *t.set_off);
    t.set_len = calloc((size_t)(n_feat ? n_feat : 1), sizeof *t.set_len);
    int64_t n_mv = mv ? kn_tensor_count(mv) : 0;
    t.members = malloc(sizeof *t.members * (size_t)(n_mv ? n_mv : 1));
    acc = malloc(sizeof *acc * (size_t)(n_targets ? n_targets : 1));
    if (!t.set_off || !t.set_len || !t.members || !acc) {
        st = KN_OOM();
        goto done;
    }
    for (int64_t i = 0; i < n_mv; i++) t.members[i] = kn_tensor_get_f64(mv, i);
    int64_t pos = 0;
    for (int i = 0; i < n_feat; i++) {
        if (kn_tensor_get_i64(ta->modes, i) != M_MEMBER) continue;
        if (pos >= n_mv) {
            st = kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "membership_values has no set for set-membership node %d", i);
            goto done;
        }
        t.set_off[i] = pos;
        while (pos < n_mv && !isnan(t.members[pos])) pos++;
        t.set_len[i] = pos - t.set_off[i];
        pos++; /* the NaN */
    }
    double init = agg == AGG_MIN ? (X->dtype == KILN_DTYPE_DOUBLE ? DBL_MAX : X->dtype == KILN_DTYPE_FLOAT16 ? 65504.0 : FLT_MAX)
                  : agg == AGG_MAX ? -(X->dtype == KILN_DTYPE_DOUBLE ? DBL_MAX : X->dtype == KILN_DTYPE_FLOAT16 ? 65504.0 : FLT_MAX)
                                   : 0.0;
    for (int64_t r = 0; r < N; r++) {
        for (int64_t k = 0; k < n_targets; k++) acc[k] = init;
        for (int tr = 0; tr < n_roots; tr++) {
            int64_t node = roots[tr], leaf = -1;
            if (ta->tleaf[node] && ta->fleaf[node] && ta->tid[node] == ta->fid[node]) leaf = ta->tid[node]; /* a lone leaf */
            for (int steps = 0; leaf < 0; steps++) {
                if (steps > n_feat) {
                    st = kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "tree %d has a cycle", tr);
                    goto done;
                }
                double x = kn_tensor_get_f64(X, r * F + ta->feat[node]), s = kn_tensor_get_f64(ta->splits, node);
                bool cond;
                switch (kn_tensor_get_i64(ta->modes, node)) {
                case M_LEQ: cond = x <= s; break;
                case M_LT: cond = x < s; break;
                case M_GTE: cond = x >= s; break;
                case M_GT: cond = x > s; break;
                case M_EQ: cond = x == s; break;
                case M_NEQ: cond = x != s; break;
                default:
                    cond = false;
                    for (int64_t m = 0; m < t.set_len[node] && !cond; m++) cond = x == t.members[t.set_off[node] + m];
                    break;
                }
                if (!cond && ta->n_miss && ta->miss[node] && isnan(x)) cond = true;
                int64_t next = cond ? ta->tid[node] : ta->fid[node];
                if (cond ? ta->tleaf[node] : ta->fleaf[node]) leaf = next;
                else node = next;
            }
            double w = kn_tensor_get_f64(ta->weights, leaf);
            int64_t k = ta->leaf_tid[leaf];
            switch (agg) {
            case AGG_SUM: acc[k] += w; break;
            case AGG_AVERAGE: acc[k] += w / n_roots; break;
            case AGG_MIN: acc[k] = w < acc[k] ? w : acc[k]; break;
            default: acc[k] = w > acc[k] ? w : acc[k]; break;
            }
        }
        if (post == PT_SOFTMAX || post == PT_SOFTMAX_ZERO) {
            double mx = -INFINITY, sum = 0;
            for (int64_t k = 0; k < n_targets; k++)
                if (post == PT_SOFTMAX || acc[k] != 0) mx = acc[k] > mx ? acc[k] : mx;
            for (int64_t k = 0; k < n_targets; k++) {
                if (post == PT_SOFTMAX_ZERO && acc[k] == 0) continue;
                acc[k] = exp(acc[k] - mx);
                sum += acc[k];
            }
            for (int64_t k = 0; k < n_targets; k++)
                if (post == PT_SOFTMAX || acc[k] != 0) acc[k] /= sum;
        } else if (post == PT_LOGISTIC) {
            for (int64_t k = 0; k < n_targets; k++) acc[k] = 1.0 / (1.0 + exp(-acc[k]));
        } else if (post == PT_PROBIT) {
            for (int64_t k = 0; k < n_targets; k++) acc[k] = sqrt(2.0) * erfinv(2.0 * acc[k] - 1.0);
        }
        for (int64_t k = 0; k < n_targets; k++) kn_tensor_set_f64(Y, r * n_targets + k, acc[k]);
    }
done:
    free(t.set_off);
    free(t.set_len);
    free(t.members);
    free(acc);
    return st;
}

const kn_cpu_kernel kn_cpu_ml[] = {
    {ML, "LabelEncoder", run_label_encoder, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(ml_prepare, ml_prm)},
    {ML, "Binarizer", run_binarizer, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(ml_prepare, ml_prm)},
    {ML, "ArrayFeatureExtractor", run_array_feature_extractor, NULL, KN_KERNEL_OVERWRITES},
    {ML, "TreeEnsemble", run_tree_ensemble, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(ml_prepare, ml_prm)},
    {0},
};
