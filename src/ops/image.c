#include "ops/op.h"

const kn_op_schema kn_ops_image[] = {
    {0},
};
