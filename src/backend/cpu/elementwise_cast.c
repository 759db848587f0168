/* Cast and CastLike: conversions among the numeric types, bool, float16/bfloat16, the four
 * float8 types and strings.
 *
 * Semantics (numpy's astype, which the ONNX reference uses): float -> integer truncates toward
 * zero and wraps into narrow types; values outside int64 (and NaN) become INT64_MIN's bits (the
 * x86 "integer indefinite" result; the spec leaves them undefined). Anything -> bool is != 0
 * (NaN is true). float8 targets round to nearest even; with saturate=1 out-of-range values
 * (and infinities) clamp to the largest finite value, else they become inf or NaN as the format
 * allows. */
#include "backend/cpu/elementwise_impl.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

/* ------------------------------------------------------------------ float8 */

typedef struct f8_fmt {
    int mbits;   /* mantissa bits */
    int bias;
    double max;  /* largest finite value */
    bool fnuz;   /* no -0 and no inf; 0x80 is the only NaN */
    bool inf;    /* has infinities (E5M2) */
} f8_fmt;

static const f8_fmt *f8_format(kiln_dtype t) {
    static const f8_fmt e4m3fn = {3, 7, 448.0, false, false};
    static const f8_fmt e4m3fnuz = {3, 8, 240.0, true, false};
    static const f8_fmt e5m2 = {2, 15, 57344.0, false, true};
    static const f8_fmt e5m2fnuz = {2, 16, 57344.0, true, false};
    switch (t) {
    case KILN_DTYPE_FLOAT8E4M3FN: return &e4m3fn;
    case KILN_DTYPE_FLOAT8E4M3FNUZ: return &e4m3fnuz;
    case KILN_DTYPE_FLOAT8E5M2: return &e5m2;
    case KILN_DTYPE_FLOAT8E5M2FNUZ: return &e5m2fnuz;
    default: return NULL;
    }
}

static bool is_f8(kiln_dtype t) { return f8_format(t) != NULL; }

static uint8_t f8_nan(const f8_fmt *f, unsigned s) {
    if (f->fnuz) return 0x80;
    return (uint8_t)((f->inf ? 0x7e : 0x7f) | s);
}

static uint8_t f8_overflow(const f8_fmt *f, unsigned s) {
    if (f->inf) return (uint8_t)(0x7c | s);
    return f8_nan(f, s);
}

static uint8_t f32_to_f8(float v, const f8_fmt *f, int saturate) {
    unsigned s = signbit(v) ? 0x80u : 0u;
    if (isnan(v)) return f8_nan(f, s);
    double a = fabs((double)v);
    if (saturate && a > f->max) a = f->max;
    if (isinf(a)) return f8_overflow(f, s);
    if (a == 0.0) return f->fnuz ? 0 : (uint8_t)s;
    int e;
    frexp(a, &e);
    int E = e - 1; /* a = 1.m * 2^E */
    int emin = 1 - f->bias;
    if (E < emin) E = emin; /* subnormal: fixed scale */
    double q = nearbyint(ldexp(a, f->mbits - E)); /* in units of the last mantissa bit, half to even */
    double val = ldexp(q, E - f->mbits);
    if (val > f->max) return f8_overflow(f, s); /* with saturate, a <= max already */
    int m = (int)q, one = 1 << f->mbits;
    if (m >= 2 * one) { /* the rounding carried into the next binade */
        m >>= 1;
        E++;
    }
    unsigned code;
    if (m < one) code = (unsigned)m; /* subnormal (or zero) */
    else code = ((unsigned)(E + f->bias) << f->mbits) | (unsigned)(m - one);
    code |= s;
    if (f->fnuz && code == 0x80) code = 0; /* no negative zero */
    return (uint8_t)code;
}

static float f8_to_f32(uint8_t b, const f8_fmt *f) {
    unsigned s = b & 0x80u, ebits = 7 - (unsigned)f->mbits;
    unsigned ex = (b >> f->mbits) & ((1u << ebits) - 1), m = b & ((1u << f->mbits) - 1);
    if (f->fnuz) {
        if (b == 0x80) return NAN;
    } else if (f->inf) {
        if (ex == (1u << ebits) - 1) return m ? NAN : (s ? -INFINITY : INFINITY);
    } else if ((b & 0x7f) == 0x7f) {
        return NAN;
    }
    double v = ex == 0 ? ldexp((double)m, 1 - f->bias - f->mbits)
                       : ldexp((double)(m + (1u << f->mbits)), (int)ex - f->bias - f->mbits);
    return (float)(s ? -v : v);
}

/* ------------------------------------------------------------------ e8m0, float4, packed ints */

