/* Chains of elementwise operators into one kiln.FusedElementwise node (src/ops/fused.h).
 *
 * A chain grows backwards from a root (an elementwise node whose output leaves the chain) over
 * producers that are elementwise too and whose output nobody outside the chain reads, so the
 * chain is convex and only the root's output is ever written to memory. Scalar constants become
 * constant registers of the program; other inputs (broadcast or not) become inputs of the node.
 * The fused output is the broadcast of the chain's inputs, which is the root's shape: every
 * intermediate broadcasts to the root (each operator's output is the broadcast of its operands),
 * so computing an intermediate at the root's element is the same as broadcasting it.
 *
 * Runs after the other fusions, so a chain never takes an activation a Conv/Gemm/MatMul epilogue
 * or a GELU/LayerNorm/attention pattern would have taken. */
#include "opt/pass.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One node as a program step. */
typedef struct chain_step {
    int op;          /* kn_chain_op */
    int n_operands;  /* 1 or 2 */
    float p0, p1;
} chain_step;

/* The chain operator named op_type (kn_chain_op_name: ONNX's names), or -1. */
static int chain_op_named(const char *op_type) {
    for (int op = 0; op < KN_CHAIN_OP_END_; op++) {
        const char *name = kn_chain_op_name(op);
        if (name && !strcmp(name, op_type)) return op;
    }
    return -1;
}

/* Whether the node can be a step of a chain, and which. Every input and the output must be
 * tensors of the same floating type (float32/float16/bfloat16) with known rank. */
static bool as_step(const kn_opt_ctx *c, int node, chain_step *s) {
    const kn_node *n = &c->g->nodes[node];
    if (n->dead || n->n_outputs != 1 || n->outputs[0] < 0) return false;
    int y = n->outputs[0];
    if (!kn_opt_is_float(c, y)) return false;
    kiln_dtype dt = c->g->values[y].type.dtype;
    memset(s, 0, sizeof *s);
    bool kiln_gelu = !strcmp(n->domain, "kiln") && !strcmp(n->op_type, "Gelu");
    if (n->domain[0] && !kiln_gelu) return false;
    int op = chain_op_named(n->op_type);
    if (op < 0 || op == KN_CHAIN_GELU_TANH) return false; /* GeluTanh is Gelu's attribute, not an operator */
    s->op = op;
    s->n_operands = kn_chain_op_binary(op) ? 2 : 1;
    if (s->n_operands == 2 && n->n_inputs != 2) return false; /* Max/Min of one or three */
    switch (op) {
    case KN_CHAIN_LEAKY_RELU: s->p0 = kn_attr_float(n, "alpha", 0.01f); break;
    case KN_CHAIN_ELU: s->p0 = kn_attr_float(n, "alpha", 1.0f); break;
    case KN_CHAIN_SELU:
        s->p0 = kn_attr_float(n, "alpha", 1.67326319217681884765625f);
        s->p1 = kn_attr_float(n, "gamma", 1.05070102214813232421875f);
        break;
    case KN_CHAIN_HARD_SIGMOID:
        s->p0 = kn_attr_float(n, "alpha", 0.2f);
        s->p1 = kn_attr_float(n, "beta", 0.5f);
        break;
    case KN_CHAIN_GELU: {
        if (!kiln_gelu && n->opset < 20) return false;
        const char *mode = kn_attr_string(n, "approximate", "none");
        if (strcmp(mode, "none") && strcmp(mode, "tanh")) return false;
        if (!strcmp(mode, "tanh")) s->op = KN_CHAIN_GELU_TANH;
        break;
    }
    case KN_CHAIN_CLIP:
        if (!kn_opt_clip_bounds(c, node, &s->p0, &s->p1)) return false;
        break;
    default: break;
    }
    for (int i = 0; i < s->n_operands; i++) {
        int v = kn_opt_input(c, node, i);
        if (v < 0 || !kn_opt_is_float(c, v) || c->g->values[v].type.dtype != dt) return false;
    }
    return true;
}

