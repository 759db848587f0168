/* A stand-in for the NVIDIA driver's libcuda.so.1, for the CLI test of `kiln info` on machines with
 * or without a GPU (tests/cli/test_cli.sh builds it with cc -shared and puts its folder first in
 * LD_LIBRARY_PATH, where the CUDA runtime's dlopen("libcuda.so.1") finds it before any real driver).
 *
 * The CUDA runtime (12 and 13, linked statically into kiln) takes every driver function through
 * cuGetProcAddress, checks cuDriverGetVersion against the version it was built for (older:
 * cudaErrorInsufficientDriver), then calls cuInit and cuDeviceGetCount. What the stub answers comes
 * from the environment:
 *   KILN_STUB_CUDA_VERSION   what cuDriverGetVersion reports (default 13000, i.e. CUDA 13.0)
 *   KILN_STUB_CUDA_DEVICES   how many GPUs it pretends to have (default 0: cuInit returns
 *                            CUDA_ERROR_NO_DEVICE, as a driver without a GPU does)
 * With devices, cuDeviceGetName, cuDeviceTotalMem, cuDeviceGetAttribute and cuDeviceGetUuid answer
 * (a "kiln stub GPU" of compute capability 9.0 with 1 GiB) so that cudaGetDeviceProperties works;
 * every other function returns CUDA_ERROR_NOT_SUPPORTED (801) and writes nothing: kiln info only
 * queries, it creates no context. Not part of the library. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum { STUB_SUCCESS = 0, STUB_NO_DEVICE = 100, STUB_INVALID_DEVICE = 101, STUB_NOT_SUPPORTED = 801 };

static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}
static int n_devices(void) { return env_int("KILN_STUB_CUDA_DEVICES", 0); }

static CUresult not_supported(void) { return STUB_NOT_SUPPORTED; }

CUresult cuDriverGetVersion(int *v) {
    if (!v) return 1;
    *v = env_int("KILN_STUB_CUDA_VERSION", 13000);
    return STUB_SUCCESS;
}
CUresult cuInit(unsigned flags) {
    (void)flags;
    return n_devices() > 0 ? STUB_SUCCESS : STUB_NO_DEVICE;
}
CUresult cuDeviceGetCount(int *n) {
    if (!n) return 1;
    *n = n_devices();
    return *n > 0 ? STUB_SUCCESS : STUB_NO_DEVICE;
}
CUresult cuDeviceGet(int *dev, int ordinal) {
    if (!dev || ordinal < 0 || ordinal >= n_devices()) return STUB_INVALID_DEVICE;
    *dev = ordinal;
    return STUB_SUCCESS;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
    if (!name || len <= 0 || dev < 0 || dev >= n_devices()) return STUB_INVALID_DEVICE;
    strncpy(name, "kiln stub GPU", (size_t)len - 1);
    name[len - 1] = '\0';
    return STUB_SUCCESS;
}
CUresult cuDeviceTotalMem(size_t *bytes, int dev) {
    if (!bytes || dev < 0 || dev >= n_devices()) return STUB_INVALID_DEVICE;
    *bytes = (size_t)1 << 30;
    return STUB_SUCCESS;
}
/* compute capability 9.0 (attributes 75 and 76), 4 of everything else that counts, 1 otherwise */
CUresult cuDeviceGetAttribute(int *value, int attrib, int dev) {
    if (!value || dev < 0 || dev >= n_devices()) return STUB_INVALID_DEVICE;
    *value = attrib == 75 ? 9 : attrib == 76 ? 0 : attrib == 16 ? 4 : 1;
    return STUB_SUCCESS;
}
CUresult cuDeviceGetUuid(unsigned char *uuid, int dev) {
    if (!uuid || dev < 0 || dev >= n_devices()) return STUB_INVALID_DEVICE;
    memset(uuid, 0, 16);
    return STUB_SUCCESS;
}
CUresult cuDeviceGetLuid(char *luid, unsigned *mask, int dev) {
    (void)dev;
    if (luid) memset(luid, 0, 8);
    if (mask) *mask = 0;
    return STUB_NOT_SUPPORTED;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, uint64_t flags, int *status) {
    (void)version;
    (void)flags;
    static const struct {
        const char *name;
        void *fn;
    } known[] = {
        {"cuDriverGetVersion", (void *)cuDriverGetVersion},
        {"cuInit", (void *)cuInit},
        {"cuDeviceGetCount", (void *)cuDeviceGetCount},
        {"cuDeviceGet", (void *)cuDeviceGet},
        {"cuDeviceGetName", (void *)cuDeviceGetName},
        {"cuDeviceTotalMem", (void *)cuDeviceTotalMem},
        {"cuDeviceGetAttribute", (void *)cuDeviceGetAttribute},
        {"cuDeviceGetUuid", (void *)cuDeviceGetUuid},
        {"cuDeviceGetLuid", (void *)cuDeviceGetLuid},
        {"cuGetProcAddress", (void *)cuGetProcAddress_v2},
    };
    if (!pfn) return 1;
    *pfn = (void *)not_supported;
    for (size_t i = 0; symbol && i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(symbol, known[i].name)) *pfn = known[i].fn;
    if (status) *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
    return STUB_SUCCESS;
}
CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, uint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}
