/* The compiled plan (src/exec/plan.h): one step per live node with its kernel and the attributes its
 * prepare hook read at compile time (the CPU kernel's, or a device backend's through its
 * kernel_params). What must hold: the steps are the live nodes in order; a
 * kernel with a hook runs on the block made at compile time (an attribute changed on the node
 * afterwards does not reach it), and on the node's own attributes without one (kn_ctx_params
 * falls back for another node or another hook, as a fused kernel's copy of its context is). */
#include "test_model_builder.h"

#include "backend/backend.h"
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

/* g resolved, its shapes inferred, every node on the CPU, and its compiled plan (NULL on failure,
 * reported). */
static kn_plan *cpu_plan_of(kn_graph *g) {
    CHECK_STATUS(kn_graph_resolve(g), KILN_OK);
    CHECK_STATUS(kn_graph_infer(g), KILN_OK);
    CHECK_STATUS(kn_graph_assign_cpu(g), KILN_OK);
    kn_plan *p = NULL;
    CHECK_STATUS(kn_plan_build(g, NULL, true, &p), KILN_OK);
    return p;
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
    kn_plan *p = cpu_plan_of(g);
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

/* Runs step s's kernel on inputs in (n of them) into one output of out_dims, with the block params;
 * returns the output (to free) or NULL. */
static kn_tensor *run_kernel(const kn_step *s, const kn_params *params, kn_tensor **in, int n, int rank,
                             const int64_t *out_dims) {
    kn_tensor *y = NULL;
    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, rank, out_dims, &y), KILN_OK);
    if (!y) return NULL;
    kn_tensor *out[1] = {y};
    kn_kernel_ctx kc = {.node = s->node, .n_inputs = n, .in = in, .n_outputs = 1, .out = out, .params = params};
    kiln_status st = s->cpu(&kc);
    CHECK_STATUS(st, KILN_OK);
    if (st != KILN_OK) {
        kn_tensor_free(out[0]);
        return NULL;
    }
    return out[0];
}

static kn_tensor *filled(int rank, const int64_t *dims, const float *v) {
    kn_tensor *t = NULL;
    CHECK_STATUS(kn_tensor_new(KILN_DTYPE_FLOAT, rank, dims, &t), KILN_OK);
    if (t) memcpy(t->data, v, sizeof(float) * (size_t)kn_tensor_count(t));
    return t;
}

static bool same_floats(const kn_tensor *a, const kn_tensor *b) {
    return a && b && kn_tensor_count(a) == kn_tensor_count(b) &&
           !memcmp(a->data, b->data, sizeof(float) * (size_t)kn_tensor_count(a));
}

/* The kernels whose attributes the plan's note of 2026-12-03 listed as still read by name at run
 * time (Gemm, Einsum, Slice before opset 10, the attention family): each has a compiled block, runs
 * on it (Gemm: an alpha changed on the node afterwards does not reach it) and gives with it what it
 * gives reading the node. */
