/* The cache's session options (the others are in src/api.c). */
#include "exec/session.h"

kiln_status kiln_session_options_set_cache_strict(kiln_session_options *o, int strict) {
    if (!o) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_session_options_set_cache_strict: options is NULL");
    o->cache_strict = strict != 0;
    return KILN_OK;
}

kiln_status kiln_session_options_set_cache_limit(kiln_session_options *o, uint64_t max_bytes) {
    if (!o) return kn_error(KILN_ERR_INVALID_ARGUMENT, "kiln_session_options_set_cache_limit: options is NULL");
    o->cache_max_bytes = max_bytes;
    return KILN_OK;
}
