/* build and run: gcc -O2 -march=native bench/qdw_inner_bench.c -o /tmp/qdw_inner && /tmp/qdw_inner */
/* inner-loop microbenchmark: 3x3 stride-1 depthwise, 96 planes 56x56 (OW 56), 1 thread.
 * (a) vpmaddwd over pair words (taps kw, kw+1) + a (w2, 0) pair; (b) int32 vpmulld per tap from int16 rows */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#define H 58
#define W 64
#define OW 56
#define OH 56
static int16_t xb[H][W + 16];
static int32_t pr[H][W + 16];
static int32_t y[OH][OW + 8];
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
__attribute__((noinline)) static void pairs(const int32_t *wp) {
    for (int oh = 0; oh < OH; oh++)
        for (int o = 0; o < OW; o += 8) {
            __m256i c = _mm256_setzero_si256();
            for (int kh = 0; kh < 3; kh++) {
                const int32_t *r = pr[oh + kh] + o;
                c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)r), _mm256_set1_epi32(wp[2 * kh])));
                c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(r + 2)), _mm256_set1_epi32(wp[2 * kh + 1])));
            }
            _mm256_storeu_si256((__m256i *)(y[oh] + o), c);
        }
}
__attribute__((noinline)) static void mul32(const int32_t *w9) {
    for (int oh = 0; oh < OH; oh++)
        for (int o = 0; o < OW; o += 8) {
            __m256i c = _mm256_setzero_si256();
            for (int kh = 0; kh < 3; kh++)
                for (int kw = 0; kw < 3; kw++) {
                    const __m256i v = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(xb[oh + kh] + o + kw)));
                    c = _mm256_add_epi32(c, _mm256_mullo_epi32(v, _mm256_set1_epi32(w9[kh * 3 + kw])));
                }
            _mm256_storeu_si256((__m256i *)(y[oh] + o), c);
        }
}
int main(void) {
    for (int i = 0; i < H; i++) for (int j = 0; j < W + 16; j++) xb[i][j] = (int16_t)((i * 7 + j * 3) % 255 - 128), pr[i][j] = xb[i][j] * 65537;
    int32_t wp[6] = {0x10002, 3, 0x40005, 6, 0x70008, 9}, w9[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now(); for (int p = 0; p < 96 * 50; p++) pairs(wp); double t1 = now();
        for (int p = 0; p < 96 * 50; p++) mul32(w9); double t2 = now();
        printf("per 96-plane conv: pairs %.3f ms, int32 mullo %.3f ms\n", (t1 - t0) / 50 * 1e3, (t2 - t1) / 50 * 1e3);
    }
    return 0;
}
