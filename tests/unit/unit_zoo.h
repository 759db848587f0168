/* The model zoo for the unit tests: where it is, each of its models, and a model's
 * test_data_set_0 (inputs named as the session names them, reference outputs). */
#ifndef KN_UNIT_ZOO_H
#define KN_UNIT_ZOO_H

#include "ir/tensor.h"
#include "kiln.h"

#define KN_UNIT_ZOO_MAX_IO 16

typedef struct kn_unit_zoo_data {
    size_t n_in, n_out; /* the session's counts, at most KN_UNIT_ZOO_MAX_IO */
    const char *names[KN_UNIT_ZOO_MAX_IO];
    kn_tensor *in[KN_UNIT_ZOO_MAX_IO], *want[KN_UNIT_ZOO_MAX_IO];
} kn_unit_zoo_data;

/* $KILN_ZOO, else ../shared/models beside the source tree. */
const char *kn_unit_zoo_dir(void);
/* Calls fn(dir, name, arg) for every model folder of the zoo; returns how many (0: no zoo). */
int kn_unit_each_zoo_model(void (*fn)(const char *dir, const char *name, void *arg), void *arg);
/* A session of the zoo model in dir (name: its folder's name, for the message) on the CPU, no
 * cache, `threads` intra-op threads (0: one a core) at optimisation level `level` (3: the
 * default); NULL, the failure recorded, where it was refused. */
kiln_session *kn_unit_zoo_session(const char *dir, const char *name, int threads, int level);
/* Reads test_data_set_0 of the zoo model in dir for session s; kn_unit_zoo_free releases it. */
void kn_unit_zoo_read(const char *dir, kiln_session *s, kn_unit_zoo_data *d);
void kn_unit_zoo_free(kn_unit_zoo_data *d);
/* ||got - want|| / ||want|| (or ||got - want|| when want is zero). */
double kn_unit_rel_l2(const kn_tensor *got, const kn_tensor *want);

#endif
