/* The compiled-model cache: the hash, the key (a miss for a change in every field), the file format
 * (every flipped byte and every truncation is an error naming the part, another format version
 * is named as such), the automatic cache (hit, miss, rebuilt and why, strict mode, an unwritable
 * directory, the size limit), explicit load/save paths, dump and save together, and eight
 * processes on a cold cache (exactly one compiles, all get the right outputs).
 *
 * Fixture: the zoo model field_conv1d_gemm ($KILN_ZOO or ../shared/models), else the project's
 * build/models/tiny_cnn; tests that need one skip when neither is there. */
#include "backend/cpu/sgemm_bf16.h"
#include "cache/backend.h"
#include "cache/cache.h"
#include "cache/format.h"
#include "cache/hash.h"
#include "cache/key.h"
#include "cache/store.h"
#include "onnx/loader.h"
#include "test_pb_writer.h"
#include "test_tmpfiles.h"
#include "unit.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ helpers */

static char zoo_dir[1024];

/* The fixture: the zoo's field_conv1d_gemm, else (a clone without the shared zoo) the project's own
 * tiny_cnn, which scripts/test.sh builds with tests/models/make_models.py before the unit tests. */
static const char *zoo_model(void) {
    const char *z = getenv("KILN_ZOO");
    static char path[1100];
    if (z && *z) snprintf(zoo_dir, sizeof zoo_dir, "%s/field_conv1d_gemm", z);
    else snprintf(zoo_dir, sizeof zoo_dir, "%s/../shared/models/field_conv1d_gemm", kn_unit_root());
    snprintf(path, sizeof path, "%s/model.onnx", zoo_dir);
    if (access(path, R_OK) == 0) return path;
    snprintf(zoo_dir, sizeof zoo_dir, "%s/build/models/tiny_cnn", kn_unit_root());
    snprintf(path, sizeof path, "%s/model.onnx", zoo_dir);
    return access(path, R_OK) == 0 ? path : NULL;
}

static int count_entries(const char *dir) {
    kn_cache_entry *e;
    int n = 0;
    if (kn_cache_list(dir, &e, &n) != KILN_OK) return -1;
    kn_cache_list_free(e, n);
    return n;
}

static uint8_t *read_file(const char *path, size_t *n) {
    unsigned char *d = NULL;
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    d = malloc((size_t)sz + 1);
    if (d && fread(d, 1, (size_t)sz, f) != (size_t)sz) {
        free(d);
        d = NULL;
    }
    fclose(f);
    if (d) {
        d[sz] = 0;
        *n = (size_t)sz;
    }
    return d;
}

/* stderr into a file while a block runs (the cache's log lines go there) */
static int saved_stderr = -1;
static char capture_path[300];
static void capture_begin(void) {
    fflush(stderr);
    snprintf(capture_path, sizeof capture_path, "/tmp/kiln-cache-test-log-%ld.txt", (long)getpid());
    saved_stderr = dup(2);
    int fd = open(capture_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
}
static char *capture_end(void) {
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    size_t n;
    char *s = (char *)read_file(capture_path, &n);
    unlink(capture_path);
    return s ? s : strdup("");
}

static int count_substr(const char *s, const char *sub) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub)) n++;
    return n;
}

/* KILN_TEST_CACHE_PROVIDERS (e.g. "cuda"): the session tests run with these providers (comma
 * separated) before the CPU: the GPU test command runs the cache tests so. */
static void add_test_providers(kiln_session_options *o) {
    const char *env = getenv("KILN_TEST_CACHE_PROVIDERS");
    if (!env || !*env) return;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env);
    char *save = NULL;
    for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save))
        kiln_session_options_append_provider(o, p, NULL, NULL, 0);
    kiln_session_options_append_provider(o, "cpu", NULL, NULL, 0);
}

static kiln_session_options *opts_in(const char *cache_dir) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    add_test_providers(o);
    kiln_session_options_set_cache(o, 1, cache_dir);
    kiln_session_options_set_log_level(o, KILN_LOG_INFO);
    kiln_session_options_set_intra_op_threads(o, 1);
    return o;
}

/* The zoo model's output on its data set 0 (NULL on any failure). */
static kn_tensor *run_data_set(kiln_session *s) {
    char in_path[1200];
    snprintf(in_path, sizeof in_path, "%s/test_data_set_0/input_0.pb", zoo_dir);
    kn_tensor *in = NULL, *got = NULL;
    kiln_value_info info;
    if (kn_onnx_read_value_file(in_path, &in, NULL) == KILN_OK && kiln_session_input_info(s, 0, &info) == KILN_OK) {
        const char *names[1] = {info.name};
        if (kiln_session_run(s, names, &in, 1, NULL, 1, &got) != KILN_OK) got = NULL;
    }
    kn_tensor_free(in);
    return got;
}

/* Runs the zoo model's data set 0 and compares with its reference output (atol 1e-4). */
static int check_outputs(kiln_session *s) {
    char out_path[1200];
    snprintf(out_path, sizeof out_path, "%s/test_data_set_0/output_0.pb", zoo_dir);
    kn_tensor *want = NULL, *got = NULL;
    int ok = 0;
    if (kn_onnx_read_value_file(out_path, &want, NULL) != KILN_OK || !(got = run_data_set(s))) goto done;
    if (kn_tensor_count(got) != kn_tensor_count(want)) goto done;
    ok = 1;
    for (int64_t i = 0; i < kn_tensor_count(got); i++)
        if (fabs(kn_tensor_get_f64(got, i) - kn_tensor_get_f64(want, i)) > 1e-4) ok = 0;
done:
    kn_tensor_free(want);
    kn_tensor_free(got);
    return ok;
}

/* ------------------------------------------------------------------ the hash */

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int popcount128(kn_hash128 a, kn_hash128 b) {
    return __builtin_popcountll(a.lo ^ b.lo) + __builtin_popcountll(a.hi ^ b.hi);
}

KN_TEST(cache_hash_avalanche) {
    /* flipping any one input bit flips each output bit with probability about 1/2 */
    static const size_t lens[] = {1, 8, 63, 64, 65, 200, 1100, 4096};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t n = lens[li];
        uint8_t *buf = malloc(n);
        long total = 0, trials = 0;
        int per_bit[128] = {0};
        /* enough trials (>= 2048 per length) that the per-bit bounds below are > 10 sd wide */
        int reps = (int)(2048 / (n * 8 > 512 ? 512 : n * 8));
        if (reps < 8) reps = 8;
        for (int rep = 0; rep < reps; rep++) {
            for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)next_rand();
            kn_hash128 base = kn_hash(buf, n, 0);
            size_t bits = n * 8 > 512 ? 512 : n * 8;
            for (size_t b = 0; b < bits; b++) {
                size_t bit = n * 8 > 512 ? (size_t)(next_rand() % (n * 8)) : b;
                buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                kn_hash128 h = kn_hash(buf, n, 0);
                buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
                total += popcount128(base, h);
                for (int o = 0; o < 64; o++) {
                    per_bit[o] += (int)(((base.lo ^ h.lo) >> o) & 1);
                    per_bit[64 + o] += (int)(((base.hi ^ h.hi) >> o) & 1);
                }
                trials++;
            }
        }
        double mean = (double)total / (double)trials / 128.0;
        CHECK_MSG(mean > 0.48 && mean < 0.52, "length %zu: a one-bit change flips %.3f of the output bits", n, mean);
        for (int o = 0; o < 128; o++) {
            double p = (double)per_bit[o] / (double)trials;
            CHECK_MSG(p > 0.40 && p < 0.60, "length %zu: output bit %d flips with probability %.3f", n, o, p);
        }
        free(buf);
    }
}