KN_TEST(plan_gemm_einsum_slice_attention_read_attributes_at_compile_time) {
    tmb b;
    tmb_init(&b, 23);
    int64_t xd[2] = {2, 4};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, xd, NULL);
    int w = tmb_const(&b, "w", 2, (int64_t[]){4, 4}, 0.5f);
    int gv = tmb_value(&b, "g"), ev = tmb_value(&b, "e"), sv = tmb_value(&b, "s"), av = tmb_value(&b, "a");
    int gm = tmb_node(&b, "Gemm", (int[]){x, w}, 2, gv);
    tmb_int(&b, gm, "transB", 1);
    tmb_attr(&b, gm, "alpha", KN_ATTR_FLOAT)->f = 2.0f;
    int es = tmb_node(&b, "Einsum", (int[]){gv, w}, 2, ev);
    tmb_str(&b, es, "equation", "ij,kj->ik");
    int sl = tmb_node(&b, "Slice", (int[]){ev}, 1, sv);
    tmb_ints(&b, sl, "starts", (int64_t[]){0, 1}, 2);
    tmb_ints(&b, sl, "ends", (int64_t[]){2, 3}, 2);
    /* x as [batch 1, seq 2, 2 heads of 2] */
    int64_t qd[3] = {1, 2, 4};
    int q = tmb_input(&b, "q", KILN_DTYPE_FLOAT, 3, qd, NULL);
    int at = tmb_node(&b, "Attention", (int[]){q, q, q}, 3, av);
    tmb_int(&b, at, "q_num_heads", 2);
    tmb_int(&b, at, "kv_num_heads", 2);
    tmb_int(&b, at, "is_causal", 1);
    tmb_output(&b, sv);
    tmb_output(&b, av);
    kn_graph *g = b.g;
    kn_graph_recount(g);
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i].opset = 23;
    g->nodes[sl].opset = 9; /* starts and ends as attributes */
    kn_plan *p = cpu_plan_of(g);
    if (!p) {
        kn_model_free(b.m);
        return;
    }
    const kn_graph_plan *gp = kn_plan_find(p, g);
    CHECK_EQ_INT(gp->n_steps, 4);
    for (int i = 0; i < gp->n_steps; i++) {
        const kn_cpu_kernel *k = gp->steps[i].node->kernel;
        CHECK_MSG(gp->steps[i].params && k->prepare && gp->steps[i].params->fn == k->prepare,
                  "%s has no compiled block", gp->steps[i].node->op_type);
    }
    const kn_step *s = gp->steps;
    float xv[8] = {1, 2, 3, 4, -1, 0.5f, 2, -3};
    kn_tensor *xt = filled(2, xd, xv), *wt = g->values[w].constant;
    /* Gemm: compiled alpha 2; the node now says 3 */
    ((kn_attr *)kn_node_attr(&g->nodes[gm], "alpha"))->f = 3.0f;
    kn_tensor *gin[2] = {xt, wt};
    kn_tensor *g2 = run_kernel(&s[0], s[0].params, gin, 2, 2, (int64_t[]){2, 4});
    kn_tensor *g3 = run_kernel(&s[0], NULL, gin, 2, 2, (int64_t[]){2, 4});
    if (g2 && g3)
        for (int i = 0; i < 8; i++) CHECK_NEAR(((float *)g3->data)[i], 1.5f * ((float *)g2->data)[i], 1e-5);
    /* Einsum, Slice, Attention: the same with the block and without */
    kn_tensor *ein[2] = {g2, wt};
    kn_tensor *e1 = run_kernel(&s[1], s[1].params, ein, 2, 2, (int64_t[]){2, 4});
    kn_tensor *e2 = run_kernel(&s[1], NULL, ein, 2, 2, (int64_t[]){2, 4});
    CHECK(same_floats(e1, e2));
    kn_tensor *sin_[1] = {e1};
    kn_tensor *s1 = run_kernel(&s[2], s[2].params, sin_, 1, 2, (int64_t[]){2, 2});
    kn_tensor *s2 = run_kernel(&s[2], NULL, sin_, 1, 2, (int64_t[]){2, 2});
    CHECK(same_floats(s1, s2));
    if (s1 && e1) {
        CHECK_NEAR(((float *)s1->data)[0], ((float *)e1->data)[1], 0);
        CHECK_NEAR(((float *)s1->data)[3], ((float *)e1->data)[6], 0);
    }
    kn_tensor *qt = filled(3, qd, xv);
    kn_tensor *ain[3] = {qt, qt, qt};
    kn_tensor *a1 = run_kernel(&s[3], s[3].params, ain, 3, 3, qd);
    kn_tensor *a2 = run_kernel(&s[3], NULL, ain, 3, 3, qd);
    CHECK(same_floats(a1, a2));
    /* causal: the first query sees only the first key, so its output is that key's value */
    if (a1)
        for (int i = 0; i < 4; i++) CHECK_NEAR(((float *)a1->data)[i], xv[i], 1e-6);
    kn_tensor *all[] = {xt, g2, g3, e1, e2, s1, s2, qt, a1, a2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kn_tensor_free(all[i]);
    kn_plan_free(p);
    kn_model_free(b.m);
}

