/* Window geometry for Conv, ConvTranspose and the pools (see linalg_util.h). */
#include "ops/linalg_util.h"

#include "exec/kernel.h"

#include <stdio.h>
#include <string.h>

const char *kn_ints_str(const int64_t *v, int n, char *buf, size_t cap) {
    size_t used = 0;
    if (cap == 0) return buf;
    buf[0] = 0;
    used += (size_t)snprintf(buf + used, cap - used, "[");
    for (int i = 0; i < n && used < cap; i++) {
        if (v[i] < 0) used += (size_t)snprintf(buf + used, cap - used, "%s?", i ? "," : "");
        else used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? "," : "", (long long)v[i]);
    }
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

/* Reads an optional ints attribute of exactly `want` entries into out (default dflt). */
static kiln_status ints_attr(const kn_node *n, const char *name, int want, int64_t dflt, int64_t *out,
                             bool *present, char *why, size_t cap) {
    int cnt = 0;
    const int64_t *v = kn_attr_ints(n, name, &cnt);
    if (present) *present = cnt > 0;
    for (int i = 0; i < want; i++) out[i] = dflt;
    if (cnt == 0) return KILN_OK;
    if (cnt != want) {
        snprintf(why, cap, "attribute '%s' has %d values but the input has %d spatial dim%s (expected %d)", name,
                 cnt, want / (strcmp(name, "pads") ? 1 : 2), want / (strcmp(name, "pads") ? 1 : 2) == 1 ? "" : "s",
                 want);
        return KILN_ERR_INVALID_MODEL;
    }
    memcpy(out, v, sizeof(int64_t) * (size_t)want);
    return KILN_OK;
}

static int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