KN_TEST(cache_hash_buckets_and_collisions) {
    /* sequential integers (the worst case for weak hashes) spread evenly over 256 buckets, by the
     * low byte and the high byte of both halves */
    enum { N = 1 << 16, B = 256 };
    static int counts[4][B];
    memset(counts, 0, sizeof counts);
    kn_hash128 *all = malloc(sizeof *all * N);
    for (uint64_t i = 0; i < N; i++) {
        uint8_t b[8];
        for (int k = 0; k < 8; k++) b[k] = (uint8_t)(i >> (8 * k));
        kn_hash128 h = kn_hash(b, 8, 0);
        all[i] = h;
        counts[0][h.lo & 255]++;
        counts[1][h.lo >> 56]++;
        counts[2][h.hi & 255]++;
        counts[3][h.hi >> 56]++;
    }
    for (int k = 0; k < 4; k++) {
        double expect = (double)N / B, chi = 0;
        for (int b = 0; b < B; b++) chi += (counts[k][b] - expect) * (counts[k][b] - expect) / expect;
        /* 255 degrees of freedom: mean 255, sd ~22.6; 400 is > 6 sd */
        CHECK_MSG(chi < 400, "bucket set %d: chi-square %.1f over 256 buckets", k, chi);
    }
    /* no two of them equal in either half */
    int dup = 0;
    for (int i = 0; i < N && !dup; i++)
        for (int j = i + 1; j < i + 64 && j < N; j++)
            if (all[i].lo == all[j].lo || all[i].hi == all[j].hi) dup = 1;
    CHECK(!dup);
    free(all);
    /* length matters: zero bytes of different counts hash differently; the seed matters */
    uint8_t z[3] = {0, 0, 0};
    CHECK(!kn_hash_equal(kn_hash(z, 0, 0), kn_hash(z, 1, 0)));
    CHECK(!kn_hash_equal(kn_hash(z, 1, 0), kn_hash(z, 2, 0)));
    CHECK(!kn_hash_equal(kn_hash(z, 2, 0), kn_hash(z, 2, 1)));
}

KN_TEST(cache_hash_streaming) {
    /* any split of the input gives the one-shot result */
    size_t n = 5000;
    uint8_t *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)next_rand();
    for (size_t len = 0; len <= n; len += 97) {
        kn_hash128 one = kn_hash(buf, len, 7);
        kn_hasher h;
        kn_hasher_init(&h, 7);
        size_t at = 0;
        while (at < len) {
            size_t k = (size_t)(next_rand() % 150);
            if (k > len - at) k = len - at;
            kn_hasher_update(&h, buf + at, k);
            at += k;
        }
        CHECK_MSG(kn_hash_equal(one, kn_hasher_final(&h)), "length %zu: streaming and one-shot differ", len);
    }
    free(buf);
}

/* ------------------------------------------------------------------ a model with external data */

/* Y = X + W with W float[4] in external file `loc` next to the model. */
static int write_external_model(const char *dir, const float w[4]) {
    char path[512];
    snprintf(path, sizeof path, "%s/w.bin", dir);
    if (ttf_write(path, w, 4 * sizeof(float))) return -1;
    pbw t = {0}, e = {0}, g = {0}, n = {0}, m = {0}, os = {0};
    w_int(&t, 1, 4);
    w_int(&t, 2, 1);
    w_str(&t, 8, "W");
    w_str(&e, 1, "location");
    w_str(&e, 2, "w.bin");
    w_msg(&t, 13, &e);
    w_int(&t, 14, 1);
    w_str(&n, 1, "X");
    w_str(&n, 1, "W");
    w_str(&n, 2, "Y");
    w_str(&n, 3, "add");
    w_str(&n, 4, "Add");
    w_msg(&g, 1, &n);
    w_str(&g, 2, "g");
    w_msg(&g, 5, &t);
    pbw x = value_info("X", 1, 1, (int64_t[]){4}), y = value_info("Y", 1, 1, (int64_t[]){4});
    w_msg(&g, 11, &x);
    w_msg(&g, 12, &y);
    w_int(&m, 1, 8);
    w_msg(&m, 7, &g);
    w_str(&os, 1, "");
    w_int(&os, 2, 17);
    w_msg(&m, 8, &os);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    int rc = ttf_write(path, m.d, m.n);
    free(m.d);
    return rc;
}

/* ------------------------------------------------------------------ keys */

static void key_of(const char *model, const kiln_session_options *o, char name[64]) {
    kn_cache_key k;
    name[0] = 0;
    if (kn_cache_key_for_file(model, o, &k) != KILN_OK) return;
    snprintf(name, 64, "%s", k.name);
    kn_cache_key_free(&k);
}

KN_TEST(cache_key_every_field) {
    char *dir = ttf_tmp_dir("cache", "key");
    if (!dir) KN_SKIP("no temporary folder");
    float w[4] = {1, 2, 3, 4};
    CHECK(write_external_model(dir, w) == 0);
    char model[512];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    kiln_session_options *o = opts_in(dir);
    char base[64], again[64], k[64];
    key_of(model, o, base);
    key_of(model, o, again);
    CHECK(base[0] && !strcmp(base, again));
    /* options that do not change compilation leave the key alone */
    kiln_session_options_set_intra_op_threads(o, 3);
    kiln_session_options_set_log_level(o, KILN_LOG_ERROR);
    kiln_session_options_set_dump_path(o, "/tmp/x.onnx");
    key_of(model, o, k);
    CHECK_MSG(!strcmp(base, k), "threads/log/dump changed the key");
    /* each field that does */
    kiln_session_options *v;
    v = opts_in(dir);
    kiln_session_options_set_opt_level(v, 1);
    key_of(model, v, k);
    CHECK_MSG(strcmp(base, k), "opt level");
    kiln_session_options_destroy(v);
    v = opts_in(dir);
    kiln_session_options_disable_pass(v, "fuse_conv");
    key_of(model, v, k);
    CHECK_MSG(strcmp(base, k), "disabled pass");
    kiln_session_options_destroy(v);
    v = opts_in(dir);
    const char *pk[] = {"precision"}, *pv[] = {"fp16"};
    kiln_session_options_append_provider(v, "cuda", pk, pv, 1);
    kiln_session_options_append_provider(v, "cpu", NULL, NULL, 0);
    char cuda16[64], cuda32[64];
    key_of(model, v, cuda16);
    CHECK_MSG(strcmp(base, cuda16), "providers");
    kiln_session_options_destroy(v);
    v = opts_in(dir);
    pv[0] = "fp32";
    kiln_session_options_append_provider(v, "cuda", pk, pv, 1);
    kiln_session_options_append_provider(v, "cpu", NULL, NULL, 0);
    key_of(model, v, cuda32);
    CHECK_MSG(strcmp(cuda16, cuda32), "provider precision option");
    kiln_session_options_destroy(v);
    /* a run-time provider option (CUDA graph capture) shares the compiled file */
    v = opts_in(dir);
    const char *gk[] = {"precision", "graphs"}, *gv[] = {"fp32", "0"};
    kiln_session_options_append_provider(v, "cuda", gk, gv, 2);
    kiln_session_options_append_provider(v, "cpu", NULL, NULL, 0);
    key_of(model, v, k);
    CHECK_MSG(!strcmp(cuda32, k), "graphs=0 changed the key");
    kiln_session_options_destroy(v);
    v = opts_in(dir);
    kiln_session_options_set_dim(v, "N", 8);
    key_of(model, v, k);
    CHECK_MSG(strcmp(base, k), "input-shape profile");
    kiln_session_options_destroy(v);
    /* the optimiser's environment switches (set: another key; unset again: the same) */
    static const char *const env[][2] = {{"KILN_LAYOUT", "nhwc"},         {"KILN_LAYOUT", "nchw"},
                                         {"KILN_CPU_BF16_VALUES", "0"},   {"KILN_CPU_BF16_PLAIN", "0"},
                                         {"KILN_CPU_BF16_POOL", "0"},     {"KILN_CPU_NO_BF16", "1"},
                                         {"KILN_CUDA_ATTN_VIEWS", "0"},   {"KILN_CUDA_CONTROL_FLOW", "0"}};
    for (size_t e = 0; e < sizeof env / sizeof env[0]; e++) {
        setenv(env[e][0], env[e][1], 1);
        key_of(model, o, k);
        unsetenv(env[e][0]);
        CHECK_MSG(strcmp(base, k), "%s=%s left the key alone", env[e][0], env[e][1]);
        key_of(model, o, k);
        CHECK_MSG(!strcmp(base, k), "%s unset: another key", env[e][0]);
    }
    /* the device fingerprint, through the test hook */
    kn_cache_set_fake_device("device.cpu.model=Some Other CPU");
    key_of(model, o, k);
    kn_cache_set_fake_device(NULL);
    CHECK_MSG(strcmp(base, k), "device");
    CHECK_MSG(!strncmp(base, k, 32), "the device is an environment field: same id, other env");
    /* the model's content: a weight in the external file */
    w[2] = 3.5f;
    CHECK(write_external_model(dir, w) == 0);
    key_of(model, o, k);
    CHECK_MSG(strcmp(base, k), "external data content");
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
}