/* float8e8m0: an unsigned power of two 2^(e-127); 0xff is NaN. Encoding follows the ONNX
 * reference: the float32 exponent field, rounded by round_mode from the dropped mantissa. */
enum { E8_UP = 0, E8_DOWN = 1, E8_NEAREST = 2 };

static float e8m0_to_f32(uint8_t b) { return b == 0xff ? NAN : ldexpf(1.0f, (int)b - 127); }

static uint8_t f32_to_e8m0(float v, int saturate, int mode) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    unsigned e = (bits >> 23) & 0xff;
    if (e == 0xff) return 0xff; /* inf and NaN */
    bool up = false;
    if (mode == E8_UP) {
        up = (bits & 0x7fffff) != 0;
    } else if (mode == E8_NEAREST) {
        bool g = bits & 0x400000, r = bits & 0x200000, st = (bits & 0x1fffff) != 0;
        up = g && (r || st || e > 0);
    }
    if (up && saturate && e == 0xfe) up = false;
    return (uint8_t)(e + (up ? 1 : 0)); /* 0xfe + 1 = 0xff: NaN when not saturating */
}

/* float4e2m1: sign, 2 exponent bits (bias 1), 1 mantissa bit: +-{0, .5, 1, 1.5, 2, 3, 4, 6}; no
 * inf or NaN. Round to nearest even; values beyond 6 (and infinities) clamp to 6. NaN becomes
 * the code ml_dtypes (the reference) gives: 0x8 for +NaN, 0x0 for -NaN. */
static const float f4_mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

static float f4_to_f32(unsigned code) { return (code & 8) ? -f4_mag[code & 7] : f4_mag[code & 7]; }

static unsigned f32_to_f4(float v) {
    unsigned s = signbit(v) ? 8u : 0u;
    if (isnan(v)) return 8u ^ s;
    double a = fabs((double)v);
    if (a >= 6.0) return 7u | s;
    if (a == 0.0) return s;
    int e;
    frexp(a, &e);
    int E = e - 1;
    if (E < 0) E = 0; /* subnormal: steps of 0.5 */
    int m = (int)nearbyint(ldexp(a, 1 - E)); /* half to even */
    if (m >= 4) {
        m >>= 1;
        E++;
    }
    if (E > 2) return 7u | s;
    unsigned code = m < 2 ? (unsigned)m : ((unsigned)(E + 1) << 1) | (unsigned)(m - 2);
    return code | s;
}

static bool is_packed_int(kiln_dtype t) {
    return t == KILN_DTYPE_INT4 || t == KILN_DTYPE_UINT4 || t == KILN_DTYPE_INT2 || t == KILN_DTYPE_UINT2;
}

/* Element i of packed data as int64 (signed types sign-extended). */
static int64_t packed_int(kiln_dtype t, const void *src, int64_t i) {
    unsigned c = kn_packed_get(src, t, i);
    int bits = kn_dtype_bits(t);
    if ((t == KILN_DTYPE_INT4 || t == KILN_DTYPE_INT2) && (c >> (bits - 1))) return (int64_t)c - (1 << bits);
    return c;
}

/* ------------------------------------------------------------------ loads and stores */

/* Reads n elements of a numeric/bool/half/float8 type as double. */
static void load_f64(kiln_dtype t, const void *src, double *d, int64_t n) {
#define LOAD(T)                                                                                    \
    do {                                                                                           \
        const T *s = src;                                                                          \
        for (int64_t i = 0; i < n; i++) d[i] = (double)s[i];                                       \
    } while (0)
    switch (t) {
    case KILN_DTYPE_FLOAT: LOAD(float); break;
    case KILN_DTYPE_DOUBLE: LOAD(double); break;
    case KILN_DTYPE_INT8: LOAD(int8_t); break;
    case KILN_DTYPE_INT16: LOAD(int16_t); break;
    case KILN_DTYPE_INT32: LOAD(int32_t); break;
    case KILN_DTYPE_INT64: LOAD(int64_t); break;
    case KILN_DTYPE_UINT8: LOAD(uint8_t); break;
    case KILN_DTYPE_UINT16: LOAD(uint16_t); break;
    case KILN_DTYPE_UINT32: LOAD(uint32_t); break;
    case KILN_DTYPE_UINT64: LOAD(uint64_t); break;
    case KILN_DTYPE_BOOL: {
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = s[i] ? 1.0 : 0.0;
        break;
    }
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        float buf[KN_EW_CHUNK];
        for (int64_t b = 0; b < n; b += KN_EW_CHUNK) {
            int64_t m = n - b < KN_EW_CHUNK ? n - b : KN_EW_CHUNK;
            kn_ew_half_to_f32(t, (const uint16_t *)src + b, buf, m);
            for (int64_t i = 0; i < m; i++) d[b + i] = buf[i];
        }
        break;
    }
    case KILN_DTYPE_FLOAT8E8M0: {
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = e8m0_to_f32(s[i]);
        break;
    }
    default: {
        const f8_fmt *f = f8_format(t);
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = f ? f8_to_f32(s[i], f) : NAN;
        break;
    }
    }
