/* Control flow's typing facts shared with static inference (src/exec/infer.c). */
#ifndef KN_OPS_CONTROL_H
#define KN_OPS_CONTROL_H

#include "ir/graph.h"

/* Before a Loop's or Scan's body is inferred: gives each body input the model left untyped the
 * type the operator passes it (a Loop's iteration number int64 and condition bool scalars; a
 * loop-carried value or Scan state its initial value's element type, with no shape, since it may
 * change from one iteration to the next; a scan input's slice its input's type less the scan
 * axis). in: the node's input types (NULL for omitted or unknown ones). */
void kn_control_type_body_inputs(kn_node *n, const kn_type *const *in, int n_in);

#endif
