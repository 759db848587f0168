/* Run-time CPU dispatch (isa.h): detection, the choice of level, and in a build with several
 * levels the plain-named functions of isa_calls.h forwarding to the chosen level's copies.
 * Compiled once, for the build's baseline (never with a level's flags). */
#include "backend/cpu/isa.h"

#include "backend/cpu/isa_calls.h"
#include "util/status.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define KN_ISA_X86 1
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

static const char *const level_names[KN_ISA_COUNT] = {"baseline", "avx2", "avx512"};
_Static_assert(sizeof level_names / sizeof level_names[0] == KN_ISA_COUNT, "a name per level");

static const char *const feature_names[KN_CPUF_COUNT_] = {
    "sse4.2", "popcnt", "avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "lzcnt",
    "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512bf16", "amxbf16", "avx512vnni", "amxint8",
};
_Static_assert(sizeof feature_names / sizeof feature_names[0] == KN_CPUF_COUNT_, "a name per feature");

#define NEEDS_AVX2                                                                                                    \
    (KN_CPUF_SSE42 | KN_CPUF_POPCNT | KN_CPUF_AVX | KN_CPUF_AVX2 | KN_CPUF_FMA | KN_CPUF_F16C | KN_CPUF_BMI1 |          \
     KN_CPUF_BMI2 | KN_CPUF_LZCNT)
#define NEEDS_AVX512                                                                                                  \
    (NEEDS_AVX2 | KN_CPUF_AVX512F | KN_CPUF_AVX512BW | KN_CPUF_AVX512DQ | KN_CPUF_AVX512VL | KN_CPUF_AVX512CD)

const char *kn_cpu_isa_name(kn_cpu_isa level) {
    return (unsigned)level < KN_ISA_COUNT ? level_names[level] : NULL;
}

unsigned kn_cpu_isa_needs(kn_cpu_isa level) {
    switch (level) {
    case KN_ISA_AVX2: return NEEDS_AVX2;
    case KN_ISA_AVX512: return NEEDS_AVX512;
    default: return 0;
    }
}

void kn_cpu_features_str(unsigned features, char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = 0;
    for (int i = 0; i < KN_CPUF_COUNT_; i++)
        if (features & (1u << i)) {
            int w = snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? "," : "", feature_names[i]);
            if (w > 0) n += (size_t)w;
        }
    if (!n && cap) snprintf(buf, cap, "none");
}

bool kn_cpu_features_parse(const char *list, unsigned *out, char *why, size_t cap) {
    *out = 0;
    if (!list) return true;
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ", ");
        if (len) {
            int found = -1;
            for (int i = 0; i < KN_CPUF_COUNT_; i++)
                if (strlen(feature_names[i]) == len && !strncmp(p, feature_names[i], len)) found = i;
            if (found < 0) {
                char all[256];
                kn_cpu_features_str((1u << KN_CPUF_COUNT_) - 1, all, sizeof all);
                snprintf(why, cap, "KILN_CPU_MASK: unknown CPU feature '%.*s' (known: %s)", (int)len, p, all);
                return false;
            }
            *out |= 1u << found;
        }
        p += len;
        while (*p == ',' || *p == ' ') p++;
    }
    return true;
}

/* ---------------------------------------------------------------- detection */

static unsigned detect(void) {
    unsigned f = 0;
#if defined(KN_ISA_X86)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    if (c & (1u << 20)) f |= KN_CPUF_SSE42;
    if (c & (1u << 23)) f |= KN_CPUF_POPCNT;
    const bool fma = c & (1u << 12), avx = c & (1u << 28), f16c = c & (1u << 29), osxsave = c & (1u << 27);
    unsigned xcr0 = 0;
    if (osxsave) {
        unsigned hi;
        __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(hi) : "c"(0));
    }
    const bool os_ymm = (xcr0 & 0x6u) == 0x6u, os_zmm = (xcr0 & 0xE6u) == 0xE6u;
    if (avx && os_ymm) {
        f |= KN_CPUF_AVX;
        if (fma) f |= KN_CPUF_FMA;
        if (f16c) f |= KN_CPUF_F16C;
    }
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        const unsigned max_sub = a, edx7 = d, ecx7 = c;
        if (b & (1u << 3)) f |= KN_CPUF_BMI1;
        if (b & (1u << 8)) f |= KN_CPUF_BMI2;
        if (os_ymm && (b & (1u << 5))) f |= KN_CPUF_AVX2;
        if (os_zmm && (b & (1u << 16))) {
            f |= KN_CPUF_AVX512F;
            if (b & (1u << 17)) f |= KN_CPUF_AVX512DQ;
            if (b & (1u << 28)) f |= KN_CPUF_AVX512CD;
            if (b & (1u << 30)) f |= KN_CPUF_AVX512BW;
            if (b & (1u << 31)) f |= KN_CPUF_AVX512VL;
            if (ecx7 & (1u << 11)) f |= KN_CPUF_AVX512VNNI;
            if (max_sub >= 1) {
                __cpuid_count(7, 1, a, b, c, d);
                if (a & (1u << 5)) f |= KN_CPUF_AVX512BF16;
            }
        }
        /* AMX-BF16 (EDX bit 22) and AMX-TILE (bit 24), with XCR0's XTILECFG and XTILEDATA (bits 17,
         * 18); Linux still wants each process to ask for the tile data (sgemm_bf16.c does) */
        if (os_zmm && (edx7 & (1u << 22)) && (edx7 & (1u << 24)) && (xcr0 & 0x60000u) == 0x60000u) f |= KN_CPUF_AMXBF16;
        /* AMX-INT8: EDX bit 25, with AMX-TILE and the same state (qgemm_amx.c asks Linux too) */
        if (os_zmm && (edx7 & (1u << 25)) && (edx7 & (1u << 24)) && (xcr0 & 0x60000u) == 0x60000u) f |= KN_CPUF_AMXINT8;
    }
    if (__get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & (1u << 5))) f |= KN_CPUF_LZCNT;