#undef LOAD
}

/* Reads n elements of an integer/bool type as int64 (uint64 keeps its bits). */
static void load_i64(kiln_dtype t, const void *src, int64_t *d, int64_t n) {
#define LOAD(T)                                                                                    \
    do {                                                                                           \
        const T *s = src;                                                                          \
        for (int64_t i = 0; i < n; i++) d[i] = (int64_t)s[i];                                      \
    } while (0)
    switch (t) {
    case KILN_DTYPE_INT8: LOAD(int8_t); break;
    case KILN_DTYPE_INT16: LOAD(int16_t); break;
    case KILN_DTYPE_INT32: LOAD(int32_t); break;
    case KILN_DTYPE_INT64: LOAD(int64_t); break;
    case KILN_DTYPE_UINT8: LOAD(uint8_t); break;
    case KILN_DTYPE_UINT16: LOAD(uint16_t); break;
    case KILN_DTYPE_UINT32: LOAD(uint32_t); break;
    case KILN_DTYPE_UINT64: LOAD(uint64_t); break;
    case KILN_DTYPE_BOOL: {
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) d[i] = s[i] != 0;
        break;
    }
    default: break;
    }
#undef LOAD
}

/* Writes n int64 values (wrapping into narrow types). */
static void store_i64(kiln_dtype t, const int64_t *d, void *dst, int64_t n) {
#define STORE(T)                                                                                   \
    do {                                                                                           \
        T *o = dst;                                                                                \
        for (int64_t i = 0; i < n; i++) o[i] = (T)(uint64_t)d[i];                                  \
    } while (0)
    switch (t) {
    case KILN_DTYPE_INT8: STORE(int8_t); break;
    case KILN_DTYPE_INT16: STORE(int16_t); break;
    case KILN_DTYPE_INT32: STORE(int32_t); break;
    case KILN_DTYPE_INT64: STORE(int64_t); break;
    case KILN_DTYPE_UINT8: STORE(uint8_t); break;
    case KILN_DTYPE_UINT16: STORE(uint16_t); break;
    case KILN_DTYPE_UINT32: STORE(uint32_t); break;
    case KILN_DTYPE_UINT64: STORE(uint64_t); break;
    case KILN_DTYPE_BOOL: {
        uint8_t *o = dst;
        for (int64_t i = 0; i < n; i++) o[i] = d[i] != 0;
        break;
    }
    default: break;
    }
#undef STORE
}

/* double -> int64 without undefined behaviour: truncation, INT64_MIN outside the range */
static inline int64_t d2i64(double v) {
    if (v > -9223372036854775808.0 && v < 9223372036854775808.0) return (int64_t)v;
    return INT64_MIN;
}
static inline uint64_t d2u64(double v) {
    if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) return (uint64_t)v;
    return (uint64_t)d2i64(v);
}

