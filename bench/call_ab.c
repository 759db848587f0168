/* Per-call time of kiln_session_run_into on one model for two or more libkiln.so builds loaded side
 * by side (dlopen, local symbols), alternating 15 turns of the same number of runs each, 1 intra-op
 * thread, CPU time of the process; the minimum and the mean of turns 4-15 per build. For A/B of a
 * kernel or of the run path without Python in the way (op_sweep.py's ctypes call costs about 2 us a
 * run; kiln's own run of a one-node Softmax 1x1000 is under 1 us).
 *
 *   cc -O2 -o /tmp/call_ab bench/call_ab.c -ldl
 *   [XO=n] [YO=n] /tmp/call_ab MODEL.onnx INPUT OUTPUT 1x64x56x56 1x56x56x64 A/libkiln.so B/libkiln.so
 *
 * One float input and one float output, shapes as AxBxC; XO / YO put the input / output that many
 * floats past a 64-byte boundary (numpy's buffers are often 16 or 32 bytes past one). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <time.h>
typedef int (*f_oc)(void **); typedef int (*f_thr)(void *, int); typedef int (*f_cache)(void *, int, const char *);
typedef int (*f_sc)(const char *, const void *, void **); typedef int (*f_wrap)(int, const int64_t *, int, void *, size_t, void **);
typedef int (*f_run)(void *, const char *const *, void *const *, size_t, const char *const *, size_t, void *const *);
static double now(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    if (argc < 7 || argc > 10) { fprintf(stderr, "usage: call_ab MODEL INPUT OUTPUT IN_DIMS OUT_DIMS LIB [LIB...] (at most 4)\n"); return 2; }
    /* argv: model in_name out_name nelem d0 d1 [.. dims given as "1x1000"] libA libB */
    const char *model = argv[1], *iname = argv[2], *oname = argv[3];
    int64_t dims[8]; int rank = 0; char *p = argv[4];
    while (*p) { dims[rank++] = strtoll(p, &p, 10); if (*p == 'x') p++; }
    int64_t n = 1; for (int i = 0; i < rank; i++) n *= dims[i];
    int64_t odims[8]; int orank = 0; p = argv[5];
    while (*p) { odims[orank++] = strtoll(p, &p, 10); if (*p == 'x') p++; }
    int xo = getenv("XO") ? atoi(getenv("XO")) : 0, yo = getenv("YO") ? atoi(getenv("YO")) : 0;
    float *x = (float *)aligned_alloc(64, (n * 4 + 127) / 64 * 64) + xo, *y = (float *)aligned_alloc(64, (n * 4 + 127) / 64 * 64) + yo;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % 1000) / 100.0f - 5.0f;
    int nl = argc - 6; void *sess[4]; f_run run[4]; void *tin[4], *tout[4];
    for (int l = 0; l < nl; l++) {
        void *h = dlopen(argv[6 + l], RTLD_NOW | RTLD_LOCAL); if (!h) { printf("%s\n", dlerror()); return 1; }
        void *o; ((f_oc)dlsym(h, "kiln_session_options_create"))(&o);
        ((f_thr)dlsym(h, "kiln_session_options_set_intra_op_threads"))(o, 1);
        ((f_cache)dlsym(h, "kiln_session_options_set_cache"))(o, 0, NULL);
        if (((f_sc)dlsym(h, "kiln_session_create"))(model, o, &sess[l])) { printf("create failed\n"); return 1; }
        ((f_wrap)dlsym(h, "kiln_tensor_wrap"))(1, dims, rank, x, n * 4, &tin[l]);
        ((f_wrap)dlsym(h, "kiln_tensor_wrap"))(1, odims, orank, y, n * 4, &tout[l]);
        run[l] = (f_run)dlsym(h, "kiln_session_run_into");
    }
    const char *in[1] = {iname}, *on[1] = {oname};
    double best[4] = {1e9, 1e9, 1e9, 1e9}, sum[4] = {0};
    int reps = n > 100000 ? 200 : 20000;
    for (int r = 0; r < 15; r++)
        for (int l = 0; l < nl; l++) {
            double t0 = now();
            for (int k = 0; k < reps; k++) if (run[l](sess[l], in, &tin[l], 1, on, 1, &tout[l])) { printf("run failed\n"); return 1; }
            double t = (now() - t0) / reps; if (t < best[l]) best[l] = t; if (r >= 3) sum[l] += t;
        }
    for (int l = 0; l < nl; l++) printf("%s: min %.3f us, mean %.3f us (%.3f of the first)\n", argv[6 + l], best[l] * 1e6, sum[l] / 12 * 1e6, best[l] / best[0]);
}
