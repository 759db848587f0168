/* See summary.h. Reads only: the section layouts are the ones cache/backend.c writes. */
#include "cache/summary.h"

#include "cache/backend.h"
#include "cache/buf.h"

#include <string.h>

static kiln_status count_record(void *arg, const void *key, size_t kl, const void *val, size_t vl) {
    (void)key, (void)kl, (void)val, (void)vl;
    (*(int *)arg)++;
    return KILN_OK;
}

kiln_status kn_cfile_summarise(const kn_cfile *f, kn_cfile_summary *out) {
    memset(out, 0, sizeof *out);
    if (!f) return kn_error(KILN_ERR_INVALID_ARGUMENT, "no compiled file");
    for (int i = 0; i < f->n_sections; i++) {
        const kn_section *s = &f->sections[i];
        size_t len = strlen(s->name);
        if (s->kind == KN_SECT_BACKEND && !strcmp(s->name, "memory.plan")) {
            kn_rd r;
            kn_rd_init(&r, s->data, (size_t)s->size, f->path, "memory.plan");
            out->plan_arena_bytes = kn_rd_u64(&r, "arena bytes");
            out->plan_unshared_bytes = kn_rd_u64(&r, "unshared bytes");
            (void)kn_rd_u32(&r, "value count");
            out->plan_values = kn_rd_u32(&r, "planned values");
            if (!kn_rd_ok(&r)) return r.st;
            out->has_plan = true;
        } else if (s->kind == KN_SECT_BACKEND && len > 7 && !strcmp(s->name + len - 7, ".tuning")) {
            int n = 0;
            KN_TRY(kn_cache_tuning_parse(s->data, (size_t)s->size, f->path, count_record, &n));
            out->n_tuning += n;
            out->n_tuning_sections++;
        }
    }
    return KILN_OK;
}