/* Writes n doubles to a numeric/bool/half/float8 type. */
static void store_f64(kiln_dtype t, const double *d, void *dst, int64_t n, int saturate) {
#define STORE_INT(T)                                                                               \
    do {                                                                                           \
        T *o = dst;                                                                                \
        for (int64_t i = 0; i < n; i++) o[i] = (T)(uint64_t)d2i64(d[i]);                           \
    } while (0)
    switch (t) {
    case KILN_DTYPE_FLOAT: {
        float *o = dst;
        for (int64_t i = 0; i < n; i++) o[i] = (float)d[i];
        break;
    }
    case KILN_DTYPE_DOUBLE: memcpy(dst, d, (size_t)n * sizeof(double)); break;
    case KILN_DTYPE_INT8: STORE_INT(int8_t); break;
    case KILN_DTYPE_INT16: STORE_INT(int16_t); break;
    case KILN_DTYPE_INT32: STORE_INT(int32_t); break;
    case KILN_DTYPE_INT64: STORE_INT(int64_t); break;
    case KILN_DTYPE_UINT8: STORE_INT(uint8_t); break;
    case KILN_DTYPE_UINT16: STORE_INT(uint16_t); break;
    case KILN_DTYPE_UINT32: STORE_INT(uint32_t); break;
    case KILN_DTYPE_UINT64: {
        uint64_t *o = dst;
        for (int64_t i = 0; i < n; i++) o[i] = d2u64(d[i]);
        break;
    }
    case KILN_DTYPE_BOOL: {
        uint8_t *o = dst;
        for (int64_t i = 0; i < n; i++) o[i] = d[i] != 0.0;
        break;
    }
    case KILN_DTYPE_FLOAT16:
    case KILN_DTYPE_BFLOAT16: {
        float buf[KN_EW_CHUNK];
        for (int64_t b = 0; b < n; b += KN_EW_CHUNK) {
            int64_t m = n - b < KN_EW_CHUNK ? n - b : KN_EW_CHUNK;
            for (int64_t i = 0; i < m; i++) buf[i] = (float)d[b + i];
            kn_ew_f32_to_half(t, buf, (uint16_t *)dst + b, m);
        }
        break;
    }
    case KILN_DTYPE_FLOAT8E8M0: {
        uint8_t *o = dst;
        for (int64_t i = 0; i < n; i++) o[i] = f32_to_e8m0((float)d[i], saturate, E8_UP);
        break;
    }
    default: {
        const f8_fmt *f = f8_format(t);
        uint8_t *o = dst;
        if (f)
            for (int64_t i = 0; i < n; i++) o[i] = f32_to_f8((float)d[i], f, saturate);
        break;
    }
    }
#undef STORE_INT
}

/* ------------------------------------------------------------------ strings */

/* Shortest text that reads back to the same value, as numpy's str() writes it ("1.0", "0.1",
 * "1e+08", "nan"): positional for magnitudes in [1e-4, max_positional), else scientific.
 * kind: the value's type (DOUBLE, FLOAT, FLOAT16, BFLOAT16), which the text must round-trip to. */
static bool round_trips(const char *text, double v, kiln_dtype kind) {
    switch (kind) {
    case KILN_DTYPE_DOUBLE: return strtod(text, NULL) == v;
    case KILN_DTYPE_FLOAT16: return kn_f32_to_f16(strtof(text, NULL)) == kn_f32_to_f16((float)v);
    case KILN_DTYPE_BFLOAT16: return kn_f32_to_bf16(strtof(text, NULL)) == kn_f32_to_bf16((float)v);
    default: return strtof(text, NULL) == (float)v;
    }
}

/* Digits d[0..n) and decimal exponent e (value = 0.d * 10^(e+1), i.e. d[0] is the 10^e digit)
 * written out in numpy's style. */
