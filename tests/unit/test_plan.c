/* The compiled plan (src/exec/plan.h): one step per live node with its kernel and the attributes its
 * prepare hook read at compile time. What must hold: the steps are the live nodes in order; a
 * kernel with a hook runs on the block made at compile time (an attribute changed on the node
 * afterwards does not reach it), and on the node's own attributes without one (kn_ctx_params
 * falls back for another node or another hook, as a fused kernel's copy of its context is). */
#include "test_model_builder.h"

#include "backend/cpu/cpu.h"
#include "exec/exec.h"
#include "exec/plan.h"

static float run_step(const kn_step *s, const kn_params *params, float xv) {
    int64_t dims[2] = {1, 1};
    kn_tensor *x = NULL, *y = NULL;
    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, 2, dims, &x), KILN_OK);
    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, 2, dims, &y), KILN_OK);
    if (!x || !y) return 0;
    ((float *)x->data)[0] = xv;
    kn_tensor *in[1] = {x}, *out[1] = {y};
    kn_kernel_ctx kc = {.node = s->node, .n_inputs = 1, .in = in, .n_outputs = 1, .out = out, .params = params};
    CHECK_STATUS(s->cpu(&kc), KILN_OK);
    float r = ((float *)out[0]->data)[0];
    kn_tensor_free(x);
    kn_tensor_free(out[0]);
    return r;
}

KN_TEST(plan_steps_carry_attributes_read_at_compile_time) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[2] = {1, 1};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, xd, NULL);
    int a = tmb_value(&b, "a"), t = tmb_value(&b, "t"), y = tmb_value(&b, "y");
    int lr = tmb_node(&b, "LeakyRelu", (int[]){x}, 1, a);
    tmb_attr(&b, lr, "alpha", KN_ATTR_FLOAT)->f = 0.5f;
    int tr = tmb_node(&b, "Transpose", (int[]){a}, 1, t);
    tmb_ints(&b, tr, "perm", (int64_t[]){1, 0}, 2);
    tmb_node(&b, "Relu", (int[]){t}, 1, y);
    tmb_output(&b, y);
    kn_graph *g = b.g;
    kn_graph_recount(g);
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i].opset = 17; /* (the loader sets it from the imports) */
    CHECK_STATUS(kn_graph_resolve(g), KILN_OK);
    CHECK_STATUS(kn_graph_infer(g), KILN_OK);
    CHECK_STATUS(kn_graph_assign_cpu(g), KILN_OK);
    kn_plan *p = NULL;
    CHECK_STATUS(kn_plan_build(g, NULL, true, &p), KILN_OK);
    if (!p) {
        kn_model_free(b.m);
        return;
    }
    CHECK_EQ_INT(p->n_graphs, 1);
    const kn_graph_plan *gp = kn_plan_find(p, g);
    CHECK(gp == &p->graphs[0]);
    CHECK_EQ_INT(gp->n_steps, 3);
    const kn_step *s = gp->steps;
    CHECK(s[0].node == &g->nodes[lr] && s[0].idx == lr && s[0].cpu && s[0].params);
    CHECK(s[1].node == &g->nodes[tr] && s[1].params);
    CHECK(s[2].cpu && !s[2].params); /* Relu has no attributes: no hook */
    CHECK(s[0].flags & KN_STEP_OVERWRITES);
    /* the compiled block holds alpha 0.5; the node now says 0.25 */
    ((kn_attr *)kn_node_attr(&g->nodes[lr], "alpha"))->f = 0.25f;
    CHECK_NEAR(run_step(&s[0], s[0].params, -2.0f), -1.0f, 0);
    CHECK_NEAR(run_step(&s[0], NULL, -2.0f), -0.5f, 0);
    /* another node's block (Transpose's) or another hook is not taken: the node's own attributes */
    CHECK_NEAR(run_step(&s[0], s[1].params, -2.0f), -0.5f, 0);
    kn_kernel_ctx other = {.node = s[1].node, .params = s[0].params};
    char local[256];
    const void *got = NULL;
    const kn_cpu_kernel *k = g->nodes[lr].kernel;
    CHECK_STATUS(kn_ctx_params(&other, k->prepare, local, &got), KILN_OK);
    CHECK(got == local);
    kn_kernel_ctx same = {.node = s[0].node, .params = s[0].params};
    CHECK_STATUS(kn_ctx_params(&same, k->prepare, local, &got), KILN_OK);
    CHECK(got == s[0].params->data);
    kn_plan_free(p);
    /* a plan made for one run: steps without blocks */
    CHECK_STATUS(kn_plan_build(g, NULL, false, &p), KILN_OK);
    CHECK(p && p->graphs[0].n_steps == 3 && !p->graphs[0].steps[0].params && p->graphs[0].steps[0].cpu);
    kn_plan_free(p);
    kn_model_free(b.m);
}