/* ------------------------------------------------------------------ the file format */

/* A compiled file of the zoo model in memory, through a real session. */
static uint8_t *compiled_bytes(const char *model, size_t *n) {
    kiln_session_options *o = opts_in(NULL);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_log_level(o, KILN_LOG_WARNING);
    kiln_session *s = NULL;
    uint8_t *d = NULL;
    *n = 0;
    kn_cache_key k;
    if (kiln_session_create(model, o, &s) == KILN_OK && kn_cache_key_for_file(model, o, &k) == KILN_OK) {
        kn_cache_write_memory(s, &k, &d, n);
        kn_cache_key_free(&k);
    }
    kiln_session_destroy(s);
    kiln_session_options_destroy(o);
    return d;
}

/* Reads bytes as a compiled file all the way to a session. */
static kiln_status load_bytes(const uint8_t *d, size_t n) {
    kn_cfile *f;
    KN_TRY(kn_cfile_open_memory(d, n, "mem.kiln", true, &f));
    kn_model *m;
    kiln_status st = kn_cfile_model(f, &m);
    kiln_session *s = NULL;
    if (st == KILN_OK) st = kn_session_from_compiled(m, NULL, &s);
    if (st == KILN_OK) st = kn_cfile_apply_backends(f, s);
    kiln_session_destroy(s);
    kn_cfile_close(f);
    return st;
}

KN_TEST(cache_format_roundtrip_and_flipped_bytes) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    size_t n;
    uint8_t *d = compiled_bytes(model, &n);
    CHECK(d && n > 4096);
    if (!d) return;
    CHECK_STATUS(load_bytes(d, n), KILN_OK);
    /* every byte of the header, key block and table; then every 61st byte of the rest, and the
     * bytes around each section boundary */
    uint8_t *c = malloc(n);
    kn_cfile *f;
    CHECK_STATUS(kn_cfile_open_memory(d, n, "x", false, &f), KILN_OK);
    size_t meta_end = KN_CACHE_HEADER_SIZE + kn_rd32(d + 24) + (size_t)kn_rd32(d + 28) * KN_CACHE_ENTRY_SIZE;
    int tried = 0, missed = 0;
    for (size_t pos = 0; pos < n; pos += pos < meta_end + 64 ? 1 : 61) {
        memcpy(c, d, n);
        c[pos] ^= (uint8_t)(1u << (pos % 8));
        kiln_status st = load_bytes(c, n);
        tried++;
        if (st != KILN_ERR_CACHE) {
            missed++;
            if (missed < 5) kn_unit_fail(__FILE__, __LINE__, "byte %zu flipped: status %d (%s)", pos, (int)st, kiln_last_error());
        }
    }
    for (int i = 0; f && i < f->n_sections; i++) {
        size_t off = (size_t)f->sections[i].offset;
        for (size_t pos = off >= 2 ? off - 2 : 0; pos < off + 2 && pos < n; pos++) {
            memcpy(c, d, n);
            c[pos] ^= 0x80;
            CHECK_STATUS(load_bytes(c, n), KILN_ERR_CACHE);
            tried++;
        }
    }
    CHECK(tried > 500);
    /* the message says which part */
    memcpy(c, d, n);
    const kn_section *ws = f ? kn_cfile_section(f, KN_SECT_WEIGHTS, NULL) : NULL;
    if (ws) {
        c[ws->offset + ws->size / 2] ^= 1;
        CHECK_STATUS(load_bytes(c, n), KILN_ERR_CACHE);
        CHECK_ERROR_HAS("mem.kiln: section 'weights': checksum mismatch in section 'weights'");
    }
    kn_cfile_close(f);
    free(c);
    free(d);
}

KN_TEST(cache_format_truncation_and_version) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    size_t n;
    uint8_t *d = compiled_bytes(model, &n);
    if (!d) {
        CHECK(d);
        return;
    }
    kn_cfile *f;
    CHECK_STATUS(kn_cfile_open_memory(d, n, "x", false, &f), KILN_OK);
    if (!f) return;
    /* at every boundary: header, key block, table, each section's start, middle and end - 1 */
    size_t cuts[64 * 3 + 8];
    int nc = 0;
    cuts[nc++] = 0;
    cuts[nc++] = 7;
    cuts[nc++] = KN_CACHE_HEADER_SIZE - 1;
    cuts[nc++] = KN_CACHE_HEADER_SIZE;
    cuts[nc++] = KN_CACHE_HEADER_SIZE + kn_rd32(d + 24);
    for (int i = 0; i < f->n_sections; i++) {
        cuts[nc++] = (size_t)f->sections[i].offset;
        cuts[nc++] = (size_t)(f->sections[i].offset + f->sections[i].size / 2);
        cuts[nc++] = (size_t)(f->sections[i].offset + f->sections[i].size) - 1;
    }
    cuts[nc++] = n - 1;
    for (int i = 0; i < nc; i++) {
        uint8_t *c = malloc(cuts[i] ? cuts[i] : 1);
        memcpy(c, d, cuts[i]);
        kiln_status st = load_bytes(c, cuts[i]);
        CHECK_MSG(st == KILN_ERR_CACHE, "cut at %zu: status %d (%s)", cuts[i], (int)st, kiln_last_error());
        if (cuts[i] >= KN_CACHE_HEADER_SIZE)
            CHECK_MSG(strstr(kiln_last_error(), "truncated"), "cut at %zu: %s", cuts[i], kiln_last_error());
        free(c);
    }
    kn_cfile_close(f);
    /* another format version, with a valid checksum: named as a version mismatch */
    uint8_t *c = malloc(n);
    memcpy(c, d, n);
    kn_wr32(c + 8, KN_CACHE_FORMAT_VERSION + 1);
    kn_cache_fix_checksums(c, n);
    CHECK_STATUS(load_bytes(c, n), KILN_ERR_CACHE);
    char other[64];
    snprintf(other, sizeof other, "cache format version %d != %d in file", KN_CACHE_FORMAT_VERSION,
             KN_CACHE_FORMAT_VERSION + 1);
    CHECK_ERROR_HAS(other);
    /* another kiln version in the key block: the key comparison names it */
    memcpy(c, d, n);
    uint8_t *kv = memmem(c, n, "\nkiln=", 6);
    CHECK(kv != NULL);
    kn_cache_key want;
    if (kv && kn_cache_key_for_file(model, NULL, &want) == KILN_OK) {
        size_t vl = strlen(kiln_version());
        memset(kv + 6, '9', vl); /* "0.1.0" -> "99999": same length, so nothing moves */
        kn_cache_fix_checksums(c, n);
        kn_cfile *g;
        CHECK_STATUS(kn_cfile_open_memory(c, n, "x", false, &g), KILN_OK);
        char why[512];
        if (g) {
            CHECK(kn_cfile_compare_key(g, &want, false, why, sizeof why) == 1);
            char expect[128];
            snprintf(expect, sizeof expect, "kiln version %s != 99999 in file", kiln_version());
            CHECK_MSG(strstr(why, expect), "%s", why);
        }
        kn_cfile_close(g);
        kn_cache_key_free(&want);
    }
    free(c);
    free(d);
}

