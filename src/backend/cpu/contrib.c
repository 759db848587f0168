#include "backend/cpu/cpu.h"

const kn_cpu_kernel kn_cpu_contrib[] = {
    {0},
};
