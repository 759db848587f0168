#include "opt/pass.h"

kiln_status kn_pass_fuse_elementwise(kn_opt_ctx *c) {
    (void)c;
    return KILN_OK;
}