/* ------------------------------------------------------------------ the automatic cache */

static kiln_status create_logged(const char *model, const kiln_session_options *o, kiln_session **s, char **log) {
    capture_begin();
    kiln_status st = kiln_session_create(model, o, s);
    *log = capture_end();
    return st;
}

KN_TEST(cache_hit_miss_rebuilt) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "auto");
    kiln_session_options *o = opts_in(dir);
    kiln_session *s = NULL;
    char *log;
    /* miss: compiled and stored */
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache miss"), "%s", log);
    CHECK_MSG(strstr(log, "cache stored"), "%s", log);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(log);
    CHECK_EQ_INT(count_entries(dir), 1);
    /* hit, with the same outputs */
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache hit"), "%s", log);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(log);
    /* each key field changed: a miss, a new entry */
    int expect = 1;
    kiln_session_options *v = opts_in(dir);
    kiln_session_options_set_opt_level(v, 1);
    CHECK_STATUS(create_logged(model, v, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache miss"), "opt level: %s", log);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(log);
    kiln_session_options_destroy(v);
    CHECK_EQ_INT(count_entries(dir), ++expect);
    v = opts_in(dir);
    kiln_session_options_disable_pass(v, "fold_constants");
    CHECK_STATUS(create_logged(model, v, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache miss"), "disabled pass: %s", log);
    kiln_session_destroy(s);
    free(log);
    kiln_session_options_destroy(v);
    CHECK_EQ_INT(count_entries(dir), ++expect);
    v = opts_in(dir);
    kiln_session_options_set_dim(v, "batch", 1);
    CHECK_STATUS(create_logged(model, v, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache miss"), "shape profile: %s", log);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(log);
    kiln_session_options_destroy(v);
    CHECK_EQ_INT(count_entries(dir), ++expect);
    v = opts_in(dir);
    kiln_session_options_append_provider(v, "cpu", NULL, NULL, 0);
    CHECK_STATUS(create_logged(model, v, &s, &log), KILN_OK);
    /* naming the default provider explicitly is the same job */
    CHECK_MSG(strstr(log, "cache hit"), "explicit cpu provider: %s", log);
    kiln_session_destroy(s);
    free(log);
    kiln_session_options_destroy(v);
    /* another device (the hook): rebuilt, and the log says which field and both values */
    kn_cache_set_fake_device("device.cpu.model=Test CPU 9000");
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    kn_cache_set_fake_device(NULL);
    CHECK_MSG(strstr(log, "cache rebuilt") && strstr(log, "device cpu.model 'Test CPU 9000' != "), "%s", log);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(log);
    CHECK_EQ_INT(count_entries(dir), ++expect);
    /* another build of kiln (a rebuilt development tree): rebuilt, saying so */
    kn_cache_set_fake_device("build=code-0000000000000000");
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    kn_cache_set_fake_device(NULL);
    CHECK_MSG(strstr(log, "cache rebuilt") && strstr(log, "kiln build code-0000000000000000 != "), "%s", log);
    kiln_session_destroy(s);
    free(log);
    CHECK_EQ_INT(count_entries(dir), ++expect);
    /* the model's content: a copy with one weight byte changed is a miss */
    char copy[600];
    snprintf(copy, sizeof copy, "%s/copy.onnx", dir);
    size_t mn;
    uint8_t *mb = read_file(model, &mn);
    if (mb) {
        mb[mn - 100] ^= 1; /* inside the last initializer's raw data */
        CHECK(ttf_write(copy, mb, mn) == 0);
        CHECK_STATUS(create_logged(copy, o, &s, &log), KILN_OK);
        CHECK_MSG(strstr(log, "cache miss"), "model content: %s", log);
        kiln_session_destroy(s);
        free(log);
        CHECK_EQ_INT(count_entries(dir), ++expect);
        free(mb);
    }
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
}

KN_TEST(cache_corrupt_entry_rebuilt_or_strict) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "corrupt");
    kiln_session_options *o = opts_in(dir);
    kiln_session *s = NULL;
    char *log;
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    kiln_session_destroy(s);
    free(log);
    kn_cache_entry *e;
    int n = 0;
    CHECK_STATUS(kn_cache_list(dir, &e, &n), KILN_OK);
    CHECK_EQ_INT(n, 1);
    if (n != 1) return;
    char entry[1024];
    snprintf(entry, sizeof entry, "%s", e[0].path);
    kn_cache_list_free(e, n);
    size_t fn;
    uint8_t *fd = read_file(entry, &fn);
    kn_cfile *f;
    CHECK_STATUS(kn_cfile_open(entry, &f), KILN_OK);
    const kn_section *ws = f ? kn_cfile_section(f, KN_SECT_WEIGHTS, NULL) : NULL;
    size_t pos = ws ? (size_t)(ws->offset + 100) : fn / 2;
    kn_cfile_close(f);
    fd[pos] ^= 0x10;
    CHECK(ttf_write(entry, fd, fn) == 0);
    /* strict: an error naming the file, the section and the problem */
    kiln_session_options_set_cache_strict(o, 1);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("checksum mismatch in section 'weights'");
    CHECK_ERROR_HAS(entry);
    CHECK(!s);
    free(log);
    /* default: rebuilt, with the reason in the log, and the entry replaced by a good one */
    kiln_session_options_set_cache_strict(o, 0);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache rebuilt") && strstr(log, "checksum mismatch in section 'weights'"), "%s", log);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(log);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache hit"), "%s", log);
    kiln_session_destroy(s);
    free(log);
    /* truncated entry: rebuilt too */
    CHECK(truncate(entry, (off_t)(fn / 3)) == 0);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache rebuilt") && strstr(log, "truncated"), "%s", log);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(log);
    free(fd);
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
}

KN_TEST(cache_unwritable_directory) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "unwritable");
    /* a path under a regular file cannot be created, even by root (chmod does not stop root) */
    char file[512], cache[600];
    snprintf(file, sizeof file, "%s/a-file", dir);
    CHECK(ttf_write(file, "x", 1) == 0);
    snprintf(cache, sizeof cache, "%s/sub", file);
    kiln_session_options *o = opts_in(cache);
    kiln_session *s = NULL;
    char *log;
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK(s && check_outputs(s));
    CHECK_MSG(strstr(log, "warning") && strstr(log, "cannot be created") && strstr(log, "without the cache"), "%s", log);
    kiln_session_destroy(s);
    free(log);
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
}

KN_TEST(cache_size_limit_prunes_lru) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "limit");
    kiln_session *s = NULL;
    char *log;
    /* three entries (levels 1, 2, 3), then level 1 used again, then a fourth with a limit that
     * holds about two: the least recently used (levels 2 and 3) go */
    uint64_t size = 0;
    for (int level = 1; level <= 3; level++) {
        kiln_session_options *o = opts_in(dir);
        kiln_session_options_set_opt_level(o, level);
        CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
        kiln_session_destroy(s);
        free(log);
        kiln_session_options_destroy(o);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kn_cache_entry *e;
    int n = 0;
    CHECK_STATUS(kn_cache_list(dir, &e, &n), KILN_OK);
    CHECK_EQ_INT(n, 3);
    for (int i = 0; i < n; i++) size = e[i].size > size ? e[i].size : size;
    kn_cache_list_free(e, n);
    kiln_session_options *o = opts_in(dir);
    kiln_session_options_set_opt_level(o, 1);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache hit"), "%s", log);
    kiln_session_destroy(s);
    free(log);
    kiln_session_options_set_opt_level(o, 0);
    kiln_session_options_set_cache_limit(o, size * 2 + size / 2);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "pruned"), "%s", log);
    kiln_session_destroy(s);
    free(log);
    CHECK_EQ_INT(count_entries(dir), 2);
    /* the survivors are the new one and level 1 (used most recently) */
    kiln_session_options_set_cache_limit(o, 0);
    kiln_session_options_set_opt_level(o, 1);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache hit"), "level 1 should have survived: %s", log);
    kiln_session_destroy(s);
    free(log);
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
}

