/* Run-time CPU dispatch (backend/cpu/isa.h): the choice of level from the CPU's features, the
 * build's levels and KILN_CPU_ISA / KILN_CPU_MASK, and that the level chosen is the one running.
 * tests/cli/test_cli.sh checks that a refused level fails a whole run with the message. */
#include "backend/cpu/isa.h"
#include "backend/cpu/sgemm.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

#define ALL_LEVELS ((1u << KN_ISA_COUNT) - 1)

KN_TEST(cpu_isa_auto_takes_the_best_level_the_cpu_runs) {
    char why[512] = "";
    kn_cpu_isa l;
    const unsigned v3 = kn_cpu_isa_needs(KN_ISA_AVX2), v4 = kn_cpu_isa_needs(KN_ISA_AVX512);
    CHECK(kn_cpu_isa_resolve(NULL, v4 | KN_CPUF_AVX512BF16, ALL_LEVELS, 0, &l, why, sizeof why) && l == KN_ISA_AVX512);
    CHECK(kn_cpu_isa_resolve("", v3, ALL_LEVELS, 0, &l, why, sizeof why) && l == KN_ISA_AVX2);
    CHECK(kn_cpu_isa_resolve("auto", 0, ALL_LEVELS, 0, &l, why, sizeof why) && l == KN_ISA_BASELINE);
    /* AVX-512 without one of its parts is the avx2 level; AVX2 without FMA the baseline */
    CHECK(kn_cpu_isa_resolve(NULL, v4 & ~KN_CPUF_AVX512VL, ALL_LEVELS, 0, &l, why, sizeof why) && l == KN_ISA_AVX2);
    CHECK(kn_cpu_isa_resolve(NULL, v3 & ~KN_CPUF_FMA, ALL_LEVELS, 0, &l, why, sizeof why) && l == KN_ISA_BASELINE);
}

KN_TEST(cpu_isa_forcing_a_lower_level) {
    char why[512] = "";
    kn_cpu_isa l;
    const unsigned v4 = kn_cpu_isa_needs(KN_ISA_AVX512);
    CHECK(kn_cpu_isa_resolve("avx2", v4, ALL_LEVELS, 0, &l, why, sizeof why) && l == KN_ISA_AVX2);
    CHECK(kn_cpu_isa_resolve("baseline", v4, ALL_LEVELS, 0, &l, why, sizeof why) && l == KN_ISA_BASELINE);
    CHECK(kn_cpu_isa_resolve("avx512", v4, ALL_LEVELS, 0, &l, why, sizeof why) && l == KN_ISA_AVX512);
}

KN_TEST(cpu_isa_refuses_a_level_the_cpu_lacks) {
    char why[512] = "";
    kn_cpu_isa l = KN_ISA_COUNT;
    const unsigned v3 = kn_cpu_isa_needs(KN_ISA_AVX2), v4 = kn_cpu_isa_needs(KN_ISA_AVX512);
    /* an AVX2 machine asked for avx512: refused, naming what is missing; the best usable stays */
    CHECK(!kn_cpu_isa_resolve("avx512", v3, ALL_LEVELS, 0, &l, why, sizeof why));
    CHECK_EQ_INT(l, KN_ISA_AVX2);
    CHECK_MSG(strstr(why, "KILN_CPU_ISA=avx512") && strstr(why, "avx512f") && strstr(why, "avx512bw") &&
                  strstr(why, "baseline, avx2") && !strstr(why, "KILN_CPU_MASK"),
              "%s", why);
    /* a feature hidden by KILN_CPU_MASK says so */
    CHECK(!kn_cpu_isa_resolve("avx512", v4 & ~KN_CPUF_AVX512BW, ALL_LEVELS, KN_CPUF_AVX512BW, &l, why, sizeof why));
    CHECK_MSG(strstr(why, "lacks avx512bw (hidden by KILN_CPU_MASK)"), "%s", why);
    /* a baseline machine asked for avx2 */
    CHECK(!kn_cpu_isa_resolve("avx2", KN_CPUF_SSE42, ALL_LEVELS, 0, &l, why, sizeof why));
    CHECK_EQ_INT(l, KN_ISA_BASELINE);
    CHECK_MSG(strstr(why, "avx2") && strstr(why, "fma"), "%s", why);
    /* not a level at all */
    CHECK(!kn_cpu_isa_resolve("avx9000", v4, ALL_LEVELS, 0, &l, why, sizeof why));
    CHECK_MSG(strstr(why, "'avx9000' is not a CPU level"), "%s", why);
}

KN_TEST(cpu_isa_native_build_has_one_level) {
    char why[512] = "";
    kn_cpu_isa l;
    /* built for avx512 only (-march=native): that level, whatever cpuid says (the whole build uses it) */
    CHECK(kn_cpu_isa_resolve(NULL, 0, 1u << KN_ISA_AVX512, 0, &l, why, sizeof why) && l == KN_ISA_AVX512);
    CHECK(kn_cpu_isa_resolve("avx512", 0, 1u << KN_ISA_AVX512, 0, &l, why, sizeof why) && l == KN_ISA_AVX512);
    CHECK(!kn_cpu_isa_resolve("avx2", kn_cpu_isa_needs(KN_ISA_AVX512), 1u << KN_ISA_AVX512, 0, &l, why, sizeof why));
    CHECK_MSG(strstr(why, "has the CPU kernels of avx512 only") && strstr(why, "KILN_NATIVE=OFF"), "%s", why);
}

KN_TEST(cpu_isa_mask_names) {
    char why[512] = "";
    unsigned m;
    CHECK(kn_cpu_features_parse("avx512bw,fma", &m, why, sizeof why) && m == (KN_CPUF_AVX512BW | KN_CPUF_FMA));
    CHECK(kn_cpu_features_parse("", &m, why, sizeof why) && m == 0);
    CHECK(!kn_cpu_features_parse("avx512bw,sse9", &m, why, sizeof why));
    CHECK_MSG(strstr(why, "'sse9'"), "%s", why);
    char s[256];
    kn_cpu_features_str(KN_CPUF_AVX2 | KN_CPUF_AVX512BF16, s, sizeof s);
    CHECK_MSG(!strcmp(s, "avx2,avx512bf16"), "%s", s);
}

/* The level in use is the one asked for (the unit suite runs with each KILN_CPU_ISA), its features
 * are there, and the GEMM that runs is that level's. */
KN_TEST(cpu_isa_active_level_runs) {
    const kn_cpu_isa l = kn_cpu_isa_active();
    CHECK(kn_cpu_isa_name(l) != NULL);
    CHECK((kn_cpu_isa_built() >> l) & 1u);
    CHECK_STATUS(kn_cpu_isa_check(), KILN_OK);
    const char *want = getenv("KILN_CPU_ISA");
    if (want && *want && strcmp(want, "auto")) CHECK_MSG(!strcmp(want, kn_cpu_isa_name(l)), "%s", kn_cpu_isa_describe());
    if (kn_cpu_isa_dispatch()) {
        CHECK_MSG((kn_cpu_features() & kn_cpu_isa_needs(l)) == kn_cpu_isa_needs(l), "%s", kn_cpu_isa_describe());
        static const char *const gemm[KN_ISA_COUNT] = {"generic", "avx2", "avx512"};
        CHECK_MSG(!strcmp(kn_sgemm_isa(), gemm[l]), "level %s, GEMM micro-kernel %s", kn_cpu_isa_name(l),
                  kn_sgemm_isa());
    }
    CHECK(strstr(kn_cpu_isa_describe(), kn_cpu_isa_name(l)) == kn_cpu_isa_describe());
}