/* A device backend's kernels get their blocks too: the plan asks the backend's kernel_params for
 * the hook of the node's kernel (a stand-in backend here: the CUDA kernels' path, without a GPU). */
static int fake_hook_calls;
static kiln_status fake_prepare(const kn_node *n, void *params) {
    fake_hook_calls++;
    *(int64_t *)params = kn_attr_int(n, "alpha", 7) + 1000;
    return KILN_OK;
}
static kn_params_fn fake_kernel_params(const void *kernel, size_t *bytes) {
    *bytes = sizeof(int64_t);
    return kernel == (const void *)&fake_hook_calls ? fake_prepare : NULL;
}
static const kn_backend_ops fake_device = {.name = "fake", .device = KN_DEVICE_CUDA, .kernel_params = fake_kernel_params};

KN_TEST(plan_device_steps_get_their_backends_prepared_parameters) {
    tmb b;
    tmb_init(&b, 17);
    int64_t xd[2] = {1, 4};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 2, xd, NULL);
    int a = tmb_value(&b, "a"), y = tmb_value(&b, "y");
    int n0 = tmb_node(&b, "LeakyRelu", (int[]){x}, 1, a);
    tmb_int(&b, n0, "alpha", 5);
    int n1 = tmb_node(&b, "Relu", (int[]){a}, 1, y);
    tmb_output(&b, y);
    kn_graph *g = b.g;
    kn_graph_recount(g);
    kn_runtime rt;
    memset(&rt, 0, sizeof rt);
    rt.n_backends = 1;
    rt.backends[0].ops = &fake_device;
    g->nodes[n0].provider = g->nodes[n1].provider = 0;
    g->nodes[n0].kernel = (void *)&fake_hook_calls; /* the stand-in's kernel with a hook */
    g->nodes[n1].kernel = (void *)&rt;              /* ... and one without */
    fake_hook_calls = 0;
    kn_plan *p = NULL;
    CHECK_STATUS(kn_plan_build(g, &rt, true, &p), KILN_OK);
    if (p) {
        const kn_step *s = p->graphs[0].steps;
        CHECK_EQ_INT(p->graphs[0].n_steps, 2);
        CHECK(s[0].flags & KN_STEP_DEVICE);
        CHECK(!s[0].cpu && s[0].be == &rt.backends[0]);
        CHECK(s[0].params && s[0].params->fn == fake_prepare && s[0].params->node == &g->nodes[n0]);
        int64_t got = 0;
        if (s[0].params) memcpy(&got, s[0].params->data, sizeof got);
        CHECK_EQ_INT(got, 1005);
        CHECK(!s[1].params);
        CHECK_EQ_INT(fake_hook_calls, 1); /* once, at compile time */
        kn_plan_free(p);
    }
    /* a plan made for one run has no blocks */
    CHECK_STATUS(kn_plan_build(g, &rt, false, &p), KILN_OK);
    if (p) CHECK(!p->graphs[0].steps[0].params);
    kn_plan_free(p);
    CHECK_EQ_INT(fake_hook_calls, 1);
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i].kernel = NULL;
    kn_model_free(b.m);
}

#ifdef KILN_HAVE_CUDA
#include "ops/attention.h"
#include "ops/linalg_util.h"
#include "ops/tensor_util.h"

/* The CUDA kernels read their attributes from the plan's blocks too: for a node of each converted
 * family the kernel the CUDA backend selects names a prepare hook (through kernel_params) that fills
 * its block from the node. No GPU needed: select and the hooks run on the host. */