kiln_status kn_window_plan(const kn_node *n, kn_window_kind kind, int nsp, const int64_t *in,
                           const int64_t *kernel, kn_window *w, char *why, size_t cap) {
    char b1[128], b2[128];
    memset(w, 0, sizeof *w);
    if (nsp < 1 || nsp > KN_MAX_SPATIAL) {
        snprintf(why, cap, "%d spatial dims (1 to %d supported)", nsp, KN_MAX_SPATIAL);
        return KILN_ERR_UNSUPPORTED;
    }
    w->nsp = nsp;
    w->known = true;
    for (int i = 0; i < nsp; i++) w->in[i] = in[i];

    /* kernel: from the weight, checked against kernel_shape; pools take kernel_shape */
    bool ks_present;
    int64_t ks[KN_MAX_SPATIAL];
    kiln_status s = ints_attr(n, "kernel_shape", nsp, -1, ks, &ks_present, why, cap);
    if (s) return s;
    for (int i = 0; i < nsp; i++) {
        int64_t k = kernel ? kernel[i] : -1;
        if (ks_present) {
            if (ks[i] <= 0) {
                snprintf(why, cap, "kernel_shape %s has a non-positive entry", kn_ints_str(ks, nsp, b1, sizeof b1));
                return KILN_ERR_INVALID_MODEL;
            }
            if (k >= 0 && k != ks[i]) {
                snprintf(why, cap, "kernel_shape %s does not match the weight's spatial dims %s",
                         kn_ints_str(ks, nsp, b1, sizeof b1), kn_ints_str(kernel, nsp, b2, sizeof b2));
                return KILN_ERR_SHAPE;
            }
            k = ks[i];
        }
        if (!kernel && !ks_present) {
            snprintf(why, cap, "attribute 'kernel_shape' is required");
            return KILN_ERR_INVALID_MODEL;
        }
        w->kernel[i] = k;
    }

    if ((s = ints_attr(n, "strides", nsp, 1, w->stride, NULL, why, cap))) return s;
    if ((s = ints_attr(n, "dilations", nsp, 1, w->dilation, NULL, why, cap))) return s;
    int64_t pads[2 * KN_MAX_SPATIAL];
    bool pads_present;
    if ((s = ints_attr(n, "pads", 2 * nsp, 0, pads, &pads_present, why, cap))) return s;
    for (int i = 0; i < nsp; i++) {
        if (w->stride[i] <= 0) {
            snprintf(why, cap, "strides %s must be positive", kn_ints_str(w->stride, nsp, b1, sizeof b1));
            return KILN_ERR_INVALID_MODEL;
        }
        if (w->dilation[i] <= 0) {
            snprintf(why, cap, "dilations %s must be positive", kn_ints_str(w->dilation, nsp, b1, sizeof b1));
            return KILN_ERR_INVALID_MODEL;
        }
        if (pads[i] < 0 || pads[nsp + i] < 0) {
            snprintf(why, cap, "pads %s must not be negative", kn_ints_str(pads, 2 * nsp, b1, sizeof b1));
            return KILN_ERR_INVALID_MODEL;
        }
    }
    w->ceil_mode = kind == KN_WINDOW_POOL && kn_attr_int(n, "ceil_mode", 0) != 0;

    const char *ap = kn_attr_string(n, "auto_pad", "NOTSET");
    enum { NOTSET, SAME_UPPER, SAME_LOWER, VALID } mode;
    if (!ap[0] || !strcmp(ap, "NOTSET")) mode = NOTSET;
    else if (!strcmp(ap, "SAME_UPPER")) mode = SAME_UPPER;
    else if (!strcmp(ap, "SAME_LOWER")) mode = SAME_LOWER;
    else if (!strcmp(ap, "VALID")) mode = VALID;
    else {
        snprintf(why, cap, "auto_pad '%s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", ap);
        return KILN_ERR_INVALID_MODEL;
    }

    if (kind == KN_WINDOW_CONV_TRANSPOSE) {
        if ((s = ints_attr(n, "output_padding", nsp, 0, w->out_pad, NULL, why, cap))) return s;
        int cnt = 0;
        const int64_t *os = kn_attr_ints(n, "output_shape", &cnt);
        if (cnt > 0 && cnt != nsp && cnt != nsp + 2) {
            snprintf(why, cap, "attribute 'output_shape' has %d values but the input has %d spatial dims", cnt, nsp);
            return KILN_ERR_INVALID_MODEL;
        }
        if (cnt == nsp + 2) os += 2; /* some exporters give the whole output shape */
        for (int i = 0; i < nsp; i++) {
            int64_t x = w->in[i], k = w->kernel[i], st = w->stride[i], d = w->dilation[i];
            if (w->out_pad[i] < 0 || (w->out_pad[i] >= st && w->out_pad[i] >= d)) {
                snprintf(why, cap, "output_padding %s must be smaller than the stride or the dilation",
                         kn_ints_str(w->out_pad, nsp, b1, sizeof b1));
                return KILN_ERR_INVALID_MODEL;
            }
            if (x < 0 || k < 0) {
                w->out[i] = cnt > 0 ? os[i] : -1;
                w->known = false;
                continue;
            }
            int64_t full = st * (x - 1) + w->out_pad[i] + (k - 1) * d + 1;
            if (cnt > 0 || mode == SAME_UPPER || mode == SAME_LOWER) {
                int64_t target = cnt > 0 ? os[i] : x * st;
                int64_t total = full - target;
                /* floor division, as the reference does, when output_shape asks for more */
                int64_t half = floor_div(total, 2);
                if (mode == SAME_UPPER) {
                    w->pad_begin[i] = half;
                    w->pad_end[i] = total - half;
                } else {
                    w->pad_begin[i] = total - half;
                    w->pad_end[i] = half;
                }
                w->out[i] = target;
            } else {
                if (mode == NOTSET) {
                    w->pad_begin[i] = pads[i];
                    w->pad_end[i] = pads[nsp + i];
                }
                w->out[i] = full - w->pad_begin[i] - w->pad_end[i];
            }
            if (w->out[i] <= 0) {
                snprintf(why, cap, "spatial dim %d: the output size would be %lld (input %lld, kernel %lld, stride %lld, "
                         "pads %lld+%lld)", i, (long long)w->out[i], (long long)x, (long long)k, (long long)st,
                         (long long)w->pad_begin[i], (long long)w->pad_end[i]);
                return KILN_ERR_SHAPE;
            }
        }
        return KILN_OK;
    }

    for (int i = 0; i < nsp; i++) {
        int64_t x = w->in[i], k = w->kernel[i], st = w->stride[i], d = w->dilation[i];
        if (mode == NOTSET) {
            w->pad_begin[i] = pads[i];
            w->pad_end[i] = pads[nsp + i];
        }
        if (x < 0 || k < 0) {
            w->out[i] = -1;
            w->known = false;
            continue;
        }
        if (k - 1 > ((int64_t)1 << 40) / d || x > ((int64_t)1 << 40)) {
            snprintf(why, cap, "spatial dim %d: kernel %lld with dilation %lld over %lld positions is beyond any real "
                     "model (refused: a size from an attribute)", i, (long long)k, (long long)d, (long long)x);
            return KILN_ERR_INVALID_MODEL;
        }
        int64_t dk = (k - 1) * d + 1;
        if (mode == SAME_UPPER || mode == SAME_LOWER) {
            int64_t o = ceil_div(x, st);
            int64_t total = (o - 1) * st + dk - x;
            if (total < 0) total = 0;
            if (mode == SAME_UPPER) {
                w->pad_begin[i] = total / 2;
                w->pad_end[i] = total - total / 2;
            } else {
                w->pad_end[i] = total / 2;
                w->pad_begin[i] = total - total / 2;
            }
            w->out[i] = o;
            continue;
        }
        /* A pad beyond the input and the kernel together only adds windows that see nothing but
         * padding; refused, so pads from a hostile attribute (14M) cannot size the output (a Conv
         * of a few bytes asked for 2.3 GB and 44 s). Such outputs are bounded by 3x the input plus
         * twice the kernel. */
        if (mode == NOTSET && (w->pad_begin[i] > x + dk || w->pad_end[i] > x + dk)) {
            snprintf(why, cap, "spatial dim %d: pads %lld+%lld are larger than the input (%lld) and the %skernel (%lld) "
                     "together: the windows beyond would see only padding (refused: a size from an attribute)", i,
                     (long long)w->pad_begin[i], (long long)w->pad_end[i], (long long)x, d > 1 ? "dilated " : "",
                     (long long)dk);
            return KILN_ERR_INVALID_MODEL;
        }
        int64_t span = x + w->pad_begin[i] + w->pad_end[i] - dk;
        if (span < 0) {
            snprintf(why, cap, "spatial dim %d: the input size %lld%s is smaller than the %skernel (%lld)", i,
                     (long long)x,
                     w->pad_begin[i] + w->pad_end[i] ? " with its pads" : "", d > 1 ? "dilated " : "", (long long)dk);
            return KILN_ERR_SHAPE;
        }
        int64_t o = (w->ceil_mode ? ceil_div(span, st) : floor_div(span, st)) + 1;
        /* ceil mode: the last window must start inside the input or its leading pad */
        if (w->ceil_mode && (o - 1) * st >= x + w->pad_begin[i]) o--;
        w->out[i] = o;
    }
    return KILN_OK;
}

