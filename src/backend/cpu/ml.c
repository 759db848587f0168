/* placeholder: being written */
#include "backend/cpu/cpu.h"
const kn_cpu_kernel kn_cpu_ml[] = {{0}};
