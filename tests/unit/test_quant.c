/* Packed sub-byte storage, the casts to and from the new element types, the quantisation
 * layouts and the RE2 translation of RegexFullMatch. Expected values come from the ONNX
 * specification's tables (float4e2m1, float8e8m0) and hand computation. */
#include "backend/cpu/elementwise_impl.h"
#include "ops/quant.h"
#include "ops/text.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

KN_TEST(quant_packed_storage) {
    CHECK_EQ_INT(kn_dtype_bits(KILN_DTYPE_INT4), 4);
    CHECK_EQ_INT(kn_dtype_bits(KILN_DTYPE_UINT2), 2);
    CHECK_EQ_INT(kn_dtype_bits(KILN_DTYPE_FLOAT8E8M0), 8);
    CHECK_EQ_INT(kn_dtype_bits(KILN_DTYPE_FLOAT), 32);
    CHECK(kn_dtype_is_packed(KILN_DTYPE_FLOAT4E2M1));
    CHECK(!kn_dtype_is_packed(KILN_DTYPE_FLOAT8E8M0));
    CHECK_EQ_INT(kn_dtype_nbytes(KILN_DTYPE_INT4, 5), 3);
    CHECK_EQ_INT(kn_dtype_nbytes(KILN_DTYPE_INT2, 5), 2);
    CHECK_EQ_INT(kn_dtype_nbytes(KILN_DTYPE_INT2, 0), 0);
    CHECK_EQ_INT(kn_dtype_nbytes(KILN_DTYPE_INT16, 5), 10);
    CHECK(!strcmp(kiln_dtype_name(KILN_DTYPE_INT2), "int2"));
    CHECK(!strcmp(kiln_dtype_name(KILN_DTYPE_FLOAT8E8M0), "float8e8m0"));

    int64_t d = 5;
    kn_tensor *t;
    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_INT4, 1, &d, &t), KILN_OK);
    CHECK_EQ_INT(t->nbytes, 3);
    const int64_t v[5] = {-8, 7, -1, 0, 3};
    for (int i = 0; i < 5; i++) kn_tensor_set_i64(t, i, v[i]);
    /* element 0 in the low nibble of byte 0 */
    CHECK_EQ_INT(((uint8_t *)t->data)[0], 0x78);
    CHECK_EQ_INT(((uint8_t *)t->data)[1], 0x0f);
    CHECK_EQ_INT(((uint8_t *)t->data)[2] & 0x0f, 3);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(kn_tensor_get_i64(t, i), v[i]);
    kn_tensor_free(t);

    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_UINT2, 1, &d, &t), KILN_OK);
    CHECK_EQ_INT(t->nbytes, 2);
    for (int i = 0; i < 5; i++) kn_packed_set(t->data, KILN_DTYPE_UINT2, i, (unsigned)(i & 3));
    CHECK_EQ_INT(((uint8_t *)t->data)[0], 0xe4); /* 0,1,2,3 from the low bits up */
    CHECK_EQ_INT(kn_tensor_get_i64(t, 4), 0);
    kn_tensor_free(t);

    /* a view must cover the packed bytes only */
    uint8_t buf[2] = {0x21, 0x03};
    int64_t three = 3;
    CHECK_STATUS(kn_tensor_new_view(KILN_DTYPE_UINT4, 1, &three, buf, 2, &t), KILN_OK);
    CHECK_EQ_INT(kn_tensor_get_i64(t, 2), 3);
    kn_tensor_free(t);
    CHECK_STATUS(kn_tensor_new_view(KILN_DTYPE_UINT4, 1, &three, buf, 1, &t), KILN_ERR_INVALID_ARGUMENT);
}

KN_TEST(quant_casts_of_new_types) {
    /* float -> int4 truncates and wraps (as numpy/ml_dtypes); NaN -> 0 */
    const float f[6] = {-9.0f, 8.5f, 2.9f, -2.9f, NAN, 100.7f};
    uint8_t p[3] = {0};
    CHECK_STATUS(kn_ew_cast_n(KILN_DTYPE_FLOAT, f, KILN_DTYPE_INT4, p, 6, 1), KILN_OK);
    const int want_i4[6] = {7, -8, 2, -2, 0, 4};
    int8_t back[6];
    CHECK_STATUS(kn_ew_cast_n(KILN_DTYPE_INT4, p, KILN_DTYPE_INT8, back, 6, 1), KILN_OK);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(back[i], want_i4[i]);

    /* float4e2m1: round half to even, saturate at 6, keep the sign of zero */
    const float g[8] = {0.25f, 0.75f, 2.5f, 3.5f, 5.0f, 7.0f, -1e9f, -0.0f};
    const float want_f4[8] = {0.0f, 1.0f, 2.0f, 4.0f, 4.0f, 6.0f, -6.0f, -0.0f};
    uint8_t q[4];
    CHECK_STATUS(kn_ew_cast_n(KILN_DTYPE_FLOAT, g, KILN_DTYPE_FLOAT4E2M1, q, 8, 1), KILN_OK);
    float gb[8];
    CHECK_STATUS(kn_ew_cast_n(KILN_DTYPE_FLOAT4E2M1, q, KILN_DTYPE_FLOAT, gb, 8, 1), KILN_OK);
    for (int i = 0; i < 8; i++) CHECK_MSG(gb[i] == want_f4[i], "float4 of %g is %g, want %g", g[i], gb[i], want_f4[i]);
    CHECK(signbit(gb[7]));

    /* float8e8m0 (round up by default): 0 -> 2^-127, 0.124 -> 0.125, 1.1 -> 2, inf -> NaN */
    const float e[4] = {0.0f, 0.124f, 1.1f, INFINITY};
    uint8_t eb[4];
    CHECK_STATUS(kn_ew_cast_n(KILN_DTYPE_FLOAT, e, KILN_DTYPE_FLOAT8E8M0, eb, 4, 1), KILN_OK);
    CHECK_EQ_INT(eb[0], 0);
    CHECK_EQ_INT(eb[1], 124);
    CHECK_EQ_INT(eb[2], 128);
    CHECK_EQ_INT(eb[3], 255);
    float ef[4];
    CHECK_STATUS(kn_ew_cast_n(KILN_DTYPE_FLOAT8E8M0, eb, KILN_DTYPE_FLOAT, ef, 4, 1), KILN_OK);
    CHECK(ef[1] == 0.125f && ef[2] == 2.0f && isnan(ef[3]));

    /* strings and packed types do not meet */
    CHECK(!kn_ew_cast_supported(KILN_DTYPE_STRING, KILN_DTYPE_INT4));
    CHECK(kn_ew_cast_supported(KILN_DTYPE_UINT2, KILN_DTYPE_FLOAT16));
}