KN_TEST(cuda_kernels_name_their_prepare_hooks) {
    tmb b;
    tmb_init(&b, 23);
    int64_t xd[3] = {1, 2, 4};
    int x = tmb_input(&b, "x", KILN_DTYPE_FLOAT, 3, xd, NULL);
    struct {
        const char *op;
        int n_in;
        int node;
    } cases[] = {{"LeakyRelu", 1, 0}, {"Mod", 2, 0},     {"Cast", 1, 0},          {"Transpose", 1, 0},
                 {"Concat", 2, 0},    {"Gather", 2, 0},  {"Slice", 1, 0},         {"Softmax", 1, 0},
                 {"ReduceMax", 1, 0}, {"Einsum", 2, 0},  {"Attention", 3, 0},     {"LayerNormalization", 1, 0},
                 {"ArgMax", 1, 0},    {"QuantizeLinear", 2, 0}, {"Pad", 2, 0},          {"Resize", 1, 0}};
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n_cases; i++) {
        int ins[3] = {x, x, x};
        cases[i].node = tmb_node(&b, cases[i].op, ins, cases[i].n_in, tmb_value(&b, cases[i].op));
    }
    kn_graph *g = b.g;
    kn_node *slice = &g->nodes[cases[6].node], *einsum = &g->nodes[cases[9].node], *attn = &g->nodes[cases[10].node];
    tmb_int(&b, cases[0].node, "alpha", 2);
    tmb_int(&b, cases[2].node, "to", KILN_DTYPE_FLOAT16);
    tmb_ints(&b, cases[6].node, "starts", (int64_t[]){0, 1}, 2);
    tmb_ints(&b, cases[6].node, "ends", (int64_t[]){1, 3}, 2);
    tmb_str(&b, cases[9].node, "equation", "bij,bkj->bik");
    tmb_int(&b, cases[10].node, "q_num_heads", 2);
    tmb_int(&b, cases[10].node, "kv_num_heads", 1);
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i].opset = 23;
    slice->opset = 9;
    kn_type t = {0};
    t.kind = KN_TYPE_TENSOR;
    t.dtype = KILN_DTYPE_FLOAT;
    t.rank = 3;
    for (int d = 0; d < 3; d++) t.dims[d].value = xd[d];
    kn_type ti = t;
    ti.dtype = KILN_DTYPE_INT64;
    ti.rank = 1;
    const kn_backend_ops *cu = kn_backend_find("cuda");
    CHECK(cu && cu->kernel_params);
    if (!cu || !cu->kernel_params) {
        kn_model_free(b.m);
        return;
    }
    for (int i = 0; i < n_cases; i++) {
        kn_node *n = &g->nodes[cases[i].node];
        const kn_type *in[3] = {&t, &t, &t};
        if (!strcmp(n->op_type, "Gather") || !strcmp(n->op_type, "Pad")) in[1] = &ti;
        char why[256] = "";
        const void *k = cu->select(NULL, n, in, cases[i].n_in, why, sizeof why);
        CHECK_MSG(k != NULL, "%s: no CUDA kernel (%s)", n->op_type, why);
        if (!k) continue;
        size_t bytes = 0;
        kn_params_fn fn = cu->kernel_params(k, &bytes);
        CHECK_MSG(fn && bytes > 0, "%s: the CUDA kernel has no prepare hook", n->op_type);
        if (!fn) continue;
        max_align_t block[64];
        CHECK(bytes <= sizeof block);
        CHECK_STATUS(fn(n, block), KILN_OK);
        const void *p = block;
        if (n == slice) {
            CHECK(fn == kn_slice_prepare);
            const kn_slice_prm *s = p;
            CHECK(s->n_starts == 2 && s->starts && s->starts[1] == 1 && s->n_ends == 2 && s->ends[1] == 3);
        } else if (n == einsum) {
            CHECK(fn == kn_einsum_prepare && !strcmp(((const kn_einsum_prm *)p)->equation, "bij,bkj->bik"));
        } else if (n == attn) {
            const kn_attn_attrs *a = p;
            CHECK(fn == kn_attn_attrs_prepare && a->q_heads == 2 && a->kv_heads == 1 && !a->has_scale &&
                  a->left_window == -1);
        }
    }
    kn_model_free(b.m);
}
#endif