static void write_digits(bool neg, const char *d, int n, int e, bool positional, char *buf, size_t cap) {
    char out[400];
    size_t k = 0;
    if (neg) out[k++] = '-';
    if (positional) {
        if (e < 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int z = 0; z < -e - 1; z++) out[k++] = '0';
            for (int i = 0; i < n; i++) out[k++] = d[i];
        } else {
            for (int i = 0; i <= e; i++) out[k++] = i < n ? d[i] : '0';
            out[k++] = '.';
            if (n > e + 1)
                for (int i = e + 1; i < n; i++) out[k++] = d[i];
            else
                out[k++] = '0';
        }
        out[k] = 0;
    } else {
        out[k++] = d[0];
        if (n > 1) {
            out[k++] = '.';
            for (int i = 1; i < n; i++) out[k++] = d[i];
        }
        snprintf(out + k, sizeof out - k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    snprintf(buf, cap, "%s", out);
}

/* The shortest digit string that reads back as v (the closer of the two p-digit neighbours when
 * both do), as numpy's str() prints floats: "1.0", "0.1", "1e+08", "5.960464477539063e-08";
 * positional for magnitudes in [1e-4, max_positional). */
static void format_real(double v, kiln_dtype kind, double max_positional, char *buf, size_t cap) {
    if (isnan(v)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, cap, v < 0 ? "-inf" : "inf");
        return;
    }
    bool neg = signbit(v);
    double a = fabs(v);
    if (a == 0.0) {
        snprintf(buf, cap, neg ? "-0.0" : "0.0");
        return;
    }
    char full[64];
    snprintf(full, sizeof full, "%.25e", a); /* d.ddd...e+XX, more digits than any double needs */
    char digits[32];
    int nd = 0;
    for (const char *q = full; *q && *q != 'e' && nd < 26; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int e10 = atoi(strchr(full, 'e') + 1);
    char best[32];
    int best_n = 0, best_e = e10;
    for (int p = 1; p <= 17; p++) {
        /* lo: the first p digits; hi: lo plus one in the last place */
        char lo[32], hi[32], text[64];
        memcpy(lo, digits, (size_t)p);
        memcpy(hi, digits, (size_t)p);
        int e_hi = e10, i = p - 1;
        while (i >= 0 && hi[i] == '9') hi[i--] = '0';
        if (i >= 0) {
            hi[i]++;
        } else { /* 99..9 + 1 = 100..0 */
            memmove(hi + 1, hi, (size_t)p - 1);
            hi[0] = '1';
            e_hi++;
        }
        lo[p] = hi[p] = 0;
        snprintf(text, sizeof text, "%.1s.%se%d", lo, lo + 1, e10);
        bool ok_lo = round_trips(text, a, kind);
        snprintf(text, sizeof text, "%.1s.%se%d", hi, hi + 1, e_hi);
        bool ok_hi = round_trips(text, a, kind);
        if (!ok_lo && !ok_hi) continue;
        /* both read back: the nearer one by the dropped digits, a tie to the even last digit */
        int cmp = 0; /* dropped digits against 5000... */
        for (int j = p; j < nd && !cmp; j++) {
            int want = j == p ? 5 : 0;
            cmp = digits[j] - '0' > want ? 1 : (digits[j] - '0' < want ? -1 : 0);
        }
        if (p >= nd) cmp = -1;
        bool nearer_hi = cmp > 0 || (cmp == 0 && (lo[p - 1] - '0') % 2 == 1);
        bool use_hi = ok_hi && (!ok_lo || nearer_hi);
        memcpy(best, use_hi ? hi : lo, (size_t)p);
        best_n = p;
        best_e = use_hi ? e_hi : e10;
        break;
    }
    if (best_n == 0) { /* cannot happen for 17 digits; keep the full expansion */
        memcpy(best, digits, 17);
        best_n = 17;
    }
    while (best_n > 1 && best[best_n - 1] == '0') best_n--; /* "1.50" -> "1.5" */
    write_digits(neg, best, best_n, best_e, a >= 1e-4 && a < max_positional, buf, cap);
}

static kiln_status to_string(kiln_dtype from, const void *src, char **dst, int64_t n) {
    char buf[64];
    for (int64_t i = 0; i < n; i++) {
        switch (from) {
        case KILN_DTYPE_FLOAT: format_real(((const float *)src)[i], from, 1e6, buf, sizeof buf); break;
        case KILN_DTYPE_DOUBLE: format_real(((const double *)src)[i], from, 1e16, buf, sizeof buf); break;
        case KILN_DTYPE_FLOAT16:
        case KILN_DTYPE_BFLOAT16: {
            float f;
            kn_ew_half_to_f32(from, (const uint16_t *)src + i, &f, 1);
            format_real(f, from, from == KILN_DTYPE_FLOAT16 ? 1e3 : 1e6, buf, sizeof buf);
            break;
        }
        case KILN_DTYPE_BOOL: snprintf(buf, sizeof buf, "%s", ((const uint8_t *)src)[i] ? "True" : "False"); break;
        case KILN_DTYPE_UINT64: snprintf(buf, sizeof buf, "%llu", (unsigned long long)((const uint64_t *)src)[i]); break;
        default:
            if (kn_dtype_is_int(from)) {
                int64_t v = 0;
                load_i64(from, (const char *)src + i * (int64_t)kiln_dtype_size(from), &v, 1);
                snprintf(buf, sizeof buf, "%lld", (long long)v);
            } else {
                double v = 0;
                load_f64(from, (const char *)src + i * (int64_t)kiln_dtype_size(from), &v, 1);
                format_real(v, KILN_DTYPE_FLOAT, 1e6, buf, sizeof buf);
            }
            break;
        }
        char *s = strdup(buf);
        if (!s) return KN_OOM();
        free(dst[i]);
        dst[i] = s;
    }
    return KILN_OK;
}

static kiln_status from_string(char *const *src, kiln_dtype to, void *dst, int64_t n, int saturate) {
    size_t es = kiln_dtype_size(to);
    for (int64_t i = 0; i < n; i++) {
        const char *s = src[i] ? src[i] : "";
        while (isspace((unsigned char)*s)) s++;
        char *end;
        void *o = (char *)dst + i * (int64_t)es;
        if (to == KILN_DTYPE_BOOL) {
            /* "True"/"False" as numpy prints them, else a number */
            uint8_t v;
            if (!strcasecmp(s, "true")) v = 1;
            else if (!strcasecmp(s, "false")) v = 0;
            else v = strtod(s, NULL) != 0.0;
            *(uint8_t *)o = v;
        } else if (kn_dtype_is_int(to)) {
            errno = 0;
            int64_t v;
            if (to == KILN_DTYPE_UINT64 && *s != '-') v = (int64_t)strtoull(s, &end, 10);
            else v = strtoll(s, &end, 10);
            if (end == s || *end == '.' || *end == 'e' || *end == 'E') v = d2i64(strtod(s, NULL));
            store_i64(to, &v, o, 1);
        } else {
            double v = strtod(s, &end);
            if (end == s) v = NAN;
            store_f64(to, &v, o, 1, saturate);
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ the conversion */

static bool castable(kiln_dtype t) {
    return t == KILN_DTYPE_BOOL || t == KILN_DTYPE_STRING || kn_dtype_is_int(t) || kn_dtype_is_float(t) ||
           is_f8(t) || t == KILN_DTYPE_FLOAT8E8M0 || kn_dtype_is_packed(t);
}

int kn_ew_cast_supported(kiln_dtype from, kiln_dtype to) {
    if (!castable(from) || !castable(to)) return 0;
    /* strings and packed types do not meet */
    if ((from == KILN_DTYPE_STRING && kn_dtype_is_packed(to)) || (to == KILN_DTYPE_STRING && kn_dtype_is_packed(from)))
        return 0;
    return 1;
}

/* Casts where either side is packed (elements are not byte-addressable): element by element in
 * chunks through int64 (integer to integer: exact, wrapping into the narrow type) or double. */
static void cast_packed(kiln_dtype from, const void *src, kiln_dtype to, void *dst, int64_t n, int saturate) {
    bool int_in = from == KILN_DTYPE_BOOL || kn_dtype_is_int(from) || is_packed_int(from);
    bool int_out = to == KILN_DTYPE_BOOL || kn_dtype_is_int(to) || is_packed_int(to);
    size_t si = kiln_dtype_size(from), so = kiln_dtype_size(to);
    for (int64_t b = 0; b < n; b += KN_EW_CHUNK) {
        int64_t m = n - b < KN_EW_CHUNK ? n - b : KN_EW_CHUNK;
        int64_t ib[KN_EW_CHUNK];
        double db[KN_EW_CHUNK];
        bool as_int = int_in && int_out;
        /* load */
        if (is_packed_int(from)) {
            for (int64_t i = 0; i < m; i++) ib[i] = packed_int(from, src, b + i);
            if (!as_int)
                for (int64_t i = 0; i < m; i++) db[i] = (double)ib[i];
        } else if (from == KILN_DTYPE_FLOAT4E2M1) {
            for (int64_t i = 0; i < m; i++) db[i] = f4_to_f32(kn_packed_get(src, from, b + i));
        } else if (as_int) {
            load_i64(from, (const char *)src + b * (int64_t)si, ib, m);
        } else {
            load_f64(from, (const char *)src + b * (int64_t)si, db, m);
        }
        /* store */
        if (is_packed_int(to)) {
            for (int64_t i = 0; i < m; i++) {
                int64_t v = as_int ? ib[i] : d2i64(db[i]); /* truncate, then wrap (NaN -> 0) */
                kn_packed_set(dst, to, b + i, (unsigned)((uint64_t)v & 0xf));
            }
        } else if (to == KILN_DTYPE_FLOAT4E2M1) {
            for (int64_t i = 0; i < m; i++) kn_packed_set(dst, to, b + i, f32_to_f4((float)db[i]));
        } else if (as_int) {
            store_i64(to, ib, (char *)dst + b * (int64_t)so, m);
        } else {
            store_f64(to, db, (char *)dst + b * (int64_t)so, m, saturate);
        }
    }
}

kiln_status kn_ew_cast_n(kiln_dtype from, const void *src, kiln_dtype to, void *dst, int64_t n,
                         int saturate) {
    if (n <= 0) return KILN_OK;
    if (!kn_ew_cast_supported(from, to))
        return kn_error(KILN_ERR_UNSUPPORTED, "cast from %s to %s is not supported", kiln_dtype_name(from),
                        kiln_dtype_name(to));
    if (to == KILN_DTYPE_STRING) {
        if (from == KILN_DTYPE_STRING) {
            char *const *s = src;
            char **d = dst;
            for (int64_t i = 0; i < n; i++) {
                char *c = strdup(s[i] ? s[i] : "");
                if (!c) return KN_OOM();
                free(d[i]);
                d[i] = c;
            }
            return KILN_OK;
        }
        return to_string(from, src, dst, n);
    }
    if (from == KILN_DTYPE_STRING) return from_string(src, to, dst, n, saturate);
    if (kn_dtype_is_packed(from) || kn_dtype_is_packed(to)) {
        if (from == to) memcpy(dst, src, kn_dtype_nbytes(from, n));
        else cast_packed(from, src, to, dst, n, saturate);
        return KILN_OK;
    }
    if (from == to) {
        memcpy(dst, src, (size_t)n * kiln_dtype_size(from));
        return KILN_OK;
    }
    /* direct paths for the common float conversions */
    if (from == KILN_DTYPE_FLOAT && kn_ew_is_half(to)) {
        kn_ew_f32_to_half(to, src, dst, n);
        return KILN_OK;
    }
    if (kn_ew_is_half(from) && to == KILN_DTYPE_FLOAT) {
        kn_ew_half_to_f32(from, src, dst, n);
        return KILN_OK;
    }
    if (from == KILN_DTYPE_FLOAT && to == KILN_DTYPE_DOUBLE) {
        const float *s = src;
        double *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i];
        return KILN_OK;
    }
    if (from == KILN_DTYPE_DOUBLE && to == KILN_DTYPE_FLOAT) {
        const double *s = src;
        float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];
        return KILN_OK;
    }
    if (from == KILN_DTYPE_INT64 && to == KILN_DTYPE_FLOAT) { /* one rounding, not two */
        const int64_t *s = src;
        float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];
        return KILN_OK;
    }
    if (is_f8(to) && (from == KILN_DTYPE_FLOAT || kn_ew_is_half(from))) {
        /* float8 from a float: one rounding from the float value */
        const f8_fmt *f = f8_format(to);
        float buf[KN_EW_CHUNK];
        uint8_t *d = dst;
        for (int64_t b = 0; b < n; b += KN_EW_CHUNK) {
            int64_t m = n - b < KN_EW_CHUNK ? n - b : KN_EW_CHUNK;
            if (from == KILN_DTYPE_FLOAT) memcpy(buf, (const float *)src + b, (size_t)m * sizeof(float));
            else kn_ew_half_to_f32(from, (const uint16_t *)src + b, buf, m);
            for (int64_t i = 0; i < m; i++) d[b + i] = f32_to_f8(buf[i], f, saturate);
        }
        return KILN_OK;
    }
    bool int_in = from == KILN_DTYPE_BOOL || kn_dtype_is_int(from);
    bool int_out = to == KILN_DTYPE_BOOL || kn_dtype_is_int(to);
    size_t si = kiln_dtype_size(from), so = kiln_dtype_size(to);
    for (int64_t b = 0; b < n; b += KN_EW_CHUNK) {
        int64_t m = n - b < KN_EW_CHUNK ? n - b : KN_EW_CHUNK;
        const char *s = (const char *)src + b * (int64_t)si;
        char *d = (char *)dst + b * (int64_t)so;
        if (int_in && int_out) { /* exact through int64 */
            int64_t buf[KN_EW_CHUNK];
            load_i64(from, s, buf, m);
            store_i64(to, buf, d, m);
        } else {
            double buf[KN_EW_CHUNK];
            load_f64(from, s, buf, m);
            store_f64(to, buf, d, m, saturate);
        }
    }
    return KILN_OK;
}

/* ------------------------------------------------------------------ kernels */

typedef struct cast_job {
    kiln_dtype from, to;
    const char *src;
    char *dst;
    int saturate;
} cast_job;

static void cast_range(void *arg, int64_t b, int64_t e) {
    const cast_job *j = arg;
    kn_ew_cast_n(j->from, j->src + b * (int64_t)kiln_dtype_size(j->from), j->to,
                 j->dst + b * (int64_t)kiln_dtype_size(j->to), e - b, j->saturate);
}

static kiln_status cast_run(kn_kernel_ctx *c, kiln_dtype to, const kn_ew_cast_prm *prm) {
    const kn_tensor *x = c->n_inputs > 0 ? c->in[0] : NULL;
    if (!x || x->kind != KN_VALUE_TENSOR) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input 0 must be a tensor");
    if (!kn_ew_cast_supported(x->dtype, to))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "cast from %s to %s is not supported",
                               kiln_dtype_name(x->dtype), kiln_dtype_name(to));
    kn_tensor *o;
    KN_TRY(kn_ctx_output(c, 0, to, x->rank, x->dims, &o));
    int saturate = prm->saturate;
    cast_job j = {x->dtype, to, x->data, o->data, saturate};
    int64_t n = kn_tensor_count(x);
    if (x->dtype == KILN_DTYPE_STRING || to == KILN_DTYPE_STRING) {
        /* allocation can fail: one thread, status checked */
        kiln_status s = kn_ew_cast_n(x->dtype, x->data, to, o->data, n, saturate);
        if (s != KILN_OK) return kn_kernel_error(c, s, "%s", kn_last_error());
        return KILN_OK;
    }
    if (to == KILN_DTYPE_FLOAT8E8M0) {
        int mode = prm->round_mode;
        if (mode < 0)
            return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "round_mode='%s' is not up, down or nearest",
                                   kn_attr_string(c->node, "round_mode", "up"));
        if (mode != E8_UP) { /* the default goes through kn_ew_cast_n below */
            size_t si = kiln_dtype_size(x->dtype);
            uint8_t *d = o->data;
            for (int64_t b = 0; b < n; b += KN_EW_CHUNK) {
                int64_t m = n - b < KN_EW_CHUNK ? n - b : KN_EW_CHUNK;
                double buf[KN_EW_CHUNK];
                if (kn_dtype_is_packed(x->dtype)) { /* decode elements b..b+m into doubles */
                    for (int64_t i = 0; i < m; i++)
                        buf[i] = x->dtype == KILN_DTYPE_FLOAT4E2M1 ? f4_to_f32(kn_packed_get(x->data, x->dtype, b + i))
                                                                  : (double)packed_int(x->dtype, x->data, b + i);
                } else {
                    load_f64(x->dtype, (const char *)x->data + b * (int64_t)si, buf, m);
                }
                for (int64_t i = 0; i < m; i++) d[b + i] = f32_to_e8m0((float)buf[i], saturate, mode);
            }
            return KILN_OK;
        }
    }
    if (kn_dtype_is_packed(x->dtype) || kn_dtype_is_packed(to)) {
        /* packed elements are not byte-addressable: one thread */
        return kn_ew_cast_n(x->dtype, x->data, to, o->data, n, saturate);
    }
    kn_parallel_for(c->pool, n, kn_parallel_grain_light(c->pool, KN_EW_GRAIN_LIGHT), cast_range, &j);
    return KILN_OK;
}

