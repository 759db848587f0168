/* Files checked before they are read (issue 24): a FIFO given as the model or as external data is
 * refused, never waited on; external data reached through a hard link from outside the model's
 * folder is refused unless KILN_ALLOW_HARDLINKS=1. Each hang-prone case runs in a child process
 * with an alarm, so a regression fails the test instead of stalling the suite. */
#include "kiln.h"
#include "onnx/loader.h"
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

/* ---- a minimal protobuf writer: a model whose one initializer 'w' (float[4]) is external ---- */

typedef struct fpb {
    uint8_t d[2048];
    size_t n;
} fpb;

static void fpb_varint(fpb *b, uint64_t v) {
    while (v >= 0x80) {
        b->d[b->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b->d[b->n++] = (uint8_t)v;
}
static void fpb_int(fpb *b, int field, uint64_t v) {
    fpb_varint(b, (uint64_t)field << 3);
    fpb_varint(b, v);
}
static void fpb_bytes(fpb *b, int field, const void *p, size_t n) {
    fpb_varint(b, (uint64_t)field << 3 | 2);
    fpb_varint(b, n);
    memcpy(b->d + b->n, p, n);
    b->n += n;
}
static void fpb_str(fpb *b, int field, const char *s) { fpb_bytes(b, field, s, strlen(s)); }

static int write_bytes(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(d, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

/* <dir>/model.onnx with initializer 'w' in external file `location` (16 bytes at offset 0) */
static int write_external_model(const char *dir, const char *location) {
    fpb t = {0}, e = {0}, g = {0}, op = {0}, m = {0};
    fpb_int(&t, 1, 4);     /* dims */
    fpb_int(&t, 2, 1);     /* data_type FLOAT */
    fpb_str(&t, 8, "w");   /* name */
    fpb_str(&e, 1, "location");
    fpb_str(&e, 2, location);
    fpb_bytes(&t, 13, e.d, e.n); /* external_data */
    fpb_int(&t, 14, 1);          /* data_location EXTERNAL */
    fpb_str(&g, 2, "g");
    fpb_bytes(&g, 5, t.d, t.n); /* initializer */
    fpb_int(&m, 1, 8);          /* ir_version */
    fpb_str(&op, 1, "");
    fpb_int(&op, 2, 17);
    fpb_bytes(&m, 8, op.d, op.n); /* opset_import */
    fpb_bytes(&m, 7, g.d, g.n);   /* graph */
    char path[600];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    return write_bytes(path, m.d, m.n);
}

static char *files_tmp(const char *tag) {
    static char dirs[8][128];
    static int n;
    char *d = dirs[n++ % 8];
    snprintf(d, 128, "/tmp/kiln-files-test-%s-XXXXXX", tag);
    return mkdtemp(d);
}

static void files_rm(const char *dir) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
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
    char *dir = files_tmp("fifo");
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
    files_rm(dir);
}

KN_TEST(files_external_data_hard_links) {
    char *root = files_tmp("links");
    if (!root) KN_SKIP("cannot create a temporary folder");
    char dir[300], sub[300], outside[400], inside[400], other[400], model[400];
    snprintf(dir, sizeof dir, "%s/model", root);
    snprintf(sub, sizeof sub, "%s/model/sub", root);
    CHECK(mkdir(dir, 0755) == 0 && mkdir(sub, 0755) == 0);
    snprintf(outside, sizeof outside, "%s/secret.bin", root);
    snprintf(inside, sizeof inside, "%s/w.bin", dir);
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    float vals[4] = {1, 2, 3, 4};
    CHECK(write_bytes(outside, vals, sizeof vals) == 0);
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
    files_rm(root);
}

/* KILN_MODEL_READ=1: the .onnx is read into owned memory, so truncating or rewriting it under a
 * live session changes nothing (mapped in place, the default, it is the user's to leave alone). */
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
    char *dir = files_tmp("read");
    char path[300];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    CHECK(n > 0 && n < sizeof buf && write_bytes(path, buf, n) == 0);
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
    files_rm(dir);
}
