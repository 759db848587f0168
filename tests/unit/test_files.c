/* Files checked before they are read (issue 24): a FIFO given as the model or as external data is
 * refused, never waited on; external data reached through a hard link from outside the model's
 * folder is refused unless KILN_ALLOW_HARDLINKS=1. Each hang-prone case runs in a child process
 * with an alarm, so a regression fails the test instead of stalling the suite. */
#include "cache/cache.h"
#include "kiln.h"
#include "onnx/loader.h"
#include "test_pb_writer.h"
#include "test_tmpfiles.h"
#include "unit.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* <dir>/model.onnx with initializer 'w' in external file `location` (16 bytes at offset 0) */
static int write_external_model(const char *dir, const char *location) {
    pbw t = {0}, e = {0}, g = {0}, op = {0}, m = {0};
    w_int(&t, 1, 4);   /* dims */
    w_int(&t, 2, 1);   /* data_type FLOAT */
    w_str(&t, 8, "w"); /* name */
    w_str(&e, 1, "location");
    w_str(&e, 2, location);
    w_msg(&t, 13, &e); /* external_data */
    w_int(&t, 14, 1);  /* data_location EXTERNAL */
    w_str(&g, 2, "g");
    w_msg(&g, 5, &t); /* initializer */
    w_int(&m, 1, 8);  /* ir_version */
    w_str(&op, 1, "");
    w_int(&op, 2, 17);
    w_msg(&m, 8, &op); /* opset_import */
    w_msg(&m, 7, &g);  /* graph */
    char path[600];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    int rc = ttf_write(path, m.d, m.n);
    free(m.d);
    return rc;
}

/* Runs load(path) in a child with a 10 s alarm: 0 when the child returned an error (as it
 * should), 1 when it loaded, 2 when it hung or crashed. */
static int child_load(const char *path, bool session) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        int ok;
        if (session) {
            kiln_session_options *o = NULL;
            kiln_session_options_create(&o);
            kiln_session *s = NULL;
            ok = kiln_session_create(path, o, &s) == KILN_OK; /* cache on, as a user would have it */
            if (!ok) fprintf(stderr, "  (child) %s\n", kiln_last_error());
        } else {
            kn_model *m = NULL;
            ok = kn_onnx_load_file(path, &m) == KILN_OK;
            if (!ok) fprintf(stderr, "  (child) %s\n", kiln_last_error());
        }
        _exit(ok ? 1 : 0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return 2;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
}

