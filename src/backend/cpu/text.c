/* CPU kernels of the text family: StringNormalizer, StringConcat, StringSplit, RegexFullMatch,
 * TfIdfVectorizer.
 *
 * Strings are UTF-8. Case changes cover ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic
 * letters; others are left as they are. StringNormalizer removes whole elements equal to a stop
 * word (compared without case when is_case_sensitive is 0), then changes case; its `locale`
 * attribute is not used, and accents are not stripped (the Python reference strips them from
 * non-ASCII strings). StringSplit without a delimiter splits on runs of ASCII whitespace, as
 * Python's str.split() does for ASCII text. */
#include "backend/cpu/cpu.h"
#include "ops/text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static kiln_status set_str(kn_tensor *t, int64_t i, const char *s, size_t n) {
    char *c = malloc(n + 1);
    if (!c) return KN_OOM();
    if (n) memcpy(c, s, n);
    c[n] = 0;
    char **d = t->data;
    free(d[i]);
    d[i] = c;
    return KILN_OK;
}

static const char *str_at(const kn_tensor *t, int64_t i) {
    const char *s = ((char *const *)t->data)[i];
    return s ? s : "";
}

/* ------------------------------------------------------------------ UTF-8 case */

/* Decodes one UTF-8 sequence; an invalid byte comes back as UINT32_MAX (copied as it is). */
static uint32_t utf8_next(const unsigned char **pp) {
    const unsigned char *p = *pp;
    uint32_t c = *p;
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n <= 0) {
        *pp = p + 1;
        return n == 0 ? c : UINT32_MAX;
    }
    uint32_t v = c & (0x3f >> n);
    for (int i = 1; i <= n; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            *pp = p + 1;
            return UINT32_MAX;
        }
        v = (v << 6) | (p[i] & 0x3f);
    }
    *pp = p + n + 1;
    return v;
}

static int utf8_put(uint32_t c, char *o) {
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (char)(0xc0 | (c >> 6));
        o[1] = (char)(0x80 | (c & 0x3f));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (char)(0xe0 | (c >> 12));
        o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (c >> 18));
    o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3f));
    o[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

static uint32_t to_lower(uint32_t c) {
    if (c >= 'A' && c <= 'Z') return c + 32;
    if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 32;
    if (((c >= 0x100 && c <= 0x137) || (c >= 0x14a && c <= 0x177)) && !(c & 1) && c != 0x130) return c + 1;
    if (((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e)) && (c & 1)) return c + 1;
    if (c == 0x178) return 0xff;
    if (c >= 0x391 && c <= 0x3ab && c != 0x3a2) return c + 32;
    if (c >= 0x410 && c <= 0x42f) return c + 32;
    if (c >= 0x400 && c <= 0x40f) return c + 80;
    return c;
}

static uint32_t to_upper(uint32_t c) {
    if (c >= 'a' && c <= 'z') return c - 32;
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 32;
    if (((c >= 0x101 && c <= 0x137) || (c >= 0x14b && c <= 0x177)) && (c & 1) && c != 0x131) return c - 1;
    if (((c >= 0x13a && c <= 0x148) || (c >= 0x17a && c <= 0x17e)) && !(c & 1)) return c - 1;
    if (c == 0xff) return 0x178;
    if (c >= 0x3b1 && c <= 0x3cb && c != 0x3c2) return c - 32;
    if (c >= 0x430 && c <= 0x44f) return c - 32;
    if (c >= 0x450 && c <= 0x45f) return c - 80;
    return c;
}

/* A new string with every letter mapped by fn (the UTF-8 length can change). */
static char *map_case(const char *s, uint32_t (*fn)(uint32_t)) {
    size_t n = strlen(s);
    char *o = malloc(n + 4), *q = o; /* the mapped letters keep their UTF-8 length */
    if (!o) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        const unsigned char *b = p;
        uint32_t ch = utf8_next(&p);
        if (ch == UINT32_MAX) *q++ = (char)*b;
        else q += utf8_put(fn(ch), q);
    }
    *q = 0;
    return o;
}

/* ------------------------------------------------------------------ StringNormalizer */

