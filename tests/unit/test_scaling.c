/* Compiling scales (issue 23): creating a session of a chain of n elementwise nodes at level 3
 * (loading, inference, every pass, placement, the memory plan) takes time near-linear in n. The
 * curve over 5k, 20k and 80k nodes is printed (levels 0 and 3); the test fails only on a quadratic
 * jump: 4x the nodes taking more than 12x the time (a linear step is about 4x, a quadratic one
 * 16x). Each size is timed three times in the thread's CPU time and the fastest kept, so a busy
 * machine does not fail it; sizes are large enough that fixed costs do not hide the slope. (A
 * 1M-node chain: bench/results/.) */
#include "test_model_builder.h"

#include "kiln.h"
#include "util/clock.h"

#include <stdio.h>
#include <time.h>

/* x [1,16] -> Relu -> Neg -> Abs -> Sigmoid -> Relu -> ... (n nodes) -> y */
static unsigned char *chain_model(int n, size_t *size) {
    static const char *const ops[4] = {"Relu", "Neg", "Abs", "Sigmoid"};
    tmb b;
    tmb_init(&b, 17);
    int prev = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, (int64_t[]){1, 16}, NULL);
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, i == n - 1 ? "y" : "t%d", i);
        int v = tmb_value(&b, name);
        tmb_node(&b, ops[i % 4], (int[]){prev}, 1, v);
        prev = v;
    }
    tmb_output(&b, prev);
    return tmb_finish(&b, size);
}

/* CPU time of the calling thread in ms: what the creation itself costs, whatever else the machine
 * runs (wall time on a loaded 2-core CI machine swings by 3x). */
static double thread_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The fastest of three session creations, in ms of the thread's CPU time (-1 on failure). */
static double create_ms(const unsigned char *m, size_t size, int level) {
    double best = -1;
    for (int r = 0; r < 3; r++) {
        kiln_session_options *o = NULL;
        kiln_session_options_create(&o);
        kiln_session_options_set_cache(o, 0, NULL);
        kiln_session_options_set_opt_level(o, level);
        kiln_session_options_set_intra_op_threads(o, 1);
        kiln_session *s = NULL;
        double t0 = thread_cpu_ms();
        kiln_status st = kiln_session_create_from_memory(m, size, NULL, o, &s);
        double t = thread_cpu_ms() - t0;
        kiln_session_options_destroy(o);
        CHECK_MSG(st == KILN_OK, "session: %s", kiln_last_error());
        if (st != KILN_OK) return -1;
        kiln_session_destroy(s);
        if (best < 0 || t < best) best = t;
    }
    return best;
}

KN_TEST(session_creation_scales_near_linearly) {
    static const int sizes[3] = {5000, 20000, 80000};
    for (int level = 0; level <= 3; level += 3) {
        double ms[3];
        for (int i = 0; i < 3; i++) {
            size_t size = 0;
            unsigned char *m = chain_model(sizes[i], &size);
            if (!m) return;
            ms[i] = create_ms(m, size, level);
            free(m);
            if (ms[i] < 0) return;
        }
        printf("  level %d: %d nodes %.1f ms, %d nodes %.1f ms (x%.1f), %d nodes %.1f ms (x%.1f)\n", level, sizes[0],
               ms[0], sizes[1], ms[1], ms[1] / (ms[0] > 0.01 ? ms[0] : 0.01), sizes[2], ms[2],
               ms[2] / (ms[1] > 0.01 ? ms[1] : 0.01));
        /* below 50 ms the step is mostly fixed costs and noise: judged only above */
        double ratio = ms[2] / (ms[1] > 0.01 ? ms[1] : 0.01);
        CHECK_MSG(ms[2] < 50 || ratio <= 12,
                  "level %d: 4x the nodes took %.1fx the time (%.1f ms -> %.1f ms): quadratic somewhere", level, ratio,
                  ms[1], ms[2]);
    }
}