/* The `to` attribute: an element type number, or (opset < 6) its name such as "FLOAT". */
static kiln_status cast_target(kn_kernel_ctx *c, kiln_dtype *to) {
    const kn_attr *a = kn_node_attr(c->node, "to");
    if (!a) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "attribute 'to' is missing");
    if (a->type == KN_ATTR_STRING) {
        for (int t = 1; t < KILN_DTYPE_COUNT_; t++)
            if (!strcasecmp(a->s, kiln_dtype_name((kiln_dtype)t))) {
                *to = (kiln_dtype)t;
                return KILN_OK;
            }
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "to='%s' is not an element type", a->s);
    }
    if (!kn_dtype_is_valid((int)a->i))
        return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "to=%lld is not an element type kiln knows", (long long)a->i);
    *to = (kiln_dtype)a->i;
    return KILN_OK;
}

/* Cast and CastLike's attributes: saturate, round_mode, and Cast's `to` (left undefined when it
 * is missing or not an element type: the kernel's call says why). */
kiln_status kn_ew_cast_prepare(const kn_node *n, void *params) {
    kn_ew_cast_prm *p = params;
    p->saturate = (int)kn_attr_int(n, "saturate", 1);
    const char *rm = kn_attr_string(n, "round_mode", "up");
    p->round_mode = !strcmp(rm, "up") ? E8_UP : !strcmp(rm, "down") ? E8_DOWN : !strcmp(rm, "nearest") ? E8_NEAREST : -1;
    p->to = KILN_DTYPE_UNDEFINED;
    kn_kernel_ctx c = {.node = n};
    if (!strcmp(n->op_type, "Cast") && cast_target(&c, &p->to) != KILN_OK) {
        kn_clear_error();
        p->to = KILN_DTYPE_UNDEFINED;
    }
    return KILN_OK;
}

kiln_status kn_cpu_ew_Cast(kn_kernel_ctx *c) {
    kn_ew_cast_prm local;
    const kn_ew_cast_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_ew_cast_prepare, &local, (const void **)&prm));
    kiln_dtype to = prm->to;
    if (to == KILN_DTYPE_UNDEFINED) KN_TRY(cast_target(c, &to));
    return cast_run(c, to, prm);
}

kiln_status kn_cpu_ew_CastLike(kn_kernel_ctx *c) {
    if (c->n_inputs < 2 || !c->in[1]) return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "input 'target_type' is missing");
    kn_ew_cast_prm local;
    const kn_ew_cast_prm *prm;
    KN_TRY(kn_ctx_params(c, kn_ew_cast_prepare, &local, (const void **)&prm));
    return cast_run(c, c->in[1]->dtype, prm);
}