/* ---------------------------------------------------------------- Einsum */

static char l_char(int id) { return (char)(id < 26 ? 'a' + id : 'A' + id - 26); }

static int letter_id(char ch) {
    if (ch >= 'a' && ch <= 'z') return ch - 'a';
    if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
    return -1;
}

/* One term ("ij", "...k", "b...") into letter ids, with -2 marking the ellipsis position. */
static kiln_status parse_term(const char *s, size_t len, int8_t *ids, int *n_out, bool *ellipsis, char *why,
                              size_t cap) {
    int n = 0;
    *ellipsis = false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (ch == ' ') continue;
        if (ch == '.') {
            if (i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.' || *ellipsis) {
                snprintf(why, cap, "equation term '%.*s' has a malformed or repeated ellipsis", (int)len, s);
                return KILN_ERR_INVALID_MODEL;
            }
            *ellipsis = true;
            if (n >= KILN_MAX_RANK) break;
            ids[n++] = -2;
            i += 2;
            continue;
        }
        int id = letter_id(ch);
        if (id < 0) {
            snprintf(why, cap, "equation term '%.*s' has the character '%c' (only letters and '...' are allowed)",
                     (int)len, s, ch);
            return KILN_ERR_INVALID_MODEL;
        }
        if (n >= KILN_MAX_RANK + 1) {
            snprintf(why, cap, "equation term '%.*s' has too many subscripts", (int)len, s);
            return KILN_ERR_UNSUPPORTED;
        }
        ids[n++] = (int8_t)id;
    }
    *n_out = n;
    return KILN_OK;
}