/* The family's attributes, read once (their prepare hook); pointers are the node's */
typedef struct text_prm {
    const char *case_action;     /* StringNormalizer */
    bool sensitive;
    const kn_attr *stopwords;
    const char *delim;           /* StringSplit: NULL splits on whitespace */
    int64_t maxsplit;            /* -1: absent */
    const char *pattern;         /* RegexFullMatch */
    const char *mode;            /* TfIdfVectorizer */
    int64_t min_n, max_n, max_skip;
    const int64_t *counts, *idx, *pool_i;
    int n_counts, n_idx, n_w, n_pool;
    const float *w;
    const kn_attr *pool_s;
} text_prm;

static kiln_status text_prepare(const kn_node *n, void *params) {
    text_prm *p = params;
    memset(p, 0, sizeof *p);
    p->case_action = kn_attr_string(n, "case_change_action", "NONE");
    p->sensitive = kn_attr_int(n, "is_case_sensitive", 0) != 0;
    p->stopwords = kn_node_attr(n, "stopwords");
    const kn_attr *da = kn_node_attr(n, "delimiter");
    p->delim = da && da->type == KN_ATTR_STRING ? da->s : NULL;
    p->maxsplit = kn_node_attr(n, "maxsplit") ? kn_attr_int(n, "maxsplit", 0) : -1;
    p->pattern = kn_attr_string(n, "pattern", "");
    p->mode = kn_attr_string(n, "mode", "TF");
    p->min_n = kn_attr_int(n, "min_gram_length", 1);
    p->max_n = kn_attr_int(n, "max_gram_length", 1);
    p->max_skip = kn_attr_int(n, "max_skip_count", 0);
    p->counts = kn_attr_ints(n, "ngram_counts", &p->n_counts);
    p->idx = kn_attr_ints(n, "ngram_indexes", &p->n_idx);
    p->w = kn_attr_floats(n, "weights", &p->n_w);
    p->pool_s = kn_node_attr(n, "pool_strings");
    p->pool_i = kn_attr_ints(n, "pool_int64s", &p->n_pool);
    return KILN_OK;
}

static kiln_status run_string_normalizer(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    KN_CTX_PRM(c, text_prepare, text_prm, prm);
    const char *act = prm->case_action;
    bool sensitive = prm->sensitive;
    const kn_attr *sw = prm->stopwords;
    int n_stop = sw && sw->type == KN_ATTR_STRINGS ? sw->n : 0;
    uint32_t (*fn)(uint32_t) = !strcmp(act, "LOWER") ? to_lower : !strcmp(act, "UPPER") ? to_upper : NULL;
    int64_t n = kn_tensor_count(x);
    kiln_status st = KILN_OK;
    /* case-folded stop words for the case-insensitive comparison */
    char **folded = NULL;
    if (n_stop && !sensitive) {
        folded = calloc((size_t)n_stop, sizeof *folded);
        if (!folded) return KN_OOM();
        for (int i = 0; i < n_stop && st == KILN_OK; i++)
            if (!(folded[i] = map_case(sw->strings[i], to_lower))) st = KN_OOM();
    }
    char **kept = calloc((size_t)(n > 0 ? n : 1), sizeof *kept);
    int64_t m = 0;
    if (!kept && st == KILN_OK) st = KN_OOM();
    for (int64_t i = 0; i < n && st == KILN_OK; i++) {
        const char *s = str_at(x, i);
        bool stop = false;
        if (n_stop) {
            char *f = sensitive ? NULL : map_case(s, to_lower);
            if (!sensitive && !f) {
                st = KN_OOM();
                break;
            }
            for (int k = 0; k < n_stop && !stop; k++) stop = !strcmp(sensitive ? s : f, sensitive ? sw->strings[k] : folded[k]);
            free(f);
        }
        if (stop) continue;
        kept[m] = fn ? map_case(s, fn) : strdup(s);
        if (!kept[m]) st = KN_OOM();
        m++;
    }
    if (st == KILN_OK) {
        /* nothing left: one empty string */
        int64_t dims[2] = {1, m ? m : 1};
        kn_tensor *y;
        st = x->rank == 2 ? kn_ctx_output(c, 0, KILN_DTYPE_STRING, 2, dims, &y)
                          : kn_ctx_output(c, 0, KILN_DTYPE_STRING, 1, dims + 1, &y);
        if (st == KILN_OK) {
            char **d = y->data;
            for (int64_t i = 0; i < m; i++) {
                free(d[i]);
                d[i] = kept[i];
                kept[i] = NULL;
            }
            if (!m) st = set_str(y, 0, "", 0);
        }
    }
    for (int64_t i = 0; kept && i < n; i++) free(kept[i]);
    free(kept);
    for (int i = 0; folded && i < n_stop; i++) free(folded[i]);
    free(folded);
    return st;
}