/* ------------------------------------------------------------------ explicit paths */

KN_TEST(cache_load_path_errors) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "paths");
    char path[600], file[600];
    kiln_session_options *o = opts_in(NULL);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_log_level(o, KILN_LOG_WARNING);
    kiln_session *s = NULL;
    /* missing */
    snprintf(path, sizeof path, "%s/missing.kiln", dir);
    kiln_session_options_set_compiled_paths(o, NULL, path);
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_ERR_IO);
    CHECK_ERROR_HAS(path);
    CHECK_ERROR_HAS("does not exist");
    /* a directory */
    kiln_session_options_set_compiled_paths(o, NULL, dir);
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_ERR_INVALID_ARGUMENT);
    CHECK_ERROR_HAS("is a directory");
    /* unreadable: a path through a regular file (root reads any file, so chmod would not do) */
    snprintf(file, sizeof file, "%s/plain", dir);
    CHECK(ttf_write(file, "x", 1) == 0);
    snprintf(path, sizeof path, "%s/under.kiln", file);
    kiln_session_options_set_compiled_paths(o, NULL, path);
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_ERR_IO);
    CHECK_ERROR_HAS("cannot be read");
    if (geteuid() != 0) {
        snprintf(path, sizeof path, "%s/noread.kiln", dir);
        CHECK(ttf_write(path, "KILNCOMP", 8) == 0);
        chmod(path, 0);
        kiln_session_options_set_compiled_paths(o, NULL, path);
        CHECK_STATUS(kiln_session_create(model, o, &s), KILN_ERR_IO);
        CHECK_ERROR_HAS("cannot be read");
    }
    /* not a compiled file */
    kiln_session_options_set_compiled_paths(o, NULL, model);
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("not a kiln compiled file");
    /* "" and NULL mean unset: the model is simply compiled */
    kiln_session_options_set_compiled_paths(o, "", "");
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_OK);
    kiln_session_destroy(s);
    s = NULL;
    /* save, then load back; then a mismatch (other options) names the field */
    snprintf(path, sizeof path, "%s/saved.kiln", dir);
    kiln_session_options_set_compiled_paths(o, path, NULL);
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_OK);
    kiln_session_destroy(s);
    s = NULL;
    kiln_session_options_set_compiled_paths(o, NULL, path);
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_OK);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    s = NULL;
    kiln_session_options_set_opt_level(o, 1);
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_ERR_CACHE);
    CHECK_ERROR_HAS(path);
    CHECK_ERROR_HAS("compile options 'opt_level=1");
    kiln_session_options_set_opt_level(o, 3);
    kn_cache_set_fake_device("device.cpu.isa=other-isa");
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("device cpu.isa other-isa != ");
    kn_cache_set_fake_device(NULL);
    /* the compiled file alone (no .onnx) makes a session: kiln_session_create on it */
    kiln_session_options_set_compiled_paths(o, NULL, NULL);
    CHECK_STATUS(kiln_session_create(path, o, &s), KILN_OK);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    s = NULL;
    /* ... also from another build of the same version (explicit files are not held to it) */
    kn_cache_set_fake_device("build=code-0000000000000000");
    CHECK_STATUS(kiln_session_create(path, o, &s), KILN_OK);
    kiln_session_destroy(s);
    s = NULL;
    kiln_session_options_set_compiled_paths(o, NULL, path);
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_OK);
    kiln_session_destroy(s);
    s = NULL;
    kiln_session_options_set_compiled_paths(o, NULL, NULL);
    kn_cache_set_fake_device(NULL);
    /* ... but not on another device */
    kn_cache_set_fake_device("device.cpu.model=Elsewhere");
    CHECK_STATUS(kiln_session_create(path, o, &s), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("made for another environment: device cpu.model Elsewhere != ");
    kn_cache_set_fake_device(NULL);
    /* from memory too */
    size_t n;
    uint8_t *bytes = read_file(path, &n);
    CHECK_STATUS(kiln_session_create_from_memory(bytes, n, NULL, o, &s), KILN_OK);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(bytes);
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
}

KN_TEST(cache_save_and_dump_together) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "dump");
    char save[600], dump[600], dump2[600];
    snprintf(save, sizeof save, "%s/m.kiln", dir);
    snprintf(dump, sizeof dump, "%s/opt.onnx", dir);
    snprintf(dump2, sizeof dump2, "%s/opt2.onnx", dir);
    kiln_session_options *o = opts_in(dir);
    kiln_session_options_set_compiled_paths(o, save, NULL);
    kiln_session_options_set_dump_path(o, dump);
    kiln_session *s = NULL;
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_OK);
    kiln_session_destroy(s);
    s = NULL;
    CHECK(access(save, R_OK) == 0);
    /* the dump on the compile path is the session's (src/exec/session.c) */
    bool dumped_on_compile = access(dump, R_OK) == 0;
    /* a hit (and a load path) dump the optimised graph read from the compiled file */
    kiln_session_options_set_compiled_paths(o, NULL, save);
    kiln_session_options_set_dump_path(o, dump2);
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_OK);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    CHECK(access(dump2, R_OK) == 0);
    kn_model *m = NULL;
    CHECK_STATUS(kn_onnx_load_file(dump2, &m), KILN_OK);
    kn_model_free(m);
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
    if (!dumped_on_compile) KN_SKIP("the session does not write dump_path on the compile path yet");
}

/* ------------------------------------------------------------------ eight processes */

KN_TEST(cache_eight_processes_compile_once) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "procs");
    enum { N = 8 };
    int go[2];
    CHECK(pipe(go) == 0);
    pid_t pids[N];
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(go[1]);
            char c;
            /* wait until the parent lets every child go at once */
            if (read(go[0], &c, 1) < 0) _exit(3);
            char logp[700];
            snprintf(logp, sizeof logp, "%s/log-%d.txt", dir, i);
            int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fd, 2);
            close(fd);
            kiln_session_options *o = opts_in(dir);
            kiln_session *s = NULL;
            int ok = kiln_session_create(model, o, &s) == KILN_OK && check_outputs(s);
            if (!ok) fprintf(stderr, "child failed: %s\n", kiln_last_error());
            kiln_session_destroy(s);
            kiln_session_options_destroy(o);
            fflush(stderr);
            _exit(ok ? 0 : 1);
        }
    }
    close(go[0]);
    close(go[1]); /* EOF: all children read at once */
    int all_ok = 1;
    for (int i = 0; i < N; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) all_ok = 0;
    }
    CHECK_MSG(all_ok, "a child failed or got wrong outputs");
    int compiled = 0, hits = 0;
    for (int i = 0; i < N; i++) {
        char logp[700];
        snprintf(logp, sizeof logp, "%s/log-%d.txt", dir, i);
        size_t n;
        char *log = (char *)read_file(logp, &n);
        if (!log) continue;
        compiled += count_substr(log, "cache miss") + count_substr(log, "cache rebuilt");
        hits += count_substr(log, "cache hit");
        if (strstr(log, "child failed")) printf("    %s", log);
        free(log);
    }
    CHECK_EQ_INT(compiled, 1);
    CHECK_EQ_INT(hits, N - 1);
    CHECK_EQ_INT(count_entries(dir), 1);
    ttf_rm_rf(dir);
}

