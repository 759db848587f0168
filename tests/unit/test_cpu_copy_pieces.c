/* Large contiguous copies in pieces (tensor_layout.c, memcpy_pieces_work): Split, Concat and Slice
 * whose rows are longer than two 64 KB pieces, so the copy is cut into pieces spread over the
 * threads; row lengths that are no multiple of a piece, one row and several rows. Checked element
 * by element against the definitions, at 1 and 2 threads. */
#include "test_model_builder.h"

#include "kiln.h"

#include <stdlib.h>

enum { L = 70001 }; /* floats per row: 280004 bytes, 5 pieces, the last one short */

/* x [2,3,L] -> Split axis 1 [1,2] -> a [2,1,L], b [2,2,L]; c = Concat(b, a) axis 1 [2,3,L];
 * d = Concat(a, a) axis 2 [2,1,2L]; e = Slice(x) [:, 1:3, 5:L] */
static unsigned char *copies_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, (int64_t[]){2, 3, L}, NULL);
    int split = tmb_const_i64(&b, "split", (int64_t[]){1, 2}, 2, false);
    int st = tmb_const_i64(&b, "starts", (int64_t[]){1, 5}, 2, false), en = tmb_const_i64(&b, "ends", (int64_t[]){3, L}, 2, false);
    int ax = tmb_const_i64(&b, "axes", (int64_t[]){1, 2}, 2, false);
    int a = tmb_value(&b, "a"), bb = tmb_value(&b, "b"), c = tmb_value(&b, "c"), d = tmb_value(&b, "d"),
        e = tmb_value(&b, "e");
    int outs[2] = {a, bb};
    int sn = kn_graph_add_node(b.g, NULL, "Split", "", (int[]){x, split}, 2, outs, 2);
    tmb_int(&b, sn, "axis", 1);
    int cn = tmb_node(&b, "Concat", (int[]){bb, a}, 2, c);
    tmb_int(&b, cn, "axis", 1);
    int dn = tmb_node(&b, "Concat", (int[]){a, a}, 2, d);
    tmb_int(&b, dn, "axis", 2);
    tmb_node(&b, "Slice", (int[]){x, st, en, ax}, 4, e);
    tmb_output(&b, a);
    tmb_output(&b, bb);
    tmb_output(&b, c);
    tmb_output(&b, d);
    tmb_output(&b, e);
    return tmb_finish(&b, size);
}

KN_TEST(cpu_large_copies_in_pieces) {
    size_t size;
    unsigned char *m = copies_model(&size);
    if (!m) return;
    kiln_tensor *x = NULL;
    kiln_tensor_create(KILN_DTYPE_FLOAT, (int64_t[]){2, 3, L}, 3, &x);
    float *xp = kiln_tensor_data(x);
    for (int64_t i = 0; i < 2 * 3 * L; i++) xp[i] = (float)i;
#define X(n, ch, l) xp[((n) * 3 + (ch)) * (int64_t)L + (l)]
    for (int threads = 1; threads <= 2; threads++) {
        kiln_session *s = tmb_session(m, size, threads, 3);
        if (!s) continue;
        const char *in_names[1] = {"x"};
        kiln_tensor *ins[1] = {x}, *out[5] = {0};
        CHECK_STATUS(kiln_session_run(s, in_names, ins, 1, NULL, 5, out), KILN_OK);
        if (out[4]) {
            const float *a = kiln_tensor_data(out[0]), *b = kiln_tensor_data(out[1]), *c = kiln_tensor_data(out[2]),
                        *d = kiln_tensor_data(out[3]), *e = kiln_tensor_data(out[4]);
            int bad = 0;
            for (int n = 0; n < 2; n++)
                for (int64_t l = 0; l < L; l++) {
                    bad += a[n * L + l] != X(n, 0, l);
                    for (int ch = 0; ch < 2; ch++) bad += b[(n * 2 + ch) * L + l] != X(n, 1 + ch, l);
                    for (int ch = 0; ch < 3; ch++) bad += c[(n * 3 + ch) * L + l] != X(n, ch < 2 ? 1 + ch : 0, l);
                    bad += d[n * 2 * L + l] != X(n, 0, l) || d[n * 2 * L + L + l] != X(n, 0, l);
                    for (int ch = 0; ch < 2 && l >= 5; ch++) bad += e[(n * 2 + ch) * (L - 5) + l - 5] != X(n, 1 + ch, l);
                }
            CHECK_MSG(bad == 0, "%d threads: %d elements differ from Split/Concat/Slice's definitions", threads, bad);
        }
        for (int i = 0; i < 5; i++) kiln_tensor_destroy(out[i]);
        kiln_session_destroy(s);
    }
#undef X
    kiln_tensor_destroy(x);
    free(m);
}