KN_TEST(files_fifo_model_and_external_data_do_not_hang) {
    char *dir = ttf_tmp_dir("files", "fifo");
    if (!dir) KN_SKIP("cannot create a temporary folder");
    char fifo[400], cache[400];
    snprintf(fifo, sizeof fifo, "%s/model.onnx", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    setenv("KILN_CACHE_DIR", cache, 1);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_EQ_INT(child_load(fifo, true), 0); /* the session: cache key, compiled-file check, loader */
    CHECK_EQ_INT(child_load(fifo, false), 0);
    kn_model *m = NULL;
    CHECK_STATUS(kn_onnx_load_file(fifo, &m), KILN_ERR_IO);
    CHECK_ERROR_HAS("is a FIFO, not a regular file");
    unlink(fifo);
    /* external data as a FIFO */
    CHECK(write_external_model(dir, "w.bin") == 0);
    char data[400];
    snprintf(data, sizeof data, "%s/w.bin", dir);
    CHECK(mkfifo(data, 0600) == 0);
    CHECK_EQ_INT(child_load(fifo, true), 0);
    CHECK_STATUS(kn_onnx_load_file(fifo, &m), KILN_ERR_IO);
    CHECK_ERROR_HAS("external data file");
    CHECK_ERROR_HAS("is a FIFO");
    unsetenv("KILN_CACHE_DIR");
    ttf_rm_rf(dir);
}

KN_TEST(files_external_data_hard_links) {
    char *root = ttf_tmp_dir("files", "links");
    if (!root) KN_SKIP("cannot create a temporary folder");
    char dir[300], sub[300], outside[400], inside[400], other[400], model[400];
    snprintf(dir, sizeof dir, "%s/model", root);
    snprintf(sub, sizeof sub, "%s/model/sub", root);
    CHECK(mkdir(dir, 0755) == 0 && mkdir(sub, 0755) == 0);
    snprintf(outside, sizeof outside, "%s/secret.bin", root);
    snprintf(inside, sizeof inside, "%s/w.bin", dir);
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    float vals[4] = {1, 2, 3, 4};
    CHECK(ttf_write(outside, vals, sizeof vals) == 0);
    /* a file of another folder brought in by a hard link: refused */
    CHECK(link(outside, inside) == 0);
    CHECK(write_external_model(dir, "w.bin") == 0);
    kn_model *m = NULL;
    CHECK_STATUS(kn_onnx_load_file(model, &m), KILN_ERR_INVALID_MODEL);
    CHECK_ERROR_HAS("has 2 names (hard links) and only 1 of them is inside the model folder");
    CHECK_ERROR_HAS("KILN_ALLOW_HARDLINKS=1");
    /* allowed by the option */
    setenv("KILN_ALLOW_HARDLINKS", "1", 1);
    CHECK_STATUS(kn_onnx_load_file(model, &m), KILN_OK);
    if (m) CHECK_NEAR(((float *)m->graph->values[0].constant->data)[2], 3, 0);
    kn_model_free(m);
    m = NULL;
    unsetenv("KILN_ALLOW_HARDLINKS");
    /* both names inside the folder: fine */
    CHECK(unlink(outside) == 0);
    snprintf(other, sizeof other, "%s/copy.bin", sub);
    CHECK(link(inside, other) == 0);
    CHECK_STATUS(kn_onnx_load_file(model, &m), KILN_OK);
    kn_model_free(m);
    ttf_rm_rf(root);
}

/* KILN_MODEL_READ=1 (the default): the .onnx is read into owned memory, so truncating or
 * rewriting it under a live session changes nothing (a zoo model, whose weights are views into
 * those bytes). */
KN_TEST(files_model_read_option_survives_truncation) {
    char src[1200];
    const char *z = getenv("KILN_ZOO");
    if (z && *z) snprintf(src, sizeof src, "%s/field_conv1d_gemm/model.onnx", z);
    else snprintf(src, sizeof src, "%s/../shared/models/field_conv1d_gemm/model.onnx", kn_unit_root());
    FILE *f = fopen(src, "rb");
    if (!f) KN_SKIP("no zoo model field_conv1d_gemm");
    static uint8_t buf[4 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char *dir = ttf_tmp_dir("files", "read");
    char path[300];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    CHECK(n > 0 && n < sizeof buf && ttf_write(path, buf, n) == 0);
    setenv("KILN_MODEL_READ", "1", 1);
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_opt_level(o, 0);
    kiln_session *s = NULL;
    CHECK_STATUS(kiln_session_create(path, o, &s), KILN_OK);
    unsetenv("KILN_MODEL_READ");
    kiln_session_options_destroy(o);
    if (s) {
        kiln_value_info info;
        kiln_session_input_info(s, 0, &info);
        int64_t dims[8];
        for (int d = 0; d < info.rank; d++) dims[d] = info.dims[d] > 0 ? info.dims[d] : 1;
        kiln_tensor *in = NULL, *y1 = NULL, *y2 = NULL;
        CHECK_STATUS(kiln_tensor_create(info.dtype, dims, info.rank, &in), KILN_OK);
        float *x = kiln_tensor_data(in);
        for (int64_t i = 0; i < kiln_tensor_element_count(in); i++) x[i] = (float)(i % 7) * 0.25f;
        const char *names[1] = {info.name};
        CHECK_STATUS(kiln_session_run(s, names, &in, 1, NULL, 1, &y1), KILN_OK);
        /* overwrite in place, then truncate: the session has its own bytes */
        int fd = open(path, O_WRONLY);
        memset(buf, 0x7f, n);
        CHECK(fd >= 0 && pwrite(fd, buf, n, 0) == (ssize_t)n);
        if (fd >= 0) close(fd);
        CHECK(truncate(path, 0) == 0);
        CHECK_STATUS(kiln_session_run(s, names, &in, 1, NULL, 1, &y2), KILN_OK);
        CHECK(y1 && y2 && kiln_tensor_bytes(y1) == kiln_tensor_bytes(y2) &&
              !memcmp(kiln_tensor_data(y1), kiln_tensor_data(y2), kiln_tensor_bytes(y1)));
        kiln_tensor_destroy(in);
        kiln_tensor_destroy(y1);
        kiln_tensor_destroy(y2);
        kiln_session_destroy(s);
    }
    ttf_rm_rf(dir);
}

/* ---- a runnable model: y = x + w, x and w float[ADD_N]; w inline (raw_data) or in an external file ---- */

/* 16 KiB of weights: whole pages of the file hold nothing else, as in a real model (a page the
 * loader writes to, a name's, is copied by the private mapping and would hide a change) */
enum { ADD_N = 4096 };

/* <dir>/model.onnx computing y = x + w with w[i] = scale * (i + 1), inline, or (location non-NULL)
 * in that external file, which is written too. The file's size does not depend on scale. */
static int write_add_model(const char *dir, float scale, const char *location) {
    static float w[ADD_N];
    for (int i = 0; i < ADD_N; i++) w[i] = scale * (float)(i + 1);
    /* inline w starts at a 4-byte aligned offset of the file (a doc_string pads it), so that the
     * loader makes it a view into the file's bytes, as real models' weights are */
    for (int pad = 0; pad < 8; pad++) {
        pbw t = {0}, node = {0}, g = {0}, op = {0}, m = {0};
        w_int(&t, 1, ADD_N);
        w_int(&t, 2, 1);
        w_str(&t, 8, "w");
        char doc[8] = "xxxxxxx";
        doc[pad] = 0;
        w_str(&t, 12, doc);
        if (location) {
            pbw e = {0};
            w_str(&e, 1, "location");
            w_str(&e, 2, location);
            w_msg(&t, 13, &e);
            w_int(&t, 14, 1);
            char path[600];
            snprintf(path, sizeof path, "%s/%s", dir, location);
            if (ttf_write(path, w, sizeof w)) {
                free(t.d);
                return -1;
            }
        } else {
            w_bytes(&t, 9, w, sizeof w); /* raw_data */
        }
        w_str(&node, 1, "x");
        w_str(&node, 1, "w");
        w_str(&node, 2, "y");
        w_str(&node, 3, "add");
        w_str(&node, 4, "Add");
        w_msg(&g, 1, &node);
        w_str(&g, 2, "g");
        w_msg(&g, 5, &t);
        pbw x = value_info("x", 1, 1, (int64_t[]){ADD_N}), y = value_info("y", 1, 1, (int64_t[]){ADD_N});
        w_msg(&g, 11, &x);
        w_msg(&g, 12, &y);
        w_int(&m, 1, 8);
        w_str(&op, 1, "");
        w_int(&op, 2, 17);
        w_msg(&m, 8, &op);
        w_msg(&m, 7, &g);
        if (!location) {
            size_t at = 0;
            while (at + 16 <= m.n && memcmp(m.d + at, w, 16)) at++;
            if (at % 4) {
                free(m.d);
                continue;
            }
        }
        char path[600];
        snprintf(path, sizeof path, "%s/model.onnx", dir);
        int rc = ttf_write(path, m.d, m.n);
        free(m.d);
        return rc;
    }
    return -1;
}

/* Runs s on x = 1 (every element): whether it ran and y[i] == 1 + scale * (i + 1) everywhere. */
static bool run_add(kiln_session *s, float scale) {
    int64_t dims[1] = {ADD_N};
    kiln_tensor *in = NULL, *out = NULL;
    if (kiln_tensor_create(KILN_DTYPE_FLOAT, dims, 1, &in) != KILN_OK) return false;
    float *x = kiln_tensor_data(in);
    for (int i = 0; i < ADD_N; i++) x[i] = 1;
    const char *names[1] = {"x"};
    bool ok = kiln_session_run(s, names, &in, 1, NULL, 1, &out) == KILN_OK && kiln_tensor_bytes(out) == sizeof(float) * ADD_N;
    if (!ok) fprintf(stderr, "  run: %s\n", kiln_last_error());
    const float *y = ok ? kiln_tensor_data(out) : NULL;
    for (int i = 0; ok && i < ADD_N; i++)
        if (y[i] != 1 + scale * (float)(i + 1)) {
            fprintf(stderr, "  y[%d] = %g, expected %g\n", i, y[i], 1 + scale * (float)(i + 1));
            ok = false;
        }
    kiln_tensor_destroy(in);
    kiln_tensor_destroy(out);
    return ok;
}

static kiln_session *add_session(const char *model, const char *cache_dir) {
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, cache_dir != NULL, NULL);
    if (cache_dir) setenv("KILN_CACHE_DIR", cache_dir, 1);
    kiln_session *s = NULL;
    if (kiln_session_create(model, o, &s) != KILN_OK) fprintf(stderr, "  create: %s\n", kiln_last_error());
    kiln_session_options_destroy(o);
    return s;
}

/* The model file and its external data are read, not mapped (the default): rewriting them in
 * place or truncating them under a live session changes no output and cannot raise SIGBUS, with
 * the cache off and on. Run in a child so that a regression (SIGBUS) fails the test, not the
 * suite. */
KN_TEST(files_model_and_external_data_changed_under_a_live_session) {
    char *dir = ttf_tmp_dir("files", "live");
    if (!dir) KN_SKIP("cannot create a temporary folder");
    char model[400], data[400], cache[400];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    snprintf(data, sizeof data, "%s/w.bin", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    unsetenv("KILN_MODEL_READ"); /* the default */
    for (int ext = 0; ext < 2; ext++)
        for (int cached = 0; cached < 2; cached++) {
            CHECK(write_add_model(dir, 10, ext ? "w.bin" : NULL) == 0);
            fflush(NULL);
            pid_t pid = fork();
            if (pid == 0) {
                alarm(20);
                int bad = 0;
                kiln_session *s = add_session(model, cached ? cache : NULL);
                if (!s || !run_add(s, 10)) _exit(10);
                /* rewritten in place with other weights (same size), then truncated */
                struct stat sb;
                const char *changed = ext ? data : model;
                if (stat(changed, &sb) != 0) _exit(11);
                if (ext) {
                    static float w2[ADD_N];
                    for (int i = 0; i < ADD_N; i++) w2[i] = -(float)(i + 1);
                    int fd = open(data, O_WRONLY);
                    if (fd < 0 || pwrite(fd, w2, sizeof w2, 0) != (ssize_t)sizeof w2) _exit(12);
                    close(fd);
                } else {
                    /* the model with other weights has the same size and layout: write it
                     * elsewhere, copy its bytes over the model's in place */
                    char other[400], dir2[400];
                    snprintf(dir2, sizeof dir2, "%s/other", dir);
                    mkdir(dir2, 0700);
                    snprintf(other, sizeof other, "%s/model.onnx", dir2);
                    if (write_add_model(dir2, -1, NULL)) _exit(13);
                    static uint8_t buf[40000];
                    FILE *f = fopen(other, "rb");
                    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
                    if (f) fclose(f);
                    int fd = open(model, O_WRONLY);
                    if (n != (size_t)sb.st_size || fd < 0 || pwrite(fd, buf, n, 0) != (ssize_t)n) _exit(14);
                    close(fd);
                }
                if (!run_add(s, 10)) bad |= 1;
                if (truncate(changed, 0) != 0) _exit(15);
                if (!run_add(s, 10)) bad |= 2;
                kiln_session_destroy(s);
                _exit(bad ? 20 + bad : 0);
            }
            int status = 0;
            CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                fprintf(stderr, "  external=%d cache=%d: child %s %d\n", ext, cached,
                        WIFEXITED(status) ? "exited with" : "killed by signal",
                        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        }
    ttf_rm_rf(dir);
}

/* KILN_MODEL_READ=0 maps the .onnx in place instead (the file must then stay unchanged): the
 * session is the same. */
KN_TEST(files_model_mapped_on_request) {
    char *dir = ttf_tmp_dir("files", "map");
    if (!dir) KN_SKIP("cannot create a temporary folder");
    char model[400];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    CHECK(write_add_model(dir, 0.5f, NULL) == 0);
    setenv("KILN_MODEL_READ", "0", 1);
    kn_model_file f;
    CHECK_STATUS(kn_onnx_file_read(model, &f), KILN_OK);
    CHECK(f.mapped);
    kn_onnx_file_release(&f);
    /* w is a view into the file's bytes (what the live-session test needs to mean something) */
    kn_model *m = NULL;
    CHECK_STATUS(kn_onnx_load_file(model, &m), KILN_OK);
    if (m) {
        const kn_tensor *c = m->graph->values[0].constant;
        for (int v = 0; !c && v < m->graph->n_values; v++) c = m->graph->values[v].constant;
        CHECK(m->mapping && c && (const uint8_t *)c->data >= (const uint8_t *)m->mapping &&
              (const uint8_t *)c->data < (const uint8_t *)m->mapping + m->mapping_size);
    }
    kn_model_free(m);
    kiln_session *s = add_session(model, NULL);
    unsetenv("KILN_MODEL_READ");
    CHECK(s && run_add(s, 0.5f));
    kiln_session_destroy(s);
    CHECK_STATUS(kn_onnx_file_read(model, &f), KILN_OK);
    CHECK(!f.mapped);
    kn_onnx_file_release(&f);
    ttf_rm_rf(dir);
}

/* A model file changed between its cache key's hashing and its compile (a miss) must not have the
 * new version's compiled result stored under the old version's key: the old version, back on
 * disk, would then load the new one's weights on a hit. */
static char hook_dir[400];
static void change_model_after_key(const char *path) {
    (void)path;
    if (write_add_model(hook_dir, -1, NULL)) fprintf(stderr, "  hook: cannot rewrite the model\n");
}

KN_TEST(files_model_changed_between_key_and_compile_is_not_cached) {
    char *dir = ttf_tmp_dir("files", "toctou");
    if (!dir) KN_SKIP("cannot create a temporary folder");
    snprintf(hook_dir, sizeof hook_dir, "%s", dir);
    char model[400], cache[400];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    CHECK(write_add_model(dir, 10, NULL) == 0);
    kn_cache_test_after_key = change_model_after_key;
    kiln_session *s = add_session(model, cache);
    kn_cache_test_after_key = NULL;
    /* the session runs what it compiled: the new weights */
    CHECK(s && run_add(s, -1));
    kiln_session_destroy(s);
    /* the old version back: compiled afresh (nothing was stored under its key), its own weights */
    CHECK(write_add_model(dir, 10, NULL) == 0);
    s = add_session(model, cache);
    CHECK(s && run_add(s, 10));
    kiln_session_destroy(s);
    /* and a third session of it is a hit with the same outputs */
    s = add_session(model, cache);
    CHECK(s && run_add(s, 10));
    kiln_session_destroy(s);
    /* a save path (cache off): what was compiled is not what was keyed, so nothing is saved */
    char saved[500];
    snprintf(saved, sizeof saved, "%s/saved.kiln", dir);
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_compiled_paths(o, saved, NULL);
    kn_cache_test_after_key = change_model_after_key;
    s = NULL;
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_ERR_IO);
    CHECK_ERROR_HAS("changed while the session was being made");
    CHECK(!s && access(saved, F_OK) != 0);
    kn_cache_test_after_key = NULL;
    /* unchanged, it saves */
    CHECK_STATUS(kiln_session_create(model, o, &s), KILN_OK);
    CHECK(s && run_add(s, -1) && access(saved, F_OK) == 0);
    kiln_session_destroy(s);
    kiln_session_options_destroy(o);
    unsetenv("KILN_CACHE_DIR");
    ttf_rm_rf(dir);
}