/* A device provider the options name adds its device's fingerprint to the key: with a GPU its
 * name, compute capability and library versions (so a file compiled on another GPU, driver or
 * cuDNN is a miss), without one "available=no" (the nodes then run on the CPU: another result). */
KN_TEST(cache_key_device_provider_fields) {
    kiln_session_options *o = NULL;
    CHECK(kiln_session_options_create(&o) == KILN_OK);
    CHECK(kiln_session_options_append_provider(o, "cuda", NULL, NULL, 0) == KILN_OK);
    CHECK(kiln_session_options_append_provider(o, "cpu", NULL, NULL, 0) == KILN_OK);
    kn_cache_key k;
    CHECK(kn_cache_key_env(o, &k) == KILN_OK);
    const char *avail = kn_cache_key_get(&k, "device.cuda.available");
    if (kiln_provider_available("cuda", NULL)) {
        CHECK(!avail);
        const char *cc = kn_cache_key_get(&k, "device.cuda.compute_capability");
        CHECK_MSG(cc && strchr(cc, '.'), "compute capability field");
        CHECK(kn_cache_key_get(&k, "device.cuda.name") && kn_cache_key_get(&k, "device.cuda.driver"));
        CHECK(kn_cache_key_get(&k, "device.cuda.cublaslt") && kn_cache_key_get(&k, "device.cuda.cudnn"));
    } else {
        CHECK_MSG(avail && !strcmp(avail, "no"), "device.cuda.available=no without a GPU");
        CHECK(!kn_cache_key_get(&k, "device.cuda.name"));
    }
    CHECK(kn_cache_key_get(&k, "device.cpu.model") != NULL);
    kn_cache_key_free(&k);
    /* the CPU alone: no cuda field at all */
    kiln_session_options *c = NULL;
    CHECK(kiln_session_options_create(&c) == KILN_OK);
    CHECK(kiln_session_options_append_provider(c, "cpu", NULL, NULL, 0) == KILN_OK);
    CHECK(kn_cache_key_env(c, &k) == KILN_OK);
    CHECK(!kn_cache_key_get(&k, "device.cuda.available") && !kn_cache_key_get(&k, "device.cuda.name"));
    kn_cache_key_free(&k);
    kiln_session_options_destroy(c);
    kiln_session_options_destroy(o);
}

/* ---- the "cuda.tuning" section's parser (no GPU needed: the records are opaque to it) */

typedef struct tuning_seen {
    int n;
    size_t key_len[4], val_len[4];
    uint8_t first_key_byte[4];
    int fail_at; /* the importer refuses record fail_at (-1: none) */
} tuning_seen;

static kiln_status seen_import(void *arg, const void *key, size_t kl, const void *val, size_t vl) {
    (void)val;
    tuning_seen *t = arg;
    if (t->n == t->fail_at) return kn_error(KILN_ERR_CACHE, "refused by the test");
    if (t->n < 4) {
        t->key_len[t->n] = kl;
        t->val_len[t->n] = vl;
        t->first_key_byte[t->n] = ((const uint8_t *)key)[0];
    }
    t->n++;
    return KILN_OK;
}

static size_t put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
    return 4;
}

/* One record: a key of key_len bytes starting with kind (the rest key_fill), a value of val_len
 * bytes of val_fill. */
static size_t put_record(uint8_t *p, uint8_t kind, uint32_t key_len, uint8_t key_fill, uint32_t val_len,
                         uint8_t val_fill) {
    size_t n = put_u32(p, key_len);
    memset(p + n, key_fill, key_len);
    p[n] = kind;
    n += key_len;
    n += put_u32(p + n, val_len);
    memset(p + n, val_fill, val_len);
    return n + val_len;
}

/* count 2: ('F' + 12 bytes) -> 4 bytes, ('L' + 48 bytes) -> 64 bytes */
static size_t tuning_section(uint8_t *buf) {
    size_t n = put_u32(buf, 2);
    n += put_record(buf + n, 'F', 13, 7, 4, 1);
    n += put_record(buf + n, 'L', 49, 9, 64, 3);
    return n;
}

