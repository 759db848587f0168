#include "unit_zoo.h"

#include "onnx/loader.h"
#include "unit.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>

const char *kn_unit_zoo_dir(void) {
    static char buf[4096];
    const char *e = getenv("KILN_ZOO");
    if (e && *e) return e;
    snprintf(buf, sizeof buf, "%s/../shared/models", kn_unit_root());
    return buf;
}

int kn_unit_each_zoo_model(void (*fn)(const char *dir, const char *name, void *arg), void *arg) {
    const char *zoo = kn_unit_zoo_dir();
    DIR *d = opendir(zoo);
    if (!d) return 0;
    struct dirent *e;
    int models = 0;
    while ((e = readdir(d))) {
        char dir[4096], model[4200];
        snprintf(dir, sizeof dir, "%s/%s", zoo, e->d_name);
        snprintf(model, sizeof model, "%s/model.onnx", dir);
        struct stat sb;
        if (e->d_name[0] == '.' || stat(model, &sb) != 0) continue;
        models++;
        fn(dir, e->d_name, arg);
    }
    closedir(d);
    return models;
}

kiln_session *kn_unit_zoo_session(const char *dir, const char *name, int threads, int level) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    kiln_session_options *o = NULL;
    kiln_session_options_create(&o);
    kiln_session_options_set_cache(o, 0, NULL);
    kiln_session_options_set_opt_level(o, level);
    kiln_session_options_set_intra_op_threads(o, threads);
    kiln_session *s = NULL;
    kiln_status st = kiln_session_create(path, o, &s);
    kiln_session_options_destroy(o);
    CHECK_MSG(st == KILN_OK, "%s: %s", name, kiln_last_error());
    return s;
}

void kn_unit_zoo_read(const char *dir, kiln_session *s, kn_unit_zoo_data *d) {
    char path[4200];
    memset(d, 0, sizeof *d);
    d->n_in = kiln_session_input_count(s);
    d->n_out = kiln_session_output_count(s);
    if (d->n_in > KN_UNIT_ZOO_MAX_IO) d->n_in = KN_UNIT_ZOO_MAX_IO;
    if (d->n_out > KN_UNIT_ZOO_MAX_IO) d->n_out = KN_UNIT_ZOO_MAX_IO;
    for (size_t i = 0; i < d->n_in; i++) {
        kiln_value_info info;
        kiln_session_input_info(s, i, &info);
        d->names[i] = info.name;
        snprintf(path, sizeof path, "%s/test_data_set_0/input_%zu.pb", dir, i);
        kn_onnx_read_value_file(path, &d->in[i], NULL);
    }
    for (size_t i = 0; i < d->n_out; i++) {
        snprintf(path, sizeof path, "%s/test_data_set_0/output_%zu.pb", dir, i);
        kn_onnx_read_value_file(path, &d->want[i], NULL);
    }
}

void kn_unit_zoo_free(kn_unit_zoo_data *d) {
    for (size_t i = 0; i < KN_UNIT_ZOO_MAX_IO; i++) {
        kn_tensor_free(d->in[i]);
        kn_tensor_free(d->want[i]);
        d->in[i] = d->want[i] = NULL;
    }
}

double kn_unit_rel_l2(const kn_tensor *got, const kn_tensor *want) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < kn_tensor_count(want); i++) {
        double a = kn_tensor_get_f64(got, i), b = kn_tensor_get_f64(want, i);
        num += (a - b) * (a - b);
        den += b * b;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
