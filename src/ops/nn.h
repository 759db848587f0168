/* Helpers of the nn family shared by its shape inference (src/ops/nn.c) and its CPU kernels
 * (src/backend/cpu/nn*.c), so both read attributes the same way. */
#ifndef KN_OPS_NN_H
#define KN_OPS_NN_H

#include "ops/op.h"

#include <stdbool.h>

/* Whether this Reduce* node takes its axes from input 1 (ReduceSum from opset 13, the others
 * from opset 18) rather than from the `axes` attribute. */
bool kn_nn_reduce_axes_from_input(const kn_node *node);

/* A Reduce* node's attributes, read once (kn_nn_reduce_attrs): the `axes` attribute (the attribute
 * form; NULL, 0 when absent) and noop_with_empty_axes. */
typedef struct kn_nn_reduce_attr {
    const int64_t *axes; /* the node's (lives as long as the node) */
    int n_axes;
    bool noop_empty;
} kn_nn_reduce_attr;
void kn_nn_reduce_attrs(const kn_node *node, kn_nn_reduce_attr *a);

/* Which axes a Reduce* node with attributes `a` reduces over an input of `rank`. `axes` is input
 * 1's value for the input form (NULL when omitted). mask[k] is set for reduced axes. *noop_out is
 * set when nothing is reduced and the input passes through unchanged (empty axes with
 * noop_with_empty_axes=1). Errors (out-of-range axis) are set with the node's label. */
kiln_status kn_nn_reduce_mask(const kn_node *node, const kn_nn_reduce_attr *a, int rank, const kn_tensor *axes,
                              bool *mask, bool *noop_out);

/* The RNN family's attributes, read once. */
typedef struct kn_nn_rnn_attrs {
    int num_directions; /* 1 or 2 */
    int reverse;        /* direction == "reverse" */
    int64_t hidden_size; /* -1 when the attribute is absent */
    int layout;         /* 0: [seq, batch, ...]; 1: [batch, seq, ...] */
    float clip;         /* <= 0: none */
    int linear_before_reset; /* GRU */
    int input_forget;        /* LSTM */
} kn_nn_rnn_attrs;

/* Reads and checks direction/layout/...; the message names the node. */
kiln_status kn_nn_rnn_read_attrs(const kn_node *node, kn_nn_rnn_attrs *a);

/* Number of gates: RNN 1, GRU 3, LSTM 4. */
int kn_nn_rnn_gates(const kn_node *node);

#endif