kiln_status kn_einsum_plan_make(const char *eq, int n_in, const int *ranks, const int64_t *const *dims,
                                kn_einsum_plan *p, char *why, size_t cap) {
    memset(p, 0, sizeof *p);
    for (int l = 0; l < KN_EINSUM_LABELS; l++) p->size[l] = -2;
    if (n_in < 1 || n_in > KN_EINSUM_MAX_IN) {
        snprintf(why, cap, "%d inputs (1 to %d supported)", n_in, KN_EINSUM_MAX_IN);
        return KILN_ERR_UNSUPPORTED;
    }
    p->n_in = n_in;
    const char *arrow = strstr(eq, "->");
    size_t lhs_len = arrow ? (size_t)(arrow - eq) : strlen(eq);
    int8_t terms[KN_EINSUM_MAX_IN][KILN_MAX_RANK + 2];
    int term_n[KN_EINSUM_MAX_IN];
    bool term_ell[KN_EINSUM_MAX_IN];
    int n_terms = 0, max_ell = 0;
    size_t start = 0;
    for (size_t i = 0; i <= lhs_len; i++) {
        if (i < lhs_len && eq[i] != ',') continue;
        if (n_terms >= n_in) {
            snprintf(why, cap, "equation '%s' has more terms than the %d input%s", eq, n_in, n_in == 1 ? "" : "s");
            return KILN_ERR_INVALID_MODEL;
        }
        kiln_status s = parse_term(eq + start, i - start, terms[n_terms], &term_n[n_terms], &term_ell[n_terms], why, cap);
        if (s) return s;
        int letters = term_n[n_terms] - (term_ell[n_terms] ? 1 : 0);
        int r = ranks[n_terms];
        if (term_ell[n_terms] ? r < letters : r != letters) {
            snprintf(why, cap, "equation term %d '%.*s' has %d subscript%s but input %d has rank %d", n_terms,
                     (int)(i - start), eq + start, letters, letters == 1 ? "" : "s", n_terms, r);
            return KILN_ERR_SHAPE;
        }
        if (term_ell[n_terms] && r - letters > max_ell) max_ell = r - letters;
        n_terms++;
        start = i + 1;
    }
    if (n_terms != n_in) {
        snprintf(why, cap, "equation '%s' has %d term%s but the node has %d input%s", eq, n_terms,
                 n_terms == 1 ? "" : "s", n_in, n_in == 1 ? "" : "s");
        return KILN_ERR_INVALID_MODEL;
    }
    if (max_ell > KN_EINSUM_LABELS - 52) {
        snprintf(why, cap, "the ellipsis covers %d dims (at most %d supported)", max_ell, KN_EINSUM_LABELS - 52);
        return KILN_ERR_UNSUPPORTED;
    }
    int count[KN_EINSUM_LABELS] = {0};
    for (int t = 0; t < n_in; t++) {
        int r = ranks[t], letters = term_n[t] - (term_ell[t] ? 1 : 0), e = r - letters, ax = 0;
        p->in_rank[t] = r;
        for (int j = 0; j < term_n[t]; j++) {
            if (terms[t][j] == -2) {
                for (int q = 0; q < e; q++) p->in_label[t][ax++] = (int8_t)(52 + max_ell - e + q);
            } else {
                p->in_label[t][ax++] = terms[t][j];
            }
        }
        for (int a = 0; a < r; a++) {
            int l = p->in_label[t][a];
            int64_t d = dims[t][a];
            count[l]++;
            if (p->size[l] == -2) p->size[l] = d;
            else if (d >= 0 && p->size[l] >= 0 && d != p->size[l]) {
                if (p->size[l] == 1) p->size[l] = d;
                else if (d != 1) {
                    if (l < 52)
                        snprintf(why, cap, "subscript '%c' has size %lld in one input and %lld in input %d",
                                 l_char(l), (long long)p->size[l], (long long)d, t);
                    else snprintf(why, cap, "the ellipsis dims do not broadcast (%lld vs %lld in input %d)",
                                  (long long)p->size[l], (long long)d, t);
                    return KILN_ERR_SHAPE;
                }
            } else if (p->size[l] == 1 && d < 0) {
                p->size[l] = -1;
            }
        }
    }
    if (arrow) {
        int8_t ids[KILN_MAX_RANK + 2];
        int n = 0;
        bool ell;
        kiln_status s = parse_term(arrow + 2, strlen(arrow + 2), ids, &n, &ell, why, cap);
        if (s) return s;
        for (int j = 0; j < n; j++) {
            if (ids[j] == -2) {
                for (int q = 0; q < max_ell; q++) {
                    if (p->out_rank >= KILN_MAX_RANK) goto too_many;
                    p->out_label[p->out_rank++] = (int8_t)(52 + q);
                }
                continue;
            }
            if (count[ids[j]] == 0) {
                snprintf(why, cap, "output subscript '%c' does not appear in any input", l_char(ids[j]));
                return KILN_ERR_INVALID_MODEL;
            }
            for (int q = 0; q < p->out_rank; q++)
                if (p->out_label[q] == ids[j]) {
                    snprintf(why, cap, "output subscript '%c' is repeated", l_char(ids[j]));
                    return KILN_ERR_INVALID_MODEL;
                }
            if (p->out_rank >= KILN_MAX_RANK) goto too_many;
            p->out_label[p->out_rank++] = ids[j];
        }
    } else {
        for (int q = 0; q < max_ell; q++) p->out_label[p->out_rank++] = (int8_t)(52 + q);
        for (int l = 0; l < 52; l++) {
            /* alphabetical: a-z then A-Z is not ASCII order; numpy sorts by ASCII (A-Z first) */
            int id = l < 26 ? 26 + l : l - 26;
            if (count[id] == 1) {
                if (p->out_rank >= KILN_MAX_RANK) goto too_many;
                p->out_label[p->out_rank++] = (int8_t)id;
            }
        }
    }
    return KILN_OK;
too_many:
    snprintf(why, cap, "the output would have more than %d dims", KILN_MAX_RANK);
    return KILN_ERR_UNSUPPORTED;
}