typedef struct chain {
    int nodes[KN_CHAIN_MAX_STEPS];
    chain_step steps[KN_CHAIN_MAX_STEPS];
    int n;
} chain;

static bool in_chain(const chain *ch, int node) {
    for (int i = 0; i < ch->n; i++)
        if (ch->nodes[i] == node) return true;
    return false;
}

/* Adds producers of the chain's inputs while any qualifies (one whose output only the chain
 * reads); taken[0..n_taken) marks nodes already in another chain (later nodes are this pass's
 * own fused nodes). */
static void grow(const kn_opt_ctx *c, chain *ch, const bool *taken, int n_taken) {
    bool added = true;
    while (added && ch->n < KN_CHAIN_MAX_STEPS) {
        added = false;
        for (int i = 0; i < ch->n && ch->n < KN_CHAIN_MAX_STEPS; i++) {
            const kn_node *n = &c->g->nodes[ch->nodes[i]];
            for (int k = 0; k < ch->steps[i].n_operands; k++) {
                int v = n->inputs[k], p = kn_opt_producer(c, v);
                if (p < 0 || p >= n_taken || taken[p] || in_chain(ch, p)) continue;
                if (!kn_opt_used_only_by(c, v, ch->nodes, ch->n)) continue;
                chain_step s;
                if (!as_step(c, p, &s)) continue;
                ch->nodes[ch->n] = p;
                ch->steps[ch->n++] = s;
                added = true;
                if (ch->n == KN_CHAIN_MAX_STEPS) break;
            }
        }
    }
}

/* The program's registers: inputs, then constants, then steps in graph order. */
typedef struct program {
    int inputs[KN_CHAIN_MAX_INPUTS], n_inputs;
    int const_values[KN_CHAIN_MAX_CONSTS]; /* the value each constant register came from */
    float consts[KN_CHAIN_MAX_CONSTS];
    int n_consts;
    int64_t code[3 * KN_CHAIN_MAX_STEPS];
    float params[2 * KN_CHAIN_MAX_STEPS];
    int n_steps;
} program;

/* Whether value v becomes a constant register: a one-element constant that cannot widen the
 * output's rank (rank 0, or at most max_rank: the rank of the chain's other inputs). */
static bool as_constant(const kn_opt_ctx *c, int v, int max_rank, double *val) {
    const kn_tensor *t = kn_opt_const(c, v);
    if (!t || !kn_opt_scalar(c, v, val)) return false;
    return t->rank == 0 || t->rank <= max_rank;
}

/* Orders the chain by graph position (the root, the sink, is last) and writes the program;
 * false when it needs more registers than a program has. */
