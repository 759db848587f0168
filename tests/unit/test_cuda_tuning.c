/* GPU tests of the CUDA backend's tuning results in the compiled file: a cold session chooses the
 * cuDNN and cuBLASLt algorithms at its first run and writes them into its cache entry as it ends
 * (section "cuda.tuning"); a warm session imports them and makes no choice of its own; its outputs
 * equal the cold session's and the CPU's. Heuristic and exhaustive tuning both. Malformed records
 * are refused with a reason. Without a usable CUDA device each test is skipped. */
#include "test_model_builder.h"

#include "backend/backend.h"
#include "cache/backend.h"
#include "cache/format.h"
#include "exec/graph_run.h"
#include "exec/session.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* X [1,8,20,20] -> Conv 3x3 pad 1 (16 channels) -> GlobalAveragePool -> Flatten -> MatMul [16,10] */
static unsigned char *conv_matmul_model(size_t *size) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[4] = {1, 8, 20, 20}, wd[4] = {16, 8, 3, 3}, md[2] = {16, 10};
    int x = tmb_input(&b, "X", KILN_DTYPE_FLOAT, 4, xd, NULL);
    int w = tmb_const(&b, "W", 4, wd, 0.3f), m = tmb_const(&b, "M", 2, md, 0.5f);
    int c = tmb_value(&b, "C"), p = tmb_value(&b, "P"), f = tmb_value(&b, "F"), y = tmb_value(&b, "Y");
    int cin[2] = {x, w};
    int conv = tmb_node(&b, "Conv", cin, 2, c);
    int64_t pads[4] = {1, 1, 1, 1};
    tmb_ints(&b, conv, "pads", pads, 4);
    tmb_node(&b, "GlobalAveragePool", &c, 1, p);
    tmb_node(&b, "Flatten", &p, 1, f);
    int min[2] = {f, m};
    tmb_node(&b, "MatMul", min, 2, y);
    tmb_output(&b, y);
    return tmb_finish(&b, size);
}

/* A new folder from the mkdtemp template dir, with the model written into it as model.onnx (its
 * path in model). */
static bool model_in_new_dir(char *dir, char *model, size_t cap) {
    if (!mkdtemp(dir)) return false;
    snprintf(model, cap, "%s/model.onnx", dir);
    size_t size;
    unsigned char *data = conv_matmul_model(&size);
    FILE *fp = fopen(model, "wb");
    bool ok = fp && data && fwrite(data, 1, size, fp) == size;
    if (fp) ok = fclose(fp) == 0 && ok;
    free(data);
    return ok;
}

/* The model's input X [1,8,20,20], uniform random from the seed. */
static kiln_tensor *random_x(uint32_t seed) {
    int64_t xd[4] = {1, 8, 20, 20};
    kiln_tensor *x = NULL;
    kiln_tensor_create(KILN_DTYPE_FLOAT, xd, 4, &x);
    float *px = kiln_tensor_data(x);
    for (int64_t i = 0; i < kiln_tensor_element_count(x); i++) px[i] = tmb_rand(&seed);
    return x;
}

static const kn_backend *cuda_of(const kiln_session *s) {
    for (int i = 0; s && s->rt && i < s->rt->n_backends; i++)
        if (s->rt->backends[i].state && !strcmp(s->rt->backends[i].ops->name, "cuda")) return &s->rt->backends[i];
    return NULL;
}

static kiln_session *open_session(const char *model, const char *provider, const char *tuning, const char *cache_dir) {
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, cache_dir != NULL, cache_dir);
    const char *k[1] = {"tuning"}, *v[1] = {tuning};
    kiln_session_options_append_provider(o, provider, tuning ? k : NULL, tuning ? v : NULL, tuning ? 1 : 0);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create(model, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "session (%s): %s", provider, kiln_last_error());
    return s;
}

static kiln_tensor *run_once(kiln_session *s, kiln_tensor *x) {
    const char *names[1] = {"X"};
    kiln_tensor *out[1] = {NULL};
    kiln_status st = kiln_session_run(s, names, &x, 1, NULL, 1, out);
    CHECK_MSG(st == KILN_OK, "run: %s", kiln_last_error());
    return out[0];
}

