/* The text family: StringNormalizer, StringConcat, StringSplit, RegexFullMatch and
 * TfIdfVectorizer. Schemas and shape inference. */
#include "ops/text.h"
#include "util/limits.h"

#include <stdio.h>
#include <string.h>

static kiln_status need(kn_infer_ctx *c, int n) {
    for (int i = 0; i < n; i++)
        if (i >= c->n_inputs || !c->in[i]) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "input %d is missing", i);
    return KILN_OK;
}

static kiln_status need_type(kn_infer_ctx *c, int i, kiln_dtype t) {
    kiln_dtype d = c->in[i]->dtype;
    if (d != KILN_DTYPE_UNDEFINED && d != t)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "input %d has element type %s; %s takes %s", i,
                              kiln_dtype_name(d), c->node->op_type, kiln_dtype_name(t));
    return KILN_OK;
}

/* [C] or [1, C] strings -> the same rank; the count left after removing stop words is data
 * dependent. */
static kiln_status infer_string_normalizer(kn_infer_ctx *c) {
    KN_TRY(need(c, 1));
    KN_TRY(need_type(c, 0, KILN_DTYPE_STRING));
    const kn_type *x = c->in[0];
    const char *act = kn_attr_string(c->node, "case_change_action", "NONE");
    if (strcmp(act, "NONE") && strcmp(act, "LOWER") && strcmp(act, "UPPER"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "case_change_action '%s' is not NONE, LOWER or UPPER", act);
    if (x->rank >= 0 && x->rank != 1 && x->rank != 2)
        return kn_infer_error(c, KILN_ERR_SHAPE, "x has rank %d; StringNormalizer takes [C] or [1, C]", x->rank);
    if (x->rank == 2 && x->dims[0].value >= 0 && x->dims[0].value != 1)
        return kn_infer_error(c, KILN_ERR_SHAPE, "x is [%lld, C]; StringNormalizer takes [C] or [1, C]",
                              (long long)x->dims[0].value);
    int64_t d[2] = {1, -1};
    if (x->rank == 1) d[0] = -1;
    kn_infer_set(c, 0, KILN_DTYPE_STRING, x->rank < 0 ? 1 : x->rank, d);
    if (x->rank < 0) c->out[0].rank = -1;
    return KILN_OK;
}

static kiln_status infer_string_concat(kn_infer_ctx *c) {
    KN_TRY(need(c, 2));
    KN_TRY(need_type(c, 0, KILN_DTYPE_STRING));
    KN_TRY(need_type(c, 1, KILN_DTYPE_STRING));
    return kn_infer_broadcast(c, 0, KILN_DTYPE_STRING);
}

/* Y: x's shape plus the largest number of pieces (data dependent); Z: x's shape, int64. */
static kiln_status infer_string_split(kn_infer_ctx *c) {
    KN_TRY(need(c, 1));
    KN_TRY(need_type(c, 0, KILN_DTYPE_STRING));
    const kn_type *x = c->in[0];
    if (kn_node_attr(c->node, "maxsplit") && kn_attr_int(c->node, "maxsplit", 0) <= 0)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "maxsplit %lld must be positive",
                              (long long)kn_attr_int(c->node, "maxsplit", 0));
    if (x->rank >= 0 && x->rank + 1 > KILN_MAX_RANK)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "x has rank %d; the output would exceed rank %d", x->rank,
                              KILN_MAX_RANK);
    KN_TRY(kn_infer_same(c, 0, 0));
    c->out[0].kind = KN_TYPE_TENSOR;
    if (x->rank >= 0) {
        c->out[0].rank = x->rank + 1;
        c->out[0].dims[x->rank] = (kn_dim){-1, NULL};
    }
    if (c->n_outputs > 1) {
        KN_TRY(kn_infer_same(c, 0, 1));
        c->out[1].kind = KN_TYPE_TENSOR;
        c->out[1].dtype = KILN_DTYPE_INT64;
    }
    return KILN_OK;
}

static kiln_status infer_regex_full_match(kn_infer_ctx *c) {
    KN_TRY(need(c, 1));
    KN_TRY(need_type(c, 0, KILN_DTYPE_STRING));
    const kn_attr *a = kn_node_attr(c->node, "pattern");
    if (!a || a->type != KN_ATTR_STRING) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "attribute 'pattern' is missing");
    regex_t re;
    char why[512];
    kiln_status st = kn_regex_compile(a->s, &re, why, sizeof why);
    if (st != KILN_OK) return kn_infer_error(c, st, "pattern '%s': %s", a->s, why);
    regfree(&re);
    KN_TRY(kn_infer_same(c, 0, 0));
    c->out[0].kind = KN_TYPE_TENSOR;
    c->out[0].dtype = KILN_DTYPE_BOOL;
    return KILN_OK;
}

