/* Run-time CPU dispatch: which instruction-set level the CPU kernels run at.
 *
 * A portable build (KILN_NATIVE=OFF on x86-64: the Python wheel, distribution packages) compiles
 * the CPU backend (every src/backend/cpu file but isa.c, sgemm_bf16.c, conv_amx.c, qgemm_amx.c and
 * const_cache.c) once per
 * level:
 *
 *   baseline   x86-64 (SSE2)
 *   avx2       + AVX, AVX2, FMA, F16C, BMI1/2, LZCNT, POPCNT (x86-64-v3)
 *   avx512     + AVX512 F, BW, DQ, VL, CD (x86-64-v4)
 *
 * Each copy is the same source with its own compiler flags and a name suffix (isa_names.h renames
 * every external symbol of the backend, e.g. kn_sgemm -> kn_sgemm_avx2). Vector kernels are written
 * once for the avx2 and avx512 levels through isa_vec.h (KN_VL lanes: 8 or 16; the convolutions, the
 * Winograd 3x3 and the pools), so a level never falls back to scalar code the other has vectorised.
 * The level is chosen once
 * per process, the first time any of this is asked: the highest level whose features cpuid
 * reports (and the OS enables: xgetbv), or KILN_CPU_ISA=baseline|avx2|avx512 to force a lower one
 * (tests, benchmarks). A level the CPU lacks is refused: kn_cpu_isa_check() returns the reason
 * (the CPU backend's init calls it, so a session fails with that message) and the kernels that
 * run meanwhile (constant folding, direct calls) are the best level the CPU has; nothing ever runs
 * an instruction the CPU lacks. KILN_CPU_MASK=avx512bw,fma,... hides features from the detection,
 * to test that refusal on a machine that has them.
 *
 * The rest of kiln reaches the backend through kn_cpu_find (the kernel records of the chosen level:
 * after compile, runs call the level's kernels directly, no dispatch per call), kn_cpu_tables and
 * the few functions of isa_calls.h, which isa.c forwards to the chosen level.
 *
 * A native build (KILN_NATIVE=ON: -march=native) compiles the one level of the build machine;
 * these functions then report it, and KILN_CPU_ISA may only name it. AVX512_BF16 (precision=bf16)
 * is not a level: sgemm_bf16.c compiles its kernels for it in every build and uses them where the
 * CPU has it and the level is avx512. */
#ifndef KN_CPU_ISA_H
#define KN_CPU_ISA_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum kn_cpu_isa {
    KN_ISA_BASELINE = 0,
    KN_ISA_AVX2 = 1,
    KN_ISA_AVX512 = 2,
    KN_ISA_COUNT
} kn_cpu_isa;

/* CPU features as detected (bits of kn_cpu_features()). */
enum {
    KN_CPUF_SSE42 = 1u << 0,
    KN_CPUF_POPCNT = 1u << 1,
    KN_CPUF_AVX = 1u << 2, /* with the OS saving the YMM state */
    KN_CPUF_AVX2 = 1u << 3,
    KN_CPUF_FMA = 1u << 4,
    KN_CPUF_F16C = 1u << 5,
    KN_CPUF_BMI1 = 1u << 6,
    KN_CPUF_BMI2 = 1u << 7,
    KN_CPUF_LZCNT = 1u << 8,
    KN_CPUF_AVX512F = 1u << 9, /* with the OS saving the opmask and ZMM state */
    KN_CPUF_AVX512BW = 1u << 10,
    KN_CPUF_AVX512DQ = 1u << 11,
    KN_CPUF_AVX512VL = 1u << 12,
    KN_CPUF_AVX512CD = 1u << 13,
    KN_CPUF_AVX512BF16 = 1u << 14,
    KN_CPUF_AMXBF16 = 1u << 15, /* AMX-TILE and AMX-BF16, with the OS saving the tile state */
    KN_CPUF_AVX512VNNI = 1u << 16,
    KN_CPUF_AMXINT8 = 1u << 17, /* AMX-TILE and AMX-INT8, with the OS saving the tile state */
    KN_CPUF_COUNT_ = 18
};

/* Whether Linux gave this process the AMX tile state (asked once; false elsewhere): the tiles of
 * sgemm_bf16.c and qgemm_amx.c run only then. */
bool kn_cpu_amx_permitted(void);

/* AMX-INT8 for the 8-bit products: kn_qgemm_amx() in qgemm_amx.h (KILN_CPU_MASK=amxint8 hides it).
 * Whether the 8-bit integer products (qgemm.c) use AVX-512 VNNI: the CPU has it (less
 * KILN_CPU_MASK) with AVX-512 F, BW and VL, unless kn_cpu_vnni_force turned it off. Only the
 * avx512 level's kernels have the VNNI forms; the lower levels ignore it. */
bool kn_cpu_has_vnni(void);
/* Tests: off (false) makes the products take the AVX2 forms on a CPU with VNNI; on (true) gives
 * back what the CPU has. Not while products run. */
void kn_cpu_vnni_force(bool on);

/* "baseline", "avx2", "avx512" (NULL for a value out of range). */
const char *kn_cpu_isa_name(kn_cpu_isa level);
/* The features a level's code needs. */
unsigned kn_cpu_isa_needs(kn_cpu_isa level);
/* This CPU's features (cpuid, xgetbv), less those KILN_CPU_MASK hides. */
unsigned kn_cpu_features(void);
/* Features as "avx2,fma,..." (the names KILN_CPU_MASK takes). */
void kn_cpu_features_str(unsigned features, char *buf, size_t cap);
/* The levels this build has (bit i: level i), and whether it chooses among them at run time. */
unsigned kn_cpu_isa_built(void);
bool kn_cpu_isa_dispatch(void);
/* The level whose kernels run. */
kn_cpu_isa kn_cpu_isa_active(void);
/* KILN_OK, or why KILN_CPU_ISA's level cannot be used (KILN_ERR_UNSUPPORTED). */
kiln_status kn_cpu_isa_check(void);
/* One line for `kiln info`: the level in use and how it was chosen. */
const char *kn_cpu_isa_describe(void);

/* One level's functions (isa_calls.h), whichever level runs (tests: each level's kernels against
 * the baseline's in one process): NULL when the build has no run-time dispatch, lacks the level,
 * or the CPU (less KILN_CPU_MASK's features) cannot run it. */
const struct kn_cpu_level_entry *kn_cpu_isa_entry(kn_cpu_isa level);

/* The choice itself, without the environment (tests): want is KILN_CPU_ISA's value (NULL, "" or
 * "auto": the best level), features what the CPU has, built the levels built (kn_cpu_isa_built's
 * form), masked the features KILN_CPU_MASK hid (for the message). Returns true with *out set, or
 * false with *out the best usable level and the reason in why. */
bool kn_cpu_isa_resolve(const char *want, unsigned features, unsigned built, unsigned masked, kn_cpu_isa *out,
                        char *why, size_t cap);
/* Parses KILN_CPU_MASK's form ("avx512bw,fma"); false with the reason for an unknown name. */
bool kn_cpu_features_parse(const char *list, unsigned *out, char *why, size_t cap);

#endif