KN_TEST(cache_tuning_section_parse) {
    uint8_t buf[256];
    size_t size = tuning_section(buf);
    tuning_seen t = {.fail_at = -1};
    CHECK_STATUS(kn_cache_tuning_parse(buf, size, "t.kiln", seen_import, &t), KILN_OK);
    CHECK_EQ_INT(t.n, 2);
    CHECK_EQ_INT(t.key_len[0], 13);
    CHECK_EQ_INT(t.val_len[0], 4);
    CHECK_EQ_INT(t.first_key_byte[0], 'F');
    CHECK_EQ_INT(t.key_len[1], 49);
    CHECK_EQ_INT(t.val_len[1], 64);
    CHECK_EQ_INT(t.first_key_byte[1], 'L');
    CHECK_STATUS(kn_cache_tuning_parse(buf, size, "t.kiln", NULL, NULL), KILN_OK);
    /* every truncation is an error naming the section, and reads nothing past the end */
    for (size_t cut = 0; cut < size; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, buf, cut);
        tuning_seen u = {.fail_at = -1};
        kiln_status st = kn_cache_tuning_parse(copy, cut, "t.kiln", seen_import, &u);
        CHECK_MSG(st == KILN_ERR_CACHE, "truncated to %zu bytes: status %d", cut, (int)st);
        CHECK_MSG(strstr(kiln_last_error(), "cuda.tuning") != NULL, "truncated to %zu: %s", cut, kiln_last_error());
        free(copy);
    }
    /* trailing bytes */
    uint8_t longer[300];
    memcpy(longer, buf, size);
    longer[size] = 0;
    CHECK_STATUS(kn_cache_tuning_parse(longer, size + 1, "t.kiln", NULL, NULL), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("unexpected bytes");
    /* a hostile count and a hostile key length */
    uint8_t hostile[256];
    memcpy(hostile, buf, size);
    put_u32(hostile, 0xffffffffu);
    CHECK_STATUS(kn_cache_tuning_parse(hostile, size, "t.kiln", NULL, NULL), KILN_ERR_CACHE);
    memcpy(hostile, buf, size);
    put_u32(hostile + 4, 0xfffffff0u);
    CHECK_STATUS(kn_cache_tuning_parse(hostile, size, "t.kiln", NULL, NULL), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("key");
    /* an empty key */
    uint8_t empty[16];
    size_t e = put_u32(empty, 1);
    e += put_u32(empty + e, 0);
    e += put_u32(empty + e, 0);
    CHECK_STATUS(kn_cache_tuning_parse(empty, e, "t.kiln", NULL, NULL), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("empty key");
    /* no records is a valid section */
    uint8_t none[4];
    put_u32(none, 0);
    CHECK_STATUS(kn_cache_tuning_parse(none, 4, "t.kiln", NULL, NULL), KILN_OK);
    /* the importer's refusal names the record */
    tuning_seen r = {.fail_at = 1};
    CHECK_STATUS(kn_cache_tuning_parse(buf, size, "t.kiln", seen_import, &r), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("record 1: refused by the test");
}

/* ------------------------------------------------------------------ trust (issue 24) */

/* The path of the directory's one entry (0 when there is not exactly one). */
static int one_entry(const char *dir, char *entry, size_t cap) {
    kn_cache_entry *e;
    int n = 0;
    if (kn_cache_list(dir, &e, &n) != KILN_OK) return 0;
    if (n == 1) snprintf(entry, cap, "%s", e[0].path);
    kn_cache_list_free(e, n);
    return n == 1;
}

KN_TEST(cache_directory_and_entries_are_private) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *base = ttf_tmp_dir("cache", "private");
    char dir[400];
    snprintf(dir, sizeof dir, "%s/new/kiln", base);
    kiln_session_options *o = opts_in(dir);
    kiln_session *s = NULL;
    char *log;
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache stored"), "%s", log);
    kiln_session_destroy(s);
    free(log);
    struct stat sb;
    CHECK(stat(dir, &sb) == 0 && (sb.st_mode & 0777) == 0700);
    char entry[1024];
    CHECK(one_entry(dir, entry, sizeof entry));
    CHECK(stat(entry, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    kiln_session_options_destroy(o);
    ttf_rm_rf(base);
}

/* Another user's plant in the cache directory: <id>.lock and .kiln-size as links to a file of the
 * victim's. kiln opened them with O_CREAT and truncated the target; now neither target changes. */
KN_TEST(cache_symlinked_lock_and_size_files_are_not_followed) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "links");
    char *victims = ttf_tmp_dir("cache", "victims");
    kiln_session_options *o = opts_in(dir);
    kn_cache_key k;
    CHECK_STATUS(kn_cache_key_for_file(model, o, &k), KILN_OK);
    char hex[33], lock[600], size[600], v1[600], v2[600];
    kn_hash_hex(k.id, hex);
    kn_cache_key_free(&k);
    snprintf(lock, sizeof lock, "%s/%s.lock", dir, hex);
    snprintf(size, sizeof size, "%s/.kiln-size", dir);
    snprintf(v1, sizeof v1, "%s/precious-1", victims);
    snprintf(v2, sizeof v2, "%s/precious-2", victims);
    static const char text[] = "a file of the victim's: must stay as it is\n";
    CHECK(ttf_write(v1, text, sizeof text - 1) == 0 && ttf_write(v2, text, sizeof text - 1) == 0);
    chmod(v1, 0600);
    CHECK(symlink(v1, lock) == 0);
    CHECK(symlink(v2, size) == 0);
    kiln_session *s = NULL;
    char *log;
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK(s && check_outputs(s));
    CHECK_MSG(strstr(log, "symbolic link"), "%s", log);
    kiln_session_destroy(s);
    free(log);
    /* a second session (a store would now touch the size file) */
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(log);
    int pruned = 0;
    kn_cache_prune(dir, 1, NULL, &pruned, NULL);
    kn_clear_error();
    for (int i = 0; i < 2; i++) {
        size_t n;
        uint8_t *d = read_file(i ? v2 : v1, &n);
        CHECK_MSG(d && n == sizeof text - 1 && !memcmp(d, text, n), "victim %d changed", i + 1);
        free(d);
    }
    struct stat sb;
    CHECK(lstat(lock, &sb) == 0 && S_ISLNK(sb.st_mode));
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
    ttf_rm_rf(victims);
}

/* A directory others can write to, or another user's, is not used: a warning and an uncached
 * session, or an error in strict mode. */
KN_TEST(cache_directory_of_others_is_not_used) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "shared");
    CHECK(chmod(dir, 0777) == 0);
    kiln_session_options *o = opts_in(dir);
    kiln_session *s = NULL;
    char *log;
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK(s && check_outputs(s));
    CHECK_MSG(strstr(log, "warning") && strstr(log, "writable by every user") && strstr(log, "without the cache"), "%s", log);
    kiln_session_destroy(s);
    free(log);
    CHECK_EQ_INT(count_entries(dir), 0);
    kiln_session_options_set_cache_strict(o, 1);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("writable by every user");
    CHECK(!s);
    free(log);
    CHECK(kn_cache_prune(dir, 1, NULL, NULL, NULL) == KILN_ERR_CACHE);
    kn_clear_error();
    kiln_session_options_destroy(o);
    /* group-writable too */
    char *dir2 = ttf_tmp_dir("cache", "group");
    CHECK(chmod(dir2, 0770) == 0);
    CHECK(kn_cache_dir_check(dir2) == KILN_ERR_CACHE);
    CHECK_ERROR_HAS("writable by its group");
    kn_clear_error();
    ttf_rm_rf(dir2);
    if (geteuid() == 0) {
        /* root can give a directory away: owned by another uid, not used even though root could */
        char *dir3 = ttf_tmp_dir("cache", "foreign"); /* a new path: the warning is given once per directory */
        CHECK(chown(dir3, 12345, 12345) == 0);
        o = opts_in(dir3);
        CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
        CHECK(s && check_outputs(s));
        CHECK_MSG(strstr(log, "owned by uid 12345") && strstr(log, "without the cache"), "%s", log);
        kiln_session_destroy(s);
        free(log);
        CHECK_EQ_INT(count_entries(dir3), 0);
        kiln_session_options_destroy(o);
        ttf_rm_rf(dir3);
    }
    ttf_rm_rf(dir);
}

/* Entries planted or changed by someone else: a link, another user's file, a file others can
 * write, a 4 GiB sparse file. None is loaded; each is rebuilt (strict: an error). */
KN_TEST(cache_planted_entries_are_not_loaded) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "planted");
    char *elsewhere = ttf_tmp_dir("cache", "elsewhere");
    kiln_session_options *o = opts_in(dir);
    kiln_session *s = NULL;
    char *log;
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    kiln_session_destroy(s);
    free(log);
    char entry[1024], copy[700];
    CHECK(one_entry(dir, entry, sizeof entry));
    snprintf(copy, sizeof copy, "%s/good.kiln", elsewhere);
    size_t n;
    uint8_t *good = read_file(entry, &n);
    CHECK(good && ttf_write(copy, good, n) == 0);
    /* a link to a good compiled file: not followed */
    CHECK(unlink(entry) == 0 && symlink(copy, entry) == 0);
    kiln_session_options_set_cache_strict(o, 1);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("symbolic link");
    free(log);
    kiln_session_options_set_cache_strict(o, 0);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache rebuilt") && strstr(log, "symbolic link"), "%s", log);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(log);
    struct stat sb;
    CHECK(lstat(entry, &sb) == 0 && S_ISREG(sb.st_mode)); /* replaced by a file of kiln's */
    /* writable by others */
    CHECK(chmod(entry, 0666) == 0);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache rebuilt") && strstr(log, "writable by every user"), "%s", log);
    kiln_session_destroy(s);
    free(log);
    if (geteuid() == 0) {
        CHECK(chown(entry, 12345, 12345) == 0);
        CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
        CHECK_MSG(strstr(log, "cache rebuilt") && strstr(log, "owned by uid 12345"), "%s", log);
        CHECK(s && check_outputs(s));
        kiln_session_destroy(s);
        free(log);
    }
    /* a 4 GiB sparse file: refused from its header, without reading it (was 12 s and 4.2 GB) */
    int fd = open(entry, O_WRONLY | O_TRUNC);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)4 << 30) == 0);
    if (fd >= 0) close(fd);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kn_cfile *f = NULL;
    CHECK_STATUS(kn_cfile_open_entry(entry, &f), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("not a kiln compiled file");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    CHECK_MSG(ms < 500, "rejecting a sparse 4 GiB entry took %.0f ms", ms);
    /* the same with a good header that declares the real size: refused by the size check */
    fd = open(entry, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, good, 4096 < n ? 4096 : n, 0) > 0);
    if (fd >= 0) close(fd);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_STATUS(kn_cfile_open_entry(entry, &f), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("trailing bytes");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    CHECK_MSG(ms < 500, "rejecting a sparse 4 GiB entry with a good header took %.0f ms", ms);
    kn_clear_error();
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache rebuilt"), "%s", log);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(log);
    free(good);
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
    ttf_rm_rf(elsewhere);
}

/* The bytes a session uses are the bytes that were verified: a cache entry changed in place or
 * truncated under a live session changes nothing and raises no SIGBUS (the entry used to stay
 * mapped: 573 of 6,616 starts gave wrong outputs while another process flipped bytes). */