static bool build(const kn_opt_ctx *c, chain *ch, int const_rank, program *p) {
    for (int i = 1; i < ch->n; i++) /* insertion sort: a chain has at most 16 nodes */
        for (int j = i; j > 0 && ch->nodes[j - 1] > ch->nodes[j]; j--) {
            int tn = ch->nodes[j];
            chain_step ts = ch->steps[j];
            ch->nodes[j] = ch->nodes[j - 1], ch->steps[j] = ch->steps[j - 1];
            ch->nodes[j - 1] = tn, ch->steps[j - 1] = ts;
        }
    memset(p, 0, sizeof *p);
    /* first pass: the external operands, split into inputs and constants */
    for (int i = 0; i < ch->n; i++) {
        const kn_node *n = &c->g->nodes[ch->nodes[i]];
        for (int k = 0; k < ch->steps[i].n_operands; k++) {
            int v = n->inputs[k], prod = kn_opt_producer(c, v);
            if (prod >= 0 && in_chain(ch, prod)) continue;
            bool seen = false;
            for (int j = 0; j < p->n_inputs; j++) seen |= p->inputs[j] == v;
            for (int j = 0; j < p->n_consts; j++) seen |= p->const_values[j] == v;
            if (seen) continue;
            double val;
            if (as_constant(c, v, const_rank, &val)) {
                if (p->n_consts == KN_CHAIN_MAX_CONSTS) return false;
                p->const_values[p->n_consts] = v;
                p->consts[p->n_consts++] = (float)val;
            } else {
                if (p->n_inputs == KN_CHAIN_MAX_INPUTS) return false;
                p->inputs[p->n_inputs++] = v;
            }
        }
    }
    if (p->n_inputs == 0) return false; /* all constant: constant folding's work */
    /* second pass: the steps */
    for (int i = 0; i < ch->n; i++) {
        const kn_node *n = &c->g->nodes[ch->nodes[i]];
        int64_t reg[2] = {-1, -1};
        for (int k = 0; k < ch->steps[i].n_operands; k++) {
            int v = n->inputs[k], prod = kn_opt_producer(c, v);
            if (prod >= 0 && in_chain(ch, prod)) {
                for (int j = 0; j < i; j++)
                    if (ch->nodes[j] == prod) reg[k] = p->n_inputs + p->n_consts + j;
            } else {
                for (int j = 0; j < p->n_inputs; j++)
                    if (p->inputs[j] == v) reg[k] = j;
                for (int j = 0; j < p->n_consts; j++)
                    if (p->const_values[j] == v) reg[k] = p->n_inputs + j;
            }
            if (reg[k] < 0) return false; /* a producer after its reader: the graph is not sorted */
        }
        p->code[3 * i] = ch->steps[i].op;
        p->code[3 * i + 1] = reg[0];
        p->code[3 * i + 2] = reg[1];
        p->params[2 * i] = ch->steps[i].p0;
        p->params[2 * i + 1] = ch->steps[i].p1;
    }
    p->n_steps = ch->n;
    return true;
}

/* Mish as exporters before opset 18 write it, x * tanh(softplus(x)), becomes one Mish step (one
 * exponential instead of an exponential, a logarithm and a tanh; the unfused Mish kernel's
 * formula). The Softplus and Tanh steps must have no other reader; they are dropped and the
 * registers after them renumbered. */
static void fold_mish(program *p) {
    int base = p->n_inputs + p->n_consts, n = p->n_steps;
    int uses[KN_CHAIN_MAX_STEPS] = {0};
    for (int k = 0; k < n; k++)
        for (int o = 1; o <= 2; o++)
            if (p->code[3 * k + o] >= base) uses[p->code[3 * k + o] - base]++;
    bool dead[KN_CHAIN_MAX_STEPS] = {false};
    bool changed = false;
    for (int k = 0; k < n; k++) {
        if (p->code[3 * k] != KN_CHAIN_MUL) continue;
        for (int o = 1; o <= 2; o++) {
            int64_t t = p->code[3 * k + o], x = p->code[3 * k + 3 - o]; /* tanh(...) and x */
            if (t < base || dead[t - base] || p->code[3 * (t - base)] != KN_CHAIN_TANH || uses[t - base] != 1) continue;
            int64_t sp = p->code[3 * (t - base) + 1];
            if (sp < base || p->code[3 * (sp - base)] != KN_CHAIN_SOFTPLUS || uses[sp - base] != 1 ||
                p->code[3 * (sp - base) + 1] != x)
                continue;
            dead[t - base] = dead[sp - base] = true;
            p->code[3 * k] = KN_CHAIN_MISH;
            p->code[3 * k + 1] = x;
            p->code[3 * k + 2] = -1;
            p->params[2 * k] = p->params[2 * k + 1] = 0;
            changed = true;
            break;
        }
    }
    if (!changed) return;
    int64_t renumber[KN_CHAIN_MAX_STEPS];
    int live = 0;
    for (int k = 0; k < n; k++) {
        renumber[k] = base + live;
        if (dead[k]) continue;
        for (int o = 1; o <= 2; o++) {
            int64_t r = p->code[3 * k + o];
            p->code[3 * live + o] = r >= base ? renumber[r - base] : r;
        }
        p->code[3 * live] = p->code[3 * k];
        p->params[2 * live] = p->params[2 * k];
        p->params[2 * live + 1] = p->params[2 * k + 1];
        live++;
    }
    p->n_steps = live;
}