#endif
    return f;
}

/* ---------------------------------------------------------------- the levels built */

#if defined(KILN_CPU_DISPATCH)
extern const kn_cpu_level_entry kn_cpu_level_baseline, kn_cpu_level_avx2, kn_cpu_level_avx512;
static const kn_cpu_level_entry *const levels[KN_ISA_COUNT] = {&kn_cpu_level_baseline, &kn_cpu_level_avx2,
                                                               &kn_cpu_level_avx512};
#define BUILT ((1u << KN_ISA_COUNT) - 1)
#else
/* one level, the compiler's */
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)
#define NATIVE_LEVEL KN_ISA_AVX512
#elif defined(__AVX2__) && defined(__FMA__)
#define NATIVE_LEVEL KN_ISA_AVX2
#else
#define NATIVE_LEVEL KN_ISA_BASELINE
#endif
#define BUILT (1u << NATIVE_LEVEL)
#endif

unsigned kn_cpu_isa_built(void) { return BUILT; }

bool kn_cpu_isa_dispatch(void) {
#if defined(KILN_CPU_DISPATCH)
    return true;
#else
    return false;
#endif
}

/* ---------------------------------------------------------------- the choice */

static void level_list(unsigned set, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int l = 0; l < KN_ISA_COUNT; l++)
        if (set & (1u << l)) {
            int w = snprintf(buf + n, n < cap ? cap - n : 0, "%s%s", n ? ", " : "", level_names[l]);
            if (w > 0) n += (size_t)w;
        }
    if (!n) snprintf(buf, cap, "none");
}

bool kn_cpu_isa_resolve(const char *want, unsigned features, unsigned built, unsigned masked, kn_cpu_isa *out,
                        char *why, size_t cap) {
    /* the best level built that the CPU runs; a native build's one level counts as runnable (it is
     * what the whole build was compiled for) */
    unsigned usable = 0;
    for (int l = 0; l < KN_ISA_COUNT; l++)
        if ((built & (1u << l)) && ((features & kn_cpu_isa_needs((kn_cpu_isa)l)) == kn_cpu_isa_needs((kn_cpu_isa)l) ||
                                    built == (1u << l)))
            usable |= 1u << l;
    kn_cpu_isa best = KN_ISA_BASELINE;
    for (int l = 0; l < KN_ISA_COUNT; l++)
        if (usable & (1u << l)) best = (kn_cpu_isa)l;
    *out = best;
    if (!want || !*want || !strcmp(want, "auto")) return true;
    int asked = -1;
    for (int l = 0; l < KN_ISA_COUNT; l++)
        if (!strcmp(want, level_names[l])) asked = l;
    char lv[64];
    if (asked < 0) {
        level_list((1u << KN_ISA_COUNT) - 1, lv, sizeof lv);
        snprintf(why, cap, "KILN_CPU_ISA='%s' is not a CPU level (%s, or auto)", want, lv);
        return false;
    }
    if (!(built & (1u << asked))) {
        level_list(built, lv, sizeof lv);
        snprintf(why, cap,
                 "KILN_CPU_ISA=%s: this build of kiln has the CPU kernels of %s only; a build with "
                 "-DKILN_NATIVE=OFF (and KILN_CPU_DISPATCH on, the default) chooses among baseline, avx2 and "
                 "avx512 at run time",
                 want, lv);
        return false;
    }
    const unsigned lack = kn_cpu_isa_needs((kn_cpu_isa)asked) & ~features;
    if (lack && built != (1u << asked)) {
        char miss[256];
        kn_cpu_features_str(lack, miss, sizeof miss);
        level_list(usable, lv, sizeof lv);
        snprintf(why, cap,
                 "KILN_CPU_ISA=%s: this CPU lacks %s%s, which the %s kernels use; levels it runs: %s (unset "
                 "KILN_CPU_ISA to take the best)",
                 want, miss, (lack & masked) == lack ? " (hidden by KILN_CPU_MASK)" : (lack & masked) ? " (partly hidden by KILN_CPU_MASK)" : "",
                 want, lv);
        return false;
    }
    *out = (kn_cpu_isa)asked;
    return true;
}