static kiln_status infer_tfidf(kn_infer_ctx *c) {
    KN_TRY(need(c, 1));
    const kn_type *x = c->in[0];
    if (x->dtype != KILN_DTYPE_UNDEFINED && x->dtype != KILN_DTYPE_STRING && x->dtype != KILN_DTYPE_INT32 &&
        x->dtype != KILN_DTYPE_INT64)
        return kn_infer_error(c, KILN_ERR_UNSUPPORTED, "x has element type %s; TfIdfVectorizer takes string, int32 or int64",
                              kiln_dtype_name(x->dtype));
    const char *mode = kn_attr_string(c->node, "mode", "");
    if (strcmp(mode, "TF") && strcmp(mode, "IDF") && strcmp(mode, "TFIDF"))
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "mode '%s' is not TF, IDF or TFIDF", mode);
    int64_t mn = kn_attr_int(c->node, "min_gram_length", 0), mx = kn_attr_int(c->node, "max_gram_length", 0);
    if (mn < 1 || mx < mn)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "min_gram_length %lld and max_gram_length %lld must satisfy 1 <= min <= max",
                              (long long)mn, (long long)mx);
    if (kn_attr_int(c->node, "max_skip_count", 0) < 0)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "max_skip_count is negative");
    int n_idx;
    const int64_t *idx = kn_attr_ints(c->node, "ngram_indexes", &n_idx);
    int64_t out = 0;
    for (int i = 0; i < n_idx; i++) {
        if (idx[i] < 0) return kn_infer_error(c, KILN_ERR_INVALID_MODEL, "ngram_indexes[%d] is negative", i);
        if (idx[i] + 1 > out) out = idx[i] + 1;
    }
    if (x->rank > 2) return kn_infer_error(c, KILN_ERR_SHAPE, "x has rank %d; TfIdfVectorizer takes [C] or [B, C]", x->rank);
    /* The output's width comes from one attribute: bounded before anything is allocated. Each
     * n-gram of the pool has one index; an output more than 16 times wider than that (plus 4096)
     * is mostly columns nothing can ever count into: the mark of a hostile model (a 300-byte
     * model asked for 7 GB). And never more than the machine (one row at least, all the rows when
     * the batch is known). */
    if ((uint64_t)out > (uint64_t)n_idx * 16 + 4096)
        return kn_infer_error(c, KILN_ERR_INVALID_MODEL,
                              "ngram_indexes has %d entries but its largest, %lld, would make the output %lld columns wide "
                              "(refused: a size from an attribute; at most 16 x the entries + 4096)",
                              n_idx, (long long)(out - 1), (long long)out);
    int64_t rows = x->rank == 2 && x->dims[0].value > 0 ? x->dims[0].value : 1;
    uint64_t bytes = kn_bytes_of(kn_bytes_of((uint64_t)out, (uint64_t)rows), sizeof(float)), limit = kn_tensor_bytes_limit();
    if (bytes > limit)
        return kn_infer_error(c, KILN_ERR_OUT_OF_MEMORY,
                              "the largest of ngram_indexes (%lld) makes the output %lld x %lld floats (%llu bytes), more "
                              "than the limit of %llu bytes (the machine's memory, or KILN_MAX_TENSOR_BYTES)",
                              (long long)(out - 1), (long long)rows, (long long)out, (unsigned long long)bytes,
                              (unsigned long long)limit);
    if (x->rank == 2) {
        int64_t d[2] = {x->dims[0].value, out};
        kn_infer_set(c, 0, KILN_DTYPE_FLOAT, 2, d);
        c->out[0].dims[0] = x->dims[0];
    } else if (x->rank >= 0) {
        kn_infer_set(c, 0, KILN_DTYPE_FLOAT, 1, &out);
    } else {
        c->out[0].kind = KN_TYPE_TENSOR;
        c->out[0].dtype = KILN_DTYPE_FLOAT;
    }
    return KILN_OK;
}

const kn_op_schema kn_ops_text[] = {
    {"", "StringNormalizer", 10, 0, 1, 1, 1, 1, infer_string_normalizer, 0},
    {"", "StringConcat", 20, 0, 2, 2, 1, 1, infer_string_concat, 0},
    {"", "StringSplit", 20, 0, 1, 1, 2, 2, infer_string_split, 0},
    {"", "RegexFullMatch", 20, 0, 1, 1, 1, 1, infer_regex_full_match, 0},
    {"", "TfIdfVectorizer", 9, 0, 1, 1, 1, 1, infer_tfidf, 0},
    {0},
};