KN_TEST(cache_entry_changed_under_a_live_session) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "live");
    kiln_session_options *o = opts_in(dir);
    kiln_session *s = NULL;
    char *log;
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    kiln_session_destroy(s);
    free(log);
    CHECK_STATUS(create_logged(model, o, &s, &log), KILN_OK);
    CHECK_MSG(strstr(log, "cache hit"), "%s", log);
    free(log);
    char entry[1024];
    CHECK(one_entry(dir, entry, sizeof entry));
    size_t n;
    uint8_t *d = read_file(entry, &n);
    CHECK(d != NULL);
    /* every weight byte flipped, in place (same inode) */
    kn_cfile *f = NULL;
    CHECK_STATUS(kn_cfile_open(entry, &f), KILN_OK);
    const kn_section *ws = f ? kn_cfile_section(f, KN_SECT_WEIGHTS, NULL) : NULL;
    CHECK(ws != NULL);
    if (d && ws) {
        for (uint64_t i = ws->offset; i < ws->offset + ws->size; i++) d[i] ^= 0x5a;
        int fd = open(entry, O_WRONLY);
        CHECK(fd >= 0 && pwrite(fd, d, n, 0) == (ssize_t)n);
        if (fd >= 0) close(fd);
    }
    kn_cfile_close(f);
    CHECK(s && check_outputs(s));
    /* truncated to nothing: still runs, no SIGBUS */
    CHECK(truncate(entry, 0) == 0);
    CHECK(s && check_outputs(s));
    kiln_session_destroy(s);
    free(d);
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
}

/* Starts while another process flips a weight byte of the entry in place, over and over (the
 * issue's attack: 573 of 6,616 starts gave wrong outputs when the entry stayed mapped). Every
 * start must give the right outputs: a start that reads a flipped byte fails its checksum and is
 * rebuilt, one that read a good copy keeps it. */
KN_TEST(cache_starts_while_the_entry_is_flipped_in_place) {
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "flip");
    kiln_session_options *o = opts_in(dir);
    kiln_session_options_set_log_level(o, KILN_LOG_ERROR);
    kiln_session *s = NULL;
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_OK);
    kiln_session_destroy(s);
    char entry[1024];
    CHECK(one_entry(dir, entry, sizeof entry));
    kn_cfile *f = NULL;
    CHECK_STATUS(kn_cfile_open(entry, &f), KILN_OK);
    const kn_section *ws = f ? kn_cfile_section(f, KN_SECT_WEIGHTS, NULL) : NULL;
    uint64_t w0 = ws ? ws->offset : 0, wn = ws ? ws->size : 0;
    kn_cfile_close(f);
    if (!wn) return;
    fflush(NULL);
    pid_t flipper = fork();
    if (flipper == 0) {
        /* flip a different weight byte each round, leave it flipped a while, flip it back */
        uint64_t r = 88172645463325252ull;
        for (;;) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            int fd = open(entry, O_RDWR);
            if (fd < 0) continue;
            uint8_t b;
            off_t at = (off_t)(w0 + r % wn);
            if (pread(fd, &b, 1, at) == 1) {
                b ^= 0xff;
                if (pwrite(fd, &b, 1, at) != 1) _exit(1);
                usleep(200);
                b ^= 0xff;
                if (pwrite(fd, &b, 1, at) != 1) _exit(1);
            }
            close(fd);
        }
    }
    int wrong = 0, starts = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        s = NULL;
        if (kiln_session_create(model, o, &s) != KILN_OK || !check_outputs(s)) wrong++;
        kiln_session_destroy(s);
        starts++;
        clock_gettime(CLOCK_MONOTONIC, &t1);
    } while (starts < 200 && (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000 < 1500);
    kill(flipper, SIGKILL);
    waitpid(flipper, NULL, 0);
    CHECK_MSG(wrong == 0, "%d of %d starts gave wrong outputs or failed", wrong, starts);
    CHECK(starts >= 5);
    kiln_session_options_destroy(o);
    ttf_rm_rf(dir);
}

/* A compiled file runs with the provider options it was compiled with: a caller's provider that
 * leaves an option unset takes the file's (the Python package names "cpu" without options), one
 * that sets it to another value is refused, and naming no provider adopts the file's list. */
KN_TEST(cache_compiled_file_runs_with_its_provider_options) {
    if (!kn_bf16_cpu_supported()) KN_SKIP("this CPU has no AVX512_BF16 (the file is compiled with cpu precision=bf16)");
    const char *model = zoo_model();
    if (!model) KN_SKIP("no fixture model (zoo field_conv1d_gemm or build/models/tiny_cnn)");
    char *dir = ttf_tmp_dir("cache", "popts");
    char path[600];
    snprintf(path, sizeof path, "%s/bf16.kiln", dir);
    const char *key[1] = {"precision"}, *bf16[1] = {"bf16"}, *fp32[1] = {"fp32"};
    kiln_session_options *o[4] = {0};
    for (int i = 0; i < 4; i++) {
        kiln_session_options_create(&o[i]);
        kiln_session_options_set_cache(o[i], 0, NULL);
        kiln_session_options_set_intra_op_threads(o[i], 1);
    }
    kiln_session_options_append_provider(o[0], "cpu", key, bf16, 1); /* compiles and saves the file */
    kiln_session_options_set_compiled_paths(o[0], path, NULL);
    kiln_session_options_append_provider(o[1], "cpu", NULL, NULL, 0); /* plain cpu */
    kiln_session_options_append_provider(o[2], "cpu", key, fp32, 1);  /* a conflicting precision */
    /* o[3]: no provider named */
    kiln_session *s = NULL;
    kn_tensor *want = NULL, *fp = NULL, *got = NULL;
    CHECK_STATUS(kiln_session_create(model, o[0], &s), KILN_OK);
    if (s) want = run_data_set(s);
    kiln_session_destroy(s);
    s = NULL;
    CHECK_STATUS(kiln_session_create(model, o[1], &s), KILN_OK);
    if (s) fp = run_data_set(s);
    kiln_session_destroy(s);
    s = NULL;
    CHECK(want && fp && kn_tensor_count(want) == kn_tensor_count(fp));
    if (want && fp && kn_tensor_count(want) == kn_tensor_count(fp)) {
        /* the fixture's products round differently in bf16: the comparisons below can tell */
        CHECK(memcmp(want->data, fp->data, (size_t)kn_tensor_count(want) * sizeof(float)) != 0);
        for (int i = 1; i < 4; i += 2) {
            CHECK_STATUS(kiln_session_create(path, o[i], &s), KILN_OK);
            if (s) got = run_data_set(s);
            CHECK_MSG(got && kn_tensor_count(got) == kn_tensor_count(want) &&
                          !memcmp(got->data, want->data, (size_t)kn_tensor_count(want) * sizeof(float)),
                      "options %d: the bf16 file's outputs differ from the bf16 session's", i);
            kn_tensor_free(got);
            got = NULL;
            kiln_session_destroy(s);
            s = NULL;
        }
    }
    /* and the session says so: plain cpu and no provider both report the file's precision */
    for (int i = 1; i < 4; i += 2) {
        const char *name = NULL;
        size_t n_opts = 0;
        const char *const *keys = NULL, *const *values = NULL;
        CHECK_STATUS(kiln_session_create(path, o[i], &s), KILN_OK);
        CHECK(s && kiln_session_provider_count(s) == 1);
        if (s) CHECK_STATUS(kiln_session_provider(s, 0, &name, &n_opts, &keys, &values), KILN_OK);
        CHECK_MSG(name && !strcmp(name, "cpu") && n_opts == 1 && !strcmp(keys[0], "precision") &&
                      !strcmp(values[0], "bf16"),
                  "options %d: the session does not report the file's cpu precision=bf16", i);
        kiln_session_destroy(s);
        s = NULL;
    }
    CHECK_STATUS(kiln_session_create(path, o[2], &s), KILN_ERR_CACHE);
    CHECK_ERROR_HAS("was compiled with cpu precision=bf16, and the session asks for precision=fp32");
    kiln_session_destroy(s);
    kn_tensor_free(want);
    kn_tensor_free(fp);
    for (int i = 0; i < 4; i++) kiln_session_options_destroy(o[i]);
    ttf_rm_rf(dir);
}