static kn_cpu_isa active;
static unsigned features_seen;
static char error[512];
static char describe[512];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void) {
    unsigned masked = 0;
    char why[512] = "";
    if (!kn_cpu_features_parse(getenv("KILN_CPU_MASK"), &masked, why, sizeof why)) {
        snprintf(error, sizeof error, "%s", why);
        masked = 0;
    }
    features_seen = detect() & ~masked;
    kn_cpu_isa l;
    if (!kn_cpu_isa_resolve(getenv("KILN_CPU_ISA"), features_seen, BUILT, masked, &l, why, sizeof why) && !error[0])
        snprintf(error, sizeof error, "%s", why);
    active = l;
    char lv[64];
    level_list(BUILT, lv, sizeof lv);
    const char *forced = getenv("KILN_CPU_ISA");
    if (kn_cpu_isa_dispatch())
        snprintf(describe, sizeof describe, "%s (run-time dispatch among %s; %s)", level_names[active], lv,
                 error[0] ? error : forced && *forced && strcmp(forced, "auto") ? "KILN_CPU_ISA chose it"
                                                                                : "the best this CPU runs");
    else
        snprintf(describe, sizeof describe, "%s (the only level built: %s)%s%s", level_names[active],
#if defined(KILN_CPU_NATIVE)
                 "-march=native",
#else
                 "no run-time dispatch",
#endif
                 error[0] ? "; " : "", error);
}

unsigned kn_cpu_features(void) {
    pthread_once(&once, choose);
    return features_seen;
}

/* Linux hands a process the AMX tile state only when it asks (arch_prctl ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA); a refusal (an old kernel, a seccomp filter) means no AMX. Asked once. */
static bool amx_granted;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void ask_amx(void) {
#if defined(__linux__) && defined(SYS_arch_prctl) && defined(KN_ISA_X86)
    amx_granted = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#endif
}

bool kn_cpu_amx_permitted(void) {
    pthread_once(&amx_once, ask_amx);
    return amx_granted;
}

static bool vnni_off;

bool kn_cpu_has_vnni(void) {
    const unsigned need = KN_CPUF_AVX512F | KN_CPUF_AVX512BW | KN_CPUF_AVX512VL | KN_CPUF_AVX512VNNI;
    return !vnni_off && (kn_cpu_features() & need) == need;
}

void kn_cpu_vnni_force(bool on) { vnni_off = !on; }

kn_cpu_isa kn_cpu_isa_active(void) {
    pthread_once(&once, choose);
    return active;
}

kiln_status kn_cpu_isa_check(void) {
    pthread_once(&once, choose);
    return error[0] ? kn_error(KILN_ERR_UNSUPPORTED, "provider 'cpu': %s", error) : KILN_OK;
}

const char *kn_cpu_isa_describe(void) {
    pthread_once(&once, choose);
    return describe;
}

const kn_cpu_level_entry *kn_cpu_isa_entry(kn_cpu_isa level) {
#if defined(KILN_CPU_DISPATCH)
    if ((unsigned)level >= KN_ISA_COUNT || !(BUILT & (1u << level))) return NULL;
    const unsigned needs = kn_cpu_isa_needs(level);
    return (kn_cpu_features() & needs) == needs ? levels[level] : NULL;
#else
    (void)level;
    return NULL;
#endif
}

/* ---------------------------------------------------------------- forwarding */

#if defined(KILN_CPU_DISPATCH)
static const kn_cpu_level_entry *entry(void) { return levels[kn_cpu_isa_active()]; }

#define KN_ISA_FORWARD_(ret, name, params, args)                                                                    \
    ret name params { return entry()->f_##name args; }
#define KN_ISA_VFORWARD_(name, params, args)                                                                        \
    void name params { entry()->f_##name args; }
KN_ISA_CALLS(KN_ISA_FORWARD_, KN_ISA_VFORWARD_)
#endif
