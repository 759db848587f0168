/* The operator families: one schema table per file in src/ops/, one kernel table per file in
 * src/backend/cpu/. A new family is added here once. */
#ifndef KN_FAMILIES_H
#define KN_FAMILIES_H

#include "ops/op.h"

#define KN_OP_FAMILIES                                                                             \
    KN_FAMILY(elementwise) /* unary/binary math, comparison, logic, activations, Cast, Where */    \
    KN_FAMILY(linalg)      /* MatMul, Gemm, Conv, ConvTranspose, pooling */                       \
    KN_FAMILY(tensor)      /* shape and data movement: Reshape, Transpose, Gather, Slice, ... */  \
    KN_FAMILY(nn)          /* reductions, Softmax, normalisations, RNN/LSTM/GRU, TopK, ArgMax */  \
    KN_FAMILY(control)     /* If, Loop, Scan, sequences, optionals */                             \
    KN_FAMILY(fused)       /* kiln's own fused operators (domain "kiln"), formed by the optimiser */ \
    KN_FAMILY(attention)   /* Attention, RotaryEmbedding and the other transformer operators */    \
    KN_FAMILY(contrib)     /* com.microsoft operators that exporters and ORT's optimiser emit */   \
    KN_FAMILY(image)       /* Resize/Upsample, GridSample, AffineGrid, RoiAlign, NonMaxSuppression */ \
    KN_FAMILY(signal)      /* DFT, STFT, window functions, MelWeightMatrix */                      \
    KN_FAMILY(random)      /* RandomUniform/Normal(Like), Bernoulli, Multinomial */            \
    KN_FAMILY(quant)       /* QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, BitCast */ \
    KN_FAMILY(text)        /* StringNormalizer/Concat/Split, RegexFullMatch, TfIdfVectorizer */  \
    KN_FAMILY(ml)          /* ai.onnx.ml: LabelEncoder, TreeEnsemble, Binarizer, ... */          \
    KN_FAMILY(training)    /* ai.onnx.preview.training: Adagrad, Adam, Momentum */                  \
    KN_FAMILY(qcontrib)    /* quantised com.microsoft: MatMulNBits, QGemm, QLinear*, ... */

#define KN_FAMILY(name) extern const kn_op_schema kn_ops_##name[];
KN_OP_FAMILIES
#undef KN_FAMILY

#endif