/* ------------------------------------------------------------------ StringConcat */

/* Index into an input of shape (rank, dims) broadcast to the output's shape, for output element i. */
static int64_t bcast_index(const kn_tensor *y, const kn_tensor *a, int64_t i) {
    int64_t idx = 0, stride = 1;
    for (int d = y->rank - 1; d >= 0; d--) {
        int64_t coord = i % y->dims[d];
        i /= y->dims[d];
        int ad = d - (y->rank - a->rank);
        if (ad < 0) break;
        if (a->dims[ad] != 1) idx += coord * stride;
        stride *= a->dims[ad];
    }
    return idx;
}

static kiln_status run_string_concat(kn_kernel_ctx *c) {
    const kn_tensor *a = c->in[0], *b = c->in[1];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    int64_t n = kn_tensor_count(y);
    for (int64_t i = 0; i < n; i++) {
        const char *sa = str_at(a, bcast_index(y, a, i)), *sb = str_at(b, bcast_index(y, b, i));
        size_t la = strlen(sa), lb = strlen(sb);
        char *s = malloc(la + lb + 1);
        if (!s) return KN_OOM();
        memcpy(s, sa, la);
        memcpy(s + la, sb, lb + 1);
        char **d = y->data;
        free(d[i]);
        d[i] = s;
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ StringSplit */

static bool py_space(unsigned char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1c && ch <= 0x1f); }

/* Splits s into at most maxsplit+1 pieces (maxsplit < 0: no limit); calls fn for each piece in
 * order (fn may be NULL to count). Returns the number of pieces. */
typedef struct piece {
    const char *p;
    size_t n;
} piece;

static int64_t split(const char *s, const char *delim, int64_t maxsplit, piece *out) {
    int64_t k = 0;
    if (!delim || !*delim) { /* runs of whitespace; no empty pieces */
        const char *p = s;
        while (*p && py_space((unsigned char)*p)) p++;
        while (*p) {
            if (maxsplit >= 0 && k == maxsplit) { /* the rest as it is */
                if (out) out[k] = (piece){p, strlen(p)};
                k++;
                break;
            }
            const char *e = p;
            while (*e && !py_space((unsigned char)*e)) e++;
            if (out) out[k] = (piece){p, (size_t)(e - p)};
            k++;
            p = e;
            while (*p && py_space((unsigned char)*p)) p++;
        }
        return k;
    }
    size_t dl = strlen(delim);
    const char *p = s;
    for (;;) {
        const char *e = (maxsplit >= 0 && k == maxsplit) ? NULL : strstr(p, delim);
        if (!e) {
            if (out) out[k] = (piece){p, strlen(p)};
            return k + 1;
        }
        if (out) out[k] = (piece){p, (size_t)(e - p)};
        k++;
        p = e + dl;
    }
}

static kiln_status run_string_split(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    KN_CTX_PRM(c, text_prepare, text_prm, prm);
    const char *delim = prm->delim;
    int64_t maxsplit = prm->maxsplit;
    int64_t n = kn_tensor_count(x), most = 0;
    kn_tensor *z;
    KN_TRY(kn_ctx_output(c, 1, KILN_DTYPE_INT64, x->rank, x->dims, &z));
    int64_t *cnt = z->data;
    for (int64_t i = 0; i < n; i++) {
        cnt[i] = split(str_at(x, i), delim, maxsplit, NULL);
        if (cnt[i] > most) most = cnt[i];
    }
    int64_t dims[KILN_MAX_RANK];
    memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
    dims[x->rank] = most;
    kn_tensor *y;
    KN_TRY(kn_ctx_output(c, 0, KILN_DTYPE_STRING, x->rank + 1, dims, &y));
    piece *pc = malloc(sizeof *pc * (size_t)(most > 0 ? most : 1));
    if (!pc) return KN_OOM();
    kiln_status st = KILN_OK;
    for (int64_t i = 0; i < n && st == KILN_OK; i++) {
        int64_t k = split(str_at(x, i), delim, maxsplit, pc);
        for (int64_t j = 0; j < most && st == KILN_OK; j++)
            st = j < k ? set_str(y, i * most + j, pc[j].p, pc[j].n) : set_str(y, i * most + j, "", 0);
    }
    free(pc);
    return st;
}

/* ------------------------------------------------------------------ RegexFullMatch */

static kiln_status run_regex_full_match(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    kn_tensor *y = c->out[0];
    if (!y) return kn_kernel_error(c, KILN_ERR_INTERNAL, "output 0 was not allocated");
    KN_CTX_PRM(c, text_prepare, text_prm, prm);
    const char *pat = prm->pattern;
    regex_t re;
    char why[512];
    kiln_status st = kn_regex_compile(pat, &re, why, sizeof why);
    if (st != KILN_OK) return kn_kernel_error(c, st, "pattern '%s': %s", pat, why);
    int64_t n = kn_tensor_count(x);
    uint8_t *o = y->data;
    for (int64_t i = 0; i < n; i++) o[i] = regexec(&re, str_at(x, i), 0, NULL, 0) == 0;
    regfree(&re);
    return KILN_OK;
}

/* ------------------------------------------------------------------ TfIdfVectorizer */

/* The pool's n-grams in an open-addressing table keyed by (size, tokens). */
typedef struct tf_entry {
    int64_t start; /* index of its first token in the pool; -1 empty */
    int size;
    int64_t id;    /* its number among all of the pool's n-grams */
} tf_entry;

typedef struct tf_ctx {
    bool strings;
    const int64_t *pool_i;
    const char *const *pool_s;
    const int64_t *x_i; /* the row's tokens as int64 (int inputs) */
    const char *const *x_s;
    tf_entry *tab;
    uint64_t mask;
} tf_ctx;

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}
static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Hash of n tokens: from the pool at `start` (pool=true) or from x at `pos` with stride d. */
static uint64_t tf_hash(const tf_ctx *t, bool pool, int64_t pos, int64_t d, int n) {
    uint64_t h = (uint64_t)n;
    for (int k = 0; k < n; k++) {
        int64_t i = pos + (pool ? k : k * d);
        uint64_t v = t->strings ? str_hash(pool ? t->pool_s[i] : t->x_s[i]) : (uint64_t)(pool ? t->pool_i[i] : t->x_i[i]);
        h = mix(h, v);
    }
    return h;
}

