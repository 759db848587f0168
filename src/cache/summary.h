/* A read-only summary of an opened compiled file's sections, for `kiln inspect FILE.kiln`: what
 * the memory plan and the tuning records hold, without building a session. */
#ifndef KN_CACHE_SUMMARY_H
#define KN_CACHE_SUMMARY_H

#include "cache/format.h"

typedef struct kn_cfile_summary {
    bool has_plan;            /* a "memory.plan" section */
    uint64_t plan_arena_bytes;    /* the planned arena */
    uint64_t plan_unshared_bytes; /* the same values one buffer each */
    uint32_t plan_values;         /* values planned (slots of their own and views) */
    int n_tuning;                 /* tuning records over the "<provider>.tuning" sections */
    int n_tuning_sections;
} kn_cfile_summary;

/* Reads the memory plan's header and counts the tuning records of f (already validated by
 * kn_cfile_open). A malformed section is an error naming it. */
kiln_status kn_cfile_summarise(const kn_cfile *f, kn_cfile_summary *out);

#endif