static kn_node node_with(kn_attr *attrs, int n) {
    kn_node nd = {0};
    nd.name = "q";
    nd.op_type = "QuantizeLinear";
    nd.domain = "";
    nd.opset = 21;
    nd.attrs = attrs;
    nd.n_attrs = n;
    return nd;
}

KN_TEST(quant_layouts) {
    char why[512];
    kn_quant_layout l;
    int64_t x[3] = {4, 6, 5};
    kn_attr a[2] = {{.name = "axis", .type = KN_ATTR_INT, .i = 1}, {.name = "block_size", .type = KN_ATTR_INT, .i = 4}};
    kn_node per_axis = node_with(a, 1), blocked = node_with(a, 2);
    int64_t s1[1] = {6};
    CHECK_STATUS(kn_quant_layout_get(&per_axis, 3, x, 1, s1, &l, why, sizeof why), KILN_OK);
    CHECK_EQ_INT(l.mode, KN_QUANT_AXIS);
    CHECK_EQ_INT(kn_quant_index(&l, 5 * 6 + 5 * 2 + 3), 2); /* element [1,2,3] */
    int64_t s0[1] = {1};
    CHECK_STATUS(kn_quant_layout_get(&blocked, 3, x, 1, s0, &l, why, sizeof why), KILN_OK);
    CHECK_EQ_INT(l.mode, KN_QUANT_TENSOR);
    /* blocks of 4 along a dimension of 6: 2 blocks, the last one short */
    int64_t sb[3] = {4, 2, 5};
    CHECK_STATUS(kn_quant_layout_get(&blocked, 3, x, 3, sb, &l, why, sizeof why), KILN_OK);
    CHECK_EQ_INT(l.mode, KN_QUANT_BLOCKED);
    CHECK_EQ_INT(kn_quant_index(&l, 1 * 30 + 5 * 5 + 4), 1 * 10 + 1 * 5 + 4); /* [1,5,4] -> [1,1,4] */
    CHECK_EQ_INT(kn_quant_index(&l, 1 * 30 + 3 * 5 + 4), 1 * 10 + 0 * 5 + 4); /* [1,3,4] -> [1,0,4] */
    int64_t bad[3] = {4, 3, 5};
    CHECK_STATUS(kn_quant_layout_get(&blocked, 3, x, 3, bad, &l, why, sizeof why), KILN_ERR_SHAPE);
    CHECK_MSG(strstr(why, "must be 2") != NULL, "message: %s", why);
    int64_t s4[1] = {4};
    CHECK_STATUS(kn_quant_layout_get(&per_axis, 3, x, 1, s4, &l, why, sizeof why), KILN_ERR_SHAPE);
}

static int full_match(const char *pattern, const char *s) {
    regex_t re;
    char why[256];
    if (kn_regex_compile(pattern, &re, why, sizeof why) != KILN_OK) return -1;
    int r = regexec(&re, s, 0, NULL, 0) == 0;
    regfree(&re);
    return r;
}

KN_TEST(text_regex_translation) {
    CHECK_EQ_INT(full_match("www\\.[\\w.-]+\\.\\bcom\\b", "www.google.com"), 1);
    CHECK_EQ_INT(full_match("www\\.[\\w.-]+\\.\\bcom\\b", "www.bbc.co.uk"), 0);
    CHECK_EQ_INT(full_match("(\\W|^)[\\w.\\-]{0,25}@(yahoo|gmail)\\.com(\\W|$)", "account@gmail.com"), 1);
    CHECK_EQ_INT(full_match("\\d+", "123"), 1);
    CHECK_EQ_INT(full_match("\\d+", "12a"), 0); /* a full match, not a search */
    CHECK_EQ_INT(full_match("(?:ab)+?c", "ababc"), 1);
    CHECK_EQ_INT(full_match("(?i)hello", "HeLLo"), 1);
    CHECK_EQ_INT(full_match("a\\tb", "a\tb"), 1);
    CHECK_EQ_INT(full_match("[^\\s]+", "no-spaces"), 1);
    CHECK_EQ_INT(full_match("[^\\s]+", "a space"), 0);
    CHECK_EQ_INT(full_match("\\pL+", "abc"), -1); /* unsupported: an error, not a wrong answer */
}