static bool tf_equal(const tf_ctx *t, const tf_entry *e, int64_t pos, int64_t d, int n) {
    if (e->size != n) return false;
    for (int k = 0; k < n; k++) {
        int64_t pi = e->start + k, xi = pos + k * d;
        if (t->strings ? strcmp(t->pool_s[pi], t->x_s[xi]) != 0 : t->pool_i[pi] != t->x_i[xi]) return false;
    }
    return true;
}

static kiln_status run_tfidf(kn_kernel_ctx *c) {
    const kn_tensor *x = c->in[0];
    KN_CTX_PRM(c, text_prepare, text_prm, prm);
    const char *mode = prm->mode;
    int64_t min_n = prm->min_n, max_n = prm->max_n;
    int64_t max_skip = prm->max_skip;
    int n_counts = prm->n_counts, n_idx = prm->n_idx, n_w = prm->n_w, n_pool = prm->n_pool;
    const int64_t *counts = prm->counts;
    const int64_t *idx = prm->idx;
    const float *w = prm->w;
    const kn_attr *ps = prm->pool_s;
    const int64_t *pool_i = prm->pool_i;
    bool strings = x->dtype == KILN_DTYPE_STRING;
    if (strings) n_pool = ps && ps->type == KN_ATTR_STRINGS ? ps->n : 0;
    if (strings && !n_pool && pool_i)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "x holds strings but the pool is pool_int64s");
    if (!strings && ps && !pool_i)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "x holds integers but the pool is pool_strings");
    int64_t out = 0;
    for (int i = 0; i < n_idx; i++)
        if (idx[i] + 1 > out) out = idx[i] + 1;
    if (n_w && n_w < out)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "weights has %d entries for %lld outputs", n_w, (long long)out);
    int64_t B = x->rank == 2 ? x->dims[0] : 1, C = x->rank == 0 ? 1 : x->dims[x->rank - 1];
    kn_tensor *y;
    if (x->rank == 2) {
        int64_t d[2] = {B, out};
        KN_TRY(kn_ctx_output(c, 0, KILN_DTYPE_FLOAT, 2, d, &y));
    } else {
        KN_TRY(kn_ctx_output(c, 0, KILN_DTYPE_FLOAT, 1, &out, &y));
    }
    /* the table: every n-gram of the pool whose size is within [min, max] */
    tf_ctx t = {strings, pool_i, strings ? ps->strings : NULL, NULL, NULL, NULL, 0};
    uint64_t cap = 16;
    while (cap < (uint64_t)n_pool * 2 + 16) cap *= 2;
    t.tab = malloc(sizeof *t.tab * cap);
    int64_t *xi = NULL, *freq = calloc((size_t)(B * out > 0 ? B * out : 1), sizeof *freq);
    kiln_status st = KILN_OK;
    if (!t.tab || !freq) {
        st = KN_OOM();
        goto done;
    }
    t.mask = cap - 1;
    for (uint64_t i = 0; i < cap; i++) t.tab[i].start = -1;
    int64_t id = 0;
    for (int g = 0; g < n_counts; g++) {
        int size = g + 1;
        int64_t b = counts[g], e = g + 1 < n_counts ? counts[g + 1] : n_pool;
        if (b < 0 || e > n_pool || e < b) {
            st = kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "ngram_counts[%d] = %lld is outside the pool of %d", g,
                                 (long long)b, n_pool);
            goto done;
        }
        for (int64_t s = b; s + size <= e; s += size, id++) {
            if (size < min_n || size > max_n) continue;
            if (id >= n_idx) {
                st = kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "ngram_indexes has %d entries, fewer than the pool's n-grams", n_idx);
                goto done;
            }
            uint64_t h = tf_hash(&t, true, s, 1, size) & t.mask;
            while (t.tab[h].start >= 0) h = (h + 1) & t.mask;
            t.tab[h] = (tf_entry){s, size, id};
        }
    }
    if (!strings) {
        int64_t n = kn_tensor_count(x);
        xi = malloc(sizeof *xi * (size_t)(n > 0 ? n : 1));
        if (!xi) {
            st = KN_OOM();
            goto done;
        }
        for (int64_t i = 0; i < n; i++) xi[i] = kn_tensor_get_i64(x, i);
    }
    for (int64_t r = 0; r < B; r++) {
        t.x_i = xi ? xi + r * C : NULL;
        t.x_s = strings ? (const char *const *)x->data + r * C : NULL;
        for (int64_t n = min_n; n <= max_n; n++) {
            int64_t skips = n == 1 ? 0 : max_skip; /* unigrams are counted once */
            for (int64_t d = 1; d <= skips + 1; d++)
                for (int64_t s = 0; s + (n - 1) * d < C; s++) {
                    uint64_t h = tf_hash(&t, false, s, d, (int)n) & t.mask;
                    for (; t.tab[h].start >= 0; h = (h + 1) & t.mask)
                        if (tf_equal(&t, &t.tab[h], s, d, (int)n)) {
                            freq[r * out + idx[t.tab[h].id]]++;
                            break;
                        }
                }
        }
    }
    float *o = y->data;
    bool tf = !strcmp(mode, "TF"), idf = !strcmp(mode, "IDF");
    for (int64_t r = 0; r < B; r++)
        for (int64_t j = 0; j < out; j++) {
            int64_t f = freq[r * out + j];
            float v;
            if (tf) v = (float)f;
            else if (idf) v = f > 0 ? (n_w ? w[j] : 1.0f) : 0.0f;
            else v = n_w ? w[j] * (float)f : (float)f;
            o[r * out + j] = v;
        }
done:
    free(t.tab);
    free(freq);
    free(xi);
    return st;
}

const kn_cpu_kernel kn_cpu_text[] = {
    {"", "StringNormalizer", run_string_normalizer, NULL, 0, KN_PARAMS(text_prepare, text_prm)},
    {"", "StringConcat", run_string_concat, NULL, KN_KERNEL_OVERWRITES},
    {"", "StringSplit", run_string_split, NULL, 0, KN_PARAMS(text_prepare, text_prm)},
    {"", "RegexFullMatch", run_regex_full_match, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(text_prepare, text_prm)},
    {"", "TfIdfVectorizer", run_tfidf, NULL, KN_KERNEL_OVERWRITES, KN_PARAMS(text_prepare, text_prm)},
    {0},
};