static double max_rel_diff(kiln_tensor *a, kiln_tensor *b) {
    if (!a || !b || kiln_tensor_element_count(a) != kiln_tensor_element_count(b)) return INFINITY;
    const float *x = kiln_tensor_data(a), *y = kiln_tensor_data(b);
    double worst = 0;
    for (int64_t i = 0; i < kiln_tensor_element_count(a); i++) {
        double d = fabs((double)x[i] - y[i]) / (1e-6 + fabs((double)y[i]));
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

/* KILN_CUDA_STAND_INS for the sessions made next (NULL: unset, the default auto). */
static void standins(const char *mode) {
    if (mode) setenv("KILN_CUDA_STAND_INS", mode, 1);
    else unsetenv("KILN_CUDA_STAND_INS");
}

/* The compiled file in a cache folder (the folder holds one entry). */
static int entry_in(const char *dir, char *path, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.' && strlen(e->d_name) > 5 && !strcmp(e->d_name + strlen(e->d_name) - 5, ".kiln")) {
            snprintf(path, cap, "%s/%s", dir, e->d_name);
            found = 1;
        }
    closedir(d);
    return found;
}

KN_TEST(cuda_tuning_kept_in_compiled_file) {
    NEED_GPU();
    char dir[] = "/tmp/kn_tuning_XXXXXX";
    char model[256], cache[300], entry[600], cmd[400];
    CHECK(model_in_new_dir(dir, model, sizeof model));
    kiln_tensor *x = random_x(99);
    kiln_session *ref = open_session(model, "cpu", NULL, NULL);
    kiln_tensor *want = ref ? run_once(ref, x) : NULL;
    kiln_session_destroy(ref);

    static const char *const modes[2] = {"heuristic", "exhaustive"};
    for (int mode = 0; mode < 2; mode++) {
        snprintf(cache, sizeof cache, "%s/cache_%s", dir, modes[mode]);
        /* cold: compiled and stored without tuning results, which its first run makes */
        kiln_session *cold = open_session(model, "cuda", modes[mode], cache);
        if (!cold) continue;
        CHECK_EQ_INT(kn_cache_tuning_made(cold), 0);
        kiln_tensor *y1 = run_once(cold, x);
        int made = kn_cache_tuning_made(cold);
        CHECK_MSG(made >= 2, "%s: the cold run made %d tuning results (a Conv and a MatMul: 2 expected)", modes[mode], made);
        kiln_session_destroy(cold); /* writes the entry again, with them */
        CHECK(entry_in(cache, entry, sizeof entry));
        kn_cfile *f = NULL;
        CHECK_STATUS(kn_cfile_open(entry, &f), KILN_OK);
        CHECK_MSG(f && kn_cfile_section(f, KN_SECT_BACKEND, "cuda.tuning"), "%s: no cuda.tuning section in %s", modes[mode],
                  entry);
        kn_cfile_close(f);
        /* warm: every choice comes from the file (the libraries in every run: no stand-ins) */
        standins("never");
        kiln_session *warm = open_session(model, "cuda", modes[mode], cache);
        standins(NULL);
        const kn_backend *cu = cuda_of(warm);
        CHECK(cu != NULL);
        if (!cu) {
            kiln_tensor_destroy(y1);
            kiln_session_destroy(warm);
            continue;
        }
        int here = -1, held = cu->ops->tuning_count(cu->state, &here);
        CHECK_EQ_INT(held, made);
        CHECK_EQ_INT(here, 0);
        kiln_tensor *y2 = run_once(warm, x);
        cu->ops->tuning_count(cu->state, &here);
        CHECK_MSG(here == 0, "%s: the warm run chose %d algorithms again", modes[mode], here);
#ifdef KILN_HAVE_CUDA
        /* beside the first run, every imported choice (the Conv's and the MatMul's) ran once */
        int replayed = kn_cuda_warmup_replayed(cu->state);
        CHECK_MSG(replayed == made, "%s: %d of %d imported choices replayed at the warm start", modes[mode], replayed, made);
#endif
        CHECK_MSG(max_rel_diff(y2, y1) <= 1e-6, "%s: warm and cold outputs differ (%g)", modes[mode], max_rel_diff(y2, y1));
        CHECK_MSG(max_rel_diff(y2, want) <= 1e-3, "%s: CUDA and CPU outputs differ (%g)", modes[mode], max_rel_diff(y2, want));
        kiln_tensor_destroy(y1);
        kiln_tensor_destroy(y2);
        kiln_session_destroy(warm);
    }
    kiln_tensor_destroy(want);
    kiln_tensor_destroy(x);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

KN_TEST(cuda_tuning_malformed_records_refused) {
    NEED_GPU();
    size_t size;
    unsigned char *data = conv_matmul_model(&size);
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_append_provider(o, "cuda", NULL, NULL, 0);
    kiln_session *s = NULL;
    CHECK_STATUS(kiln_session_create_from_memory(data, size, NULL, o, &s), KILN_OK);
    kiln_session_options_destroy(o);
    free(data);
    const kn_backend *cu = cuda_of(s);
    CHECK(cu != NULL);
    if (!cu) {
        kiln_session_destroy(s);
        return;
    }
    /* a well-formed convolution key: rank 4, fp32, FMA math, 1 group; x/y/w dims; pad/stride/dilation */
    int32_t desc[22] = {4, 0, 3, 1, 1, 4, 2, 3, 2, 3, 10, 10, 3, 10, 10, 3, 1, 1, 1, 1, 1, 1};
    uint8_t key[1 + sizeof desc], val[64] = {0};
    key[0] = 'F';
    memcpy(key + 1, desc, sizeof desc);
    int32_t algo = 99;
    memcpy(val, &algo, sizeof algo);
    CHECK_STATUS(cu->ops->tuning_import(cu->state, key, sizeof key, val, 4), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("out of range");
    algo = 1;
    memcpy(val, &algo, sizeof algo);
    CHECK_STATUS(cu->ops->tuning_import(cu->state, key, sizeof key, val, 8), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("value");
    key[0] = 'Z';
    CHECK_STATUS(cu->ops->tuning_import(cu->state, key, sizeof key, val, 4), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("unknown kind");
    CHECK_STATUS(cu->ops->tuning_import(cu->state, key, 1, val, 4), KILN_ERR_CACHE);
    key[0] = 'F';
    CHECK_STATUS(cu->ops->tuning_import(cu->state, key, sizeof key - 4, val, 4), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("no description");
    key[0] = 'L';
    CHECK_STATUS(cu->ops->tuning_import(cu->state, key, sizeof key, val, 64), KILN_ERR_CACHE); /* 64: a cublasLtMatmulAlgo_t */
    CHECK_ERROR_HAS("product's key");
    key[0] = 'F';
    CHECK_STATUS(cu->ops->tuning_import(cu->state, key, sizeof key, val, 4), KILN_OK);
    /* an imported choice for a problem that never occurs changes nothing: the model still runs */
    int64_t xd[4] = {1, 8, 20, 20};
    kiln_tensor *x;
    kiln_tensor_create(KILN_DTYPE_FLOAT, xd, 4, &x);
    kiln_tensor *y = run_once(s, x);
    CHECK(y != NULL);
    kiln_tensor_destroy(y);
    kiln_tensor_destroy(x);
    kiln_session_destroy(s);
}

/* A cuBLASLt choice that does not fit its problem (here: bytes no algorithm has) is refused by
 * cuBLASLt at the first product; the session drops it, takes the heuristic's, and runs right. */
KN_TEST(cuda_tuning_refused_matmul_choice_recovers) {
    NEED_GPU();
    size_t size;
    unsigned char *data = conv_matmul_model(&size);
    kiln_session *made = NULL, *given = NULL;
    kiln_session_options *o;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_append_provider(o, "cuda", NULL, NULL, 0);
    CHECK_STATUS(kiln_session_create_from_memory(data, size, NULL, o, &made), KILN_OK);
    standins("never"); /* the first run must try the imported choice, not stand in for it */
    CHECK_STATUS(kiln_session_create_from_memory(data, size, NULL, o, &given), KILN_OK);
    standins(NULL);
    kiln_session_options_destroy(o);
    free(data);
    const kn_backend *a = cuda_of(made), *b = cuda_of(given);
    CHECK(a && b);
    if (!a || !b) {
        kiln_session_destroy(made);
        kiln_session_destroy(given);
        return;
    }
    kiln_tensor *x = random_x(5);
    kiln_tensor *want = run_once(made, x);
    int corrupted = 0, n = a->ops->tuning_count(a->state, NULL);
    for (int i = 0; i < n; i++) {
        const void *key, *val;
        size_t kl, vl;
        if (!a->ops->tuning_record(a->state, i, &key, &kl, &val, &vl) || ((const uint8_t *)key)[0] != 'L') continue;
        uint8_t bad[64];
        memset(bad, 0xff, sizeof bad);
        CHECK_STATUS(b->ops->tuning_import(b->state, key, kl, bad, vl), KILN_OK);
        corrupted++;
    }
    CHECK_MSG(corrupted >= 1, "no cuBLASLt choice to corrupt (%d records)", n);
    kiln_tensor *got = run_once(given, x);
    /* the heuristic's algorithm may sum the products in another order than the one measured
     * fastest: float32 rounding apart (1.02e-6 seen on an H200), not a wrong result */
    CHECK_MSG(max_rel_diff(got, want) <= 1e-5, "outputs after a refused choice differ (%g)", max_rel_diff(got, want));
    int here = 0;
    b->ops->tuning_count(b->state, &here);
    CHECK_MSG(here >= corrupted, "%d refused choices, %d made again", corrupted, here);
    kiln_tensor_destroy(got);
    kiln_tensor_destroy(want);
    kiln_tensor_destroy(x);
    kiln_session_destroy(made);
    kiln_session_destroy(given);
}

/* A warm start's first runs do not wait for cuBLASLt and cuDNN: while the warm-up threads start
 * them (held here by the test switch, so the timing cannot decide), the Conv and the MatMul run on
 * kiln's own kernels, with outputs equal to the libraries' within rounding, and no run is recorded
 * into a graph; once the threads are joined the next run uses the imported choices uncaptured (the
 * libraries' first calls), and the one after it is recorded.
 * With KILN_CUDA_STAND_INS=never the held session uses the libraries from the first run. */
KN_TEST(cuda_standins_run_while_libraries_start) {
    NEED_GPU();
#ifdef KILN_HAVE_CUDA
    char dir[] = "/tmp/kn_standin_XXXXXX";
    char model[256], cache[300], cmd[400];
    CHECK(model_in_new_dir(dir, model, sizeof model));
    snprintf(cache, sizeof cache, "%s/cache", dir);
    kiln_tensor *x = random_x(7);
    kiln_session *cold = open_session(model, "cuda", NULL, cache);
    kiln_tensor *want = cold ? run_once(cold, x) : NULL;
    kiln_session_destroy(cold); /* stores the tuning results */

    kn_cuda_warmup_hold(true);
    kiln_session *warm = open_session(model, "cuda", NULL, cache);
    const kn_backend *cu = cuda_of(warm);
    CHECK(cu != NULL);
    if (cu) {
        kiln_tensor *y1 = run_once(warm, x);
        CHECK_MSG(kn_cuda_standin_count(cu->state) == 2, "first warm run: %d stand-ins (the Conv and the MatMul: 2)",
                  kn_cuda_standin_count(cu->state));
        CHECK_MSG(max_rel_diff(y1, want) <= 1e-5, "stand-in outputs differ from the libraries' (%g)", max_rel_diff(y1, want));
        kiln_tensor *y2 = run_once(warm, x);
        int graphs = -1;
        kn_graph_run_stats(warm, NULL, &graphs, NULL);
        CHECK_MSG(graphs == 0, "a run with stand-ins was recorded (%d graphs)", graphs);
        CHECK_EQ_INT(kn_cuda_standin_count(cu->state), 4);
        kn_cuda_warmup_hold(false);
        CHECK(kn_cuda_warmup_replayed(cu->state) == 2); /* joins the threads */
        /* the libraries' first run of the session goes uncaptured, the next one is recorded */
        kiln_tensor *y3 = run_once(warm, x);
        kn_graph_run_stats(warm, NULL, &graphs, NULL);
        CHECK_MSG(graphs == 0, "the libraries' first run was recorded (%d graphs)", graphs);
        kiln_tensor *y4 = run_once(warm, x), *y5 = run_once(warm, x);
        kn_graph_run_stats(warm, NULL, &graphs, NULL);
        CHECK_MSG(graphs == 1, "the runs after the libraries were ready were not recorded (%d graphs)", graphs);
        CHECK_MSG(kn_cuda_standin_count(cu->state) == 4, "stand-ins after the libraries were ready (%d)",
                  kn_cuda_standin_count(cu->state));
        CHECK_MSG(max_rel_diff(y3, want) <= 1e-6 && max_rel_diff(y4, want) <= 1e-6 && max_rel_diff(y5, want) <= 1e-6,
                  "library runs differ from the cold run (%g, %g, %g)", max_rel_diff(y3, want), max_rel_diff(y4, want),
                  max_rel_diff(y5, want));
        kiln_tensor_destroy(y1);
        kiln_tensor_destroy(y2);
        kiln_tensor_destroy(y3);
        kiln_tensor_destroy(y4);
        kiln_tensor_destroy(y5);
    }
    kiln_session_destroy(warm);

    kn_cuda_warmup_hold(true);
    standins("never");
    kiln_session *lib = open_session(model, "cuda", NULL, cache);
    standins(NULL);
    cu = cuda_of(lib);
    if (cu) {
        kiln_tensor *y = run_once(lib, x);
        CHECK_MSG(kn_cuda_standin_count(cu->state) == 0, "KILN_CUDA_STAND_INS=never: %d stand-ins",
                  kn_cuda_standin_count(cu->state));
        CHECK_MSG(max_rel_diff(y, want) <= 1e-6, "outputs differ from the cold run (%g)", max_rel_diff(y, want));
        kiln_tensor_destroy(y);
    }
    kn_cuda_warmup_hold(false);
    kiln_session_destroy(lib);
    kiln_tensor_destroy(want);
    kiln_tensor_destroy(x);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
#endif
}