/* The largest rank among the chain's operands that are not one-element constants. */
static int operand_rank(const kn_opt_ctx *c, const chain *ch) {
    int r = 0;
    for (int i = 0; i < ch->n; i++) {
        const kn_node *n = &c->g->nodes[ch->nodes[i]];
        for (int k = 0; k < ch->steps[i].n_operands; k++) {
            int v = n->inputs[k], prod = kn_opt_producer(c, v);
            const kn_tensor *t = kn_opt_const(c, v);
            if ((prod >= 0 && in_chain(ch, prod)) || (t && kn_tensor_count(t) == 1)) continue;
            if (c->g->values[v].type.rank > r) r = c->g->values[v].type.rank;
        }
    }
    return r;
}

kiln_status kn_pass_fuse_elementwise(kn_opt_ctx *c) {
    kn_graph *g = c->g;
    int n_nodes = g->n_nodes;
    bool *taken = calloc((size_t)n_nodes + 1, sizeof *taken);
    if (!taken) return KN_OOM();
    kiln_status st = KILN_OK;
    bool fused = false;
    /* roots from the end, so each chain starts at its sink */
    for (int root = n_nodes - 1; root >= 0 && st == KILN_OK; root--) {
        chain ch = {.n = 1, .nodes = {root}};
        if (taken[root] || !as_step(c, root, &ch.steps[0])) continue;
        grow(c, &ch, taken, n_nodes);
        if (ch.n < 2) continue;
        int y = g->nodes[root].outputs[0];
        program prog;
        /* one-element constants up to the other operands' rank become registers; any of higher
         * rank stays an input, so the inputs broadcast to the root's rank */
        if (!build(c, &ch, operand_rank(c, &ch), &prog)) continue;
        int in_rank = 0;
        for (int i = 0; i < prog.n_inputs; i++)
            if (g->values[prog.inputs[i]].type.rank > in_rank) in_rank = g->values[prog.inputs[i]].type.rank;
        if (in_rank != g->values[y].type.rank) continue;
        kn_opt_proto p;
        kn_proto_init(&p, "kiln", "FusedElementwise");
        for (int i = 0; i < prog.n_inputs; i++) kn_proto_in(&p, prog.inputs[i]);
        kn_proto_out(&p, y);
        fold_mish(&prog);
        kn_proto_ints(&p, "program", prog.code, 3 * prog.n_steps);
        kn_proto_floats(&p, "params", prog.params, 2 * prog.n_steps);
        if (prog.n_consts) kn_proto_floats(&p, "constants", prog.consts, prog.n_consts);
        int node;
        st = kn_opt_emit(c, &p, root, &node);
        if (st != KILN_OK || node < 0) continue;
        for (int i = 0; i < ch.n; i++) {
            taken[ch.nodes[i]] = true;
            kn_opt_kill(c, ch.nodes[i]);
        }
        kn_opt_note(c, "elementwise chain");
        fused = true;
    }
    free(taken);
    /* one refresh at the end, not one per chain (that made the pass O(n^2) on long chains: a
     * 80k-node chain took 70 s at level 2). The tables the loop reads stay right for it: a later
     * root is an earlier node, and a value a fused chain read lists a killed (taken) node where a
     * refresh would list the fused one: neither is in the chain being grown, so either way the
     * chain stops there; the fused node's output keeps a dead producer, which grow() never takes. */
    if (st == KILN_OK && fused) st = kn_opt_refresh(c);
    return st;
}
