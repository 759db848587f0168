/* Loading cuBLASLt and cuDNN at first use (see cuda_libs.h). The libraries are looked up by the
 * major version the backend was compiled against (libcublasLt.so.13, libcudnn.so.9), then by the
 * unversioned name, through the usual dynamic-loader search (LD_LIBRARY_PATH, the ld cache, the
 * RUNPATH of the kiln library). */
#define KN_CUDA_LIBS_IMPL
#include "backend/cuda/cuda_libs.h"

#include "util/log.h"
#include "util/clock.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

kn_cu_libs kn_cu_lib;

static pthread_once_t kn_cu_libs_once = PTHREAD_ONCE_INIT;
static char kn_cu_libs_why[512];

#define KN_STR2(x) #x
#define KN_STR(x) KN_STR2(x)

#ifndef KILN_CUDA_LIBDIR
#define KILN_CUDA_LIBDIR ""
#endif
#ifndef KILN_CUDNN_LIBDIR
#define KILN_CUDNN_LIBDIR ""
#endif

/* dlopen of the versioned name, then the plain one, each through the loader's search and then in
 * the folder the build found the library in; NULL with the loader's first message in why. */
static void *open_lib(const char *versioned, const char *plain, const char *build_dir, char *why, size_t cap) {
    void *h = dlopen(versioned, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    snprintf(why, cap, "cannot load %s: %s", versioned, dlerror());
    const char *names[2] = {versioned, plain};
    for (int i = 0; i < 2 && !h; i++) {
        if (i == 1) h = dlopen(plain, RTLD_NOW | RTLD_LOCAL);
        if (!h && build_dir[0]) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", build_dir, names[i]);
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
    }
    return h;
}

/* Resolves every name of a list; false with the first missing one in why. */
#define KN_CU_RESOLVE(name)                                                                                 \
    if (ok) {                                                                                              \
        *(void **)(&kn_cu_lib.name) = dlsym(h, #name);                                                     \
        if (!kn_cu_lib.name) {                                                                             \
            snprintf(why, cap, "%s has no symbol %s", lib, #name);                                         \
            ok = false;                                                                                    \
        }                                                                                                  \
    }

static bool load_lt(char *why, size_t cap) {
    const char *lib = "libcublasLt.so." KN_STR(CUBLAS_VER_MAJOR);
    void *h = open_lib(lib, "libcublasLt.so", KILN_CUDA_LIBDIR, why, cap);
    if (!h) return false;
    bool ok = true;
    KN_CU_LT_FUNCS(KN_CU_RESOLVE)
    if (!ok) dlclose(h);
    return ok;
}

#ifdef KILN_HAVE_CUDNN
static bool load_dnn(char *why, size_t cap) {
    const char *lib = "libcudnn.so." KN_STR(CUDNN_MAJOR);
    void *h = open_lib(lib, "libcudnn.so", KILN_CUDNN_LIBDIR, why, cap);
    if (!h) return false;
    bool ok = true;
    KN_CU_DNN_FUNCS(KN_CU_RESOLVE)
    if (!ok) dlclose(h);
    return ok;
}
#endif

static void load_once(void) {
    double t0 = kn_now_ms();
    kn_cu_lib.lt_loaded = load_lt(kn_cu_libs_why, sizeof kn_cu_libs_why);
    if (!kn_cu_lib.lt_loaded) memset(&kn_cu_lib, 0, sizeof kn_cu_lib);
#ifdef KILN_HAVE_CUDNN
    char why[512];
    if (kn_cu_lib.lt_loaded) {
        kn_cu_lib.dnn_loaded = load_dnn(why, sizeof why);
        if (!kn_cu_lib.dnn_loaded) {
            /* keep cuBLASLt; convolutions then run on another provider */
#define KN_CU_CLEAR(name) kn_cu_lib.name = NULL;
            KN_CU_DNN_FUNCS(KN_CU_CLEAR)
#undef KN_CU_CLEAR
            kn_log(KILN_LOG_WARNING, "cuda: cuDNN unusable (%s): Conv and ConvTranspose do not run on CUDA", why);
        }
    }
#endif
    kn_cu_lib.load_ms = kn_now_ms() - t0;
}

int kn_cuda_libs_report(char *why, size_t cap, int *n_resolved, int *cudnn_loaded) {
    bool ok = kn_cu_libs_load(why, cap);
    int n = 0;
#define KN_CU_COUNT(name) n += kn_cu_lib.name != NULL;
    KN_CU_LT_FUNCS(KN_CU_COUNT)
    KN_CU_DNN_FUNCS(KN_CU_COUNT)
#undef KN_CU_COUNT
    if (n_resolved) *n_resolved = n;
    if (cudnn_loaded) *cudnn_loaded = kn_cu_lib.dnn_loaded;
    return ok;
}

bool kn_cu_libs_load(char *why, size_t cap) {
    pthread_once(&kn_cu_libs_once, load_once);
    if (!kn_cu_lib.lt_loaded && why && cap) snprintf(why, cap, "%s", kn_cu_libs_why);
    return kn_cu_lib.lt_loaded;
}
