/* One level's table of the functions that code outside the CPU backend calls (isa_calls.h).
 *
 * In a build with run-time dispatch this file is compiled once per level with the rest of the
 * backend, and the build renames every external symbol of the level's objects with the level's
 * suffix (cmake/cpu_level_rename.cmake), so this table becomes kn_cpu_level_<level>, pointing
 * at that level's copies; isa.c picks one. A native build compiles it once and does not use it. */
#include "backend/cpu/isa.h"
#include "backend/cpu/isa_calls.h"

#if !defined(KN_ISA_LEVEL)
#define KN_ISA_LEVEL -1 /* a native build: isa.c reports the level from the compiler's macros */
#endif

/* the compiler flags of the level must give the features isa.c requires of the CPU for it */
#if KN_ISA_LEVEL >= 1 && !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && defined(__BMI2__))
#error "the avx2 level is compiled without AVX2, FMA, F16C or BMI2"
#endif
#if KN_ISA_LEVEL >= 2 && !(defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
                           defined(__AVX512VL__) && defined(__AVX512CD__))
#error "the avx512 level is compiled without AVX512 F, BW, DQ, VL or CD"
#endif

#define KN_ISA_INIT_(ret, name, params, args) .f_##name = name,
#define KN_ISA_VINIT_(name, params, args) .f_##name = name,
const kn_cpu_level_entry kn_cpu_level = {.level = KN_ISA_LEVEL, KN_ISA_CALLS(KN_ISA_INIT_, KN_ISA_VINIT_)};
