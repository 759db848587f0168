/* Hand-built nodes for unit tests that call an operator's infer function or kernel directly:
 * a node with up to 8 attributes, all storage inside the struct. */
#ifndef KN_TEST_NODES_H
#define KN_TEST_NODES_H

#include "ir/graph.h"

#include <string.h>

typedef struct tnode {
    kn_node node;
    kn_attr attrs[8];
} tnode;

static inline void tn_init(tnode *t, const char *op, int opset) {
    memset(t, 0, sizeof *t);
    t->node.name = "t";
    t->node.op_type = op;
    t->node.domain = "";
    t->node.opset = opset;
    t->node.attrs = t->attrs;
}
static inline void tn_int(tnode *t, const char *name, int64_t v) {
    kn_attr *a = &t->attrs[t->node.n_attrs++];
    a->name = name, a->type = KN_ATTR_INT, a->i = v;
}
static inline void tn_float(tnode *t, const char *name, float v) {
    kn_attr *a = &t->attrs[t->node.n_attrs++];
    a->name = name, a->type = KN_ATTR_FLOAT, a->f = v;
}
static inline void tn_ints(tnode *t, const char *name, int64_t *v, int n) {
    kn_attr *a = &t->attrs[t->node.n_attrs++];
    a->name = name, a->type = KN_ATTR_INTS, a->ints = v, a->n = n;
}
static inline void tn_string(tnode *t, const char *name, const char *s) {
    kn_attr *a = &t->attrs[t->node.n_attrs++];
    a->name = name, a->type = KN_ATTR_STRING, a->s = s, a->s_len = strlen(s);
}

#endif