kiln_status kn_einsum_prepare(const kn_node *n, void *params) {
    ((kn_einsum_prm *)params)->equation = kn_attr_string(n, "equation", "");
    return KILN_OK;
}

/* What kn_window_plan_kept keeps a window under: its kind and sizes */
typedef struct window_key {
    int32_t kind, nsp;
    int64_t sizes[2 * KN_MAX_SPATIAL]; /* in, then kernel (-2: none given) */
} window_key;
static const char window_tag = 0;

kiln_status kn_window_plan_kept(struct kn_kernel_ctx *c, kn_window_kind kind, int nsp, const int64_t *in,
                                const int64_t *kernel, kn_window *w, char *why, size_t cap) {
    if (nsp < 0 || nsp > KN_MAX_SPATIAL) return kn_window_plan(c->node, kind, nsp, in, kernel, w, why, cap);
    window_key key = {(int32_t)kind, nsp, {0}};
    for (int i = 0; i < nsp; i++) {
        key.sizes[i] = in[i];
        key.sizes[nsp + i] = kernel ? kernel[i] : -2;
    }
    const size_t key_bytes = offsetof(window_key, sizes) + sizeof(int64_t) * (size_t)(2 * nsp);
    const kn_window *kept = kn_ctx_prep_get(c, &window_tag, &key, key_bytes);
    if (kept) {
        *w = *kept;
        return KILN_OK;
    }
    kiln_status st = kn_window_plan(c->node, kind, nsp, in, kernel, w, why, cap);
    if (st == KILN_OK) kn_ctx_prep_put(c, &window_tag, &key, key_bytes, w, sizeof *w);
    return st;
}

kiln_status kn_gemm_attrs_prepare(const kn_node *n, void *params) {
    kn_gemm_attrs *p = params;
    p->ta = kn_attr_int(n, "transA", 0) != 0;
    p->tb = kn_attr_int(n, "transB", 0) != 0;
    p->alpha = kn_attr_float(n, "alpha", 1.0f);
    p->beta = kn_attr_float(n, "beta", 1.0f);
    return KILN_OK;
}
