/* cuBLASLt and cuDNN are loaded when the CUDA provider is first asked for (dlopen), not linked:
 * they are hundreds of megabytes, and linking them cost every process 60-100 ms at start-up
 * (relocations) even when it ran on the CPU only, and made a kiln built with CUDA fail to start on
 * a machine without them. The backend calls them under their own names: this header, included
 * after cublasLt.h and cudnn.h, turns each call into a call through a pointer that
 * kn_cu_libs_load() resolves. */
#ifndef KN_CUDA_LIBS_H
#define KN_CUDA_LIBS_H

#include <cublasLt.h>
#include <stdbool.h>
#include <stddef.h>
#ifdef KILN_HAVE_CUDNN
#include <cudnn.h>
#endif

#define KN_CU_LT_FUNCS(X)                                                                                   \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetVersion) X(cublasLtMatmul)                          \
    X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)            \
    X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy) \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)   \
    X(cublasLtMatrixLayoutSetAttribute)

#ifdef KILN_HAVE_CUDNN
#define KN_CU_DNN_FUNCS(X)                                                                                  \
    X(cudnnCreate) X(cudnnDestroy) X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnSetStream)            \
    X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensorNdDescriptor)          \
    X(cudnnSetTensorNdDescriptorEx)                                                                        \
    X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnSetFilterNdDescriptor)          \
    X(cudnnCreateConvolutionDescriptor) X(cudnnDestroyConvolutionDescriptor)                              \
    X(cudnnSetConvolutionNdDescriptor) X(cudnnSetConvolutionMathType) X(cudnnSetConvolutionGroupCount)    \
    X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnGetConvolutionForwardWorkspaceSize)                  \
    X(cudnnConvolutionForward) X(cudnnGetConvolutionBackwardDataAlgorithm_v7)                             \
    X(cudnnGetConvolutionBackwardDataWorkspaceSize) X(cudnnConvolutionBackwardData)                          \
    X(cudnnFindConvolutionForwardAlgorithmEx) X(cudnnFindConvolutionBackwardDataAlgorithmEx)             \
    X(cudnnCreateActivationDescriptor) X(cudnnDestroyActivationDescriptor) X(cudnnSetActivationDescriptor) \
    X(cudnnConvolutionBiasActivationForward)                                                                \
    X(cudnnBackendCreateDescriptor) X(cudnnBackendDestroyDescriptor) X(cudnnBackendSetAttribute)           \
    X(cudnnBackendGetAttribute) X(cudnnBackendFinalize) X(cudnnBackendExecute)
#else
#define KN_CU_DNN_FUNCS(X)
#endif

#define KN_CU_LIB_PTR(name) __typeof__(name) *name;
typedef struct kn_cu_libs {
    KN_CU_LT_FUNCS(KN_CU_LIB_PTR)
    KN_CU_DNN_FUNCS(KN_CU_LIB_PTR)
    bool lt_loaded, dnn_loaded;
    double load_ms; /* time spent in dlopen/dlsym */
} kn_cu_libs;
#undef KN_CU_LIB_PTR

extern kn_cu_libs kn_cu_lib;

/* Loads cuBLASLt (required: false with the reason in why when it cannot be loaded) and cuDNN
 * (optional: kn_cu_lib.dnn_loaded says whether it was, and the reason goes to the log). Once per
 * process; thread-safe. */
bool kn_cu_libs_load(char *why, size_t cap);

#ifndef KN_CUDA_LIBS_IMPL
#define cublasLtCreate (kn_cu_lib.cublasLtCreate)
#define cublasLtDestroy (kn_cu_lib.cublasLtDestroy)
#define cublasLtGetVersion (kn_cu_lib.cublasLtGetVersion)
#define cublasLtMatmul (kn_cu_lib.cublasLtMatmul)
#define cublasLtMatmulAlgoGetHeuristic (kn_cu_lib.cublasLtMatmulAlgoGetHeuristic)
#define cublasLtMatmulDescCreate (kn_cu_lib.cublasLtMatmulDescCreate)
#define cublasLtMatmulDescDestroy (kn_cu_lib.cublasLtMatmulDescDestroy)
#define cublasLtMatmulDescSetAttribute (kn_cu_lib.cublasLtMatmulDescSetAttribute)
#define cublasLtMatmulPreferenceCreate (kn_cu_lib.cublasLtMatmulPreferenceCreate)
#define cublasLtMatmulPreferenceDestroy (kn_cu_lib.cublasLtMatmulPreferenceDestroy)
#define cublasLtMatmulPreferenceSetAttribute (kn_cu_lib.cublasLtMatmulPreferenceSetAttribute)
#define cublasLtMatrixLayoutCreate (kn_cu_lib.cublasLtMatrixLayoutCreate)
#define cublasLtMatrixLayoutDestroy (kn_cu_lib.cublasLtMatrixLayoutDestroy)
#define cublasLtMatrixLayoutSetAttribute (kn_cu_lib.cublasLtMatrixLayoutSetAttribute)
#ifdef KILN_HAVE_CUDNN
#define cudnnCreate (kn_cu_lib.cudnnCreate)
#define cudnnDestroy (kn_cu_lib.cudnnDestroy)
#define cudnnGetVersion (kn_cu_lib.cudnnGetVersion)
#define cudnnGetErrorString (kn_cu_lib.cudnnGetErrorString)
#define cudnnSetStream (kn_cu_lib.cudnnSetStream)
#define cudnnCreateTensorDescriptor (kn_cu_lib.cudnnCreateTensorDescriptor)
#define cudnnDestroyTensorDescriptor (kn_cu_lib.cudnnDestroyTensorDescriptor)
#define cudnnSetTensorNdDescriptor (kn_cu_lib.cudnnSetTensorNdDescriptor)
#define cudnnSetTensorNdDescriptorEx (kn_cu_lib.cudnnSetTensorNdDescriptorEx)
#define cudnnCreateFilterDescriptor (kn_cu_lib.cudnnCreateFilterDescriptor)
#define cudnnDestroyFilterDescriptor (kn_cu_lib.cudnnDestroyFilterDescriptor)
#define cudnnSetFilterNdDescriptor (kn_cu_lib.cudnnSetFilterNdDescriptor)
#define cudnnCreateConvolutionDescriptor (kn_cu_lib.cudnnCreateConvolutionDescriptor)
#define cudnnDestroyConvolutionDescriptor (kn_cu_lib.cudnnDestroyConvolutionDescriptor)
#define cudnnSetConvolutionNdDescriptor (kn_cu_lib.cudnnSetConvolutionNdDescriptor)
#define cudnnSetConvolutionMathType (kn_cu_lib.cudnnSetConvolutionMathType)
#define cudnnSetConvolutionGroupCount (kn_cu_lib.cudnnSetConvolutionGroupCount)
#define cudnnGetConvolutionForwardAlgorithm_v7 (kn_cu_lib.cudnnGetConvolutionForwardAlgorithm_v7)
#define cudnnGetConvolutionForwardWorkspaceSize (kn_cu_lib.cudnnGetConvolutionForwardWorkspaceSize)
#define cudnnConvolutionForward (kn_cu_lib.cudnnConvolutionForward)
#define cudnnGetConvolutionBackwardDataAlgorithm_v7 (kn_cu_lib.cudnnGetConvolutionBackwardDataAlgorithm_v7)
#define cudnnGetConvolutionBackwardDataWorkspaceSize (kn_cu_lib.cudnnGetConvolutionBackwardDataWorkspaceSize)
#define cudnnConvolutionBackwardData (kn_cu_lib.cudnnConvolutionBackwardData)
#define cudnnFindConvolutionForwardAlgorithmEx (kn_cu_lib.cudnnFindConvolutionForwardAlgorithmEx)
#define cudnnFindConvolutionBackwardDataAlgorithmEx (kn_cu_lib.cudnnFindConvolutionBackwardDataAlgorithmEx)
#define cudnnCreateActivationDescriptor (kn_cu_lib.cudnnCreateActivationDescriptor)
#define cudnnDestroyActivationDescriptor (kn_cu_lib.cudnnDestroyActivationDescriptor)
#define cudnnSetActivationDescriptor (kn_cu_lib.cudnnSetActivationDescriptor)
#define cudnnConvolutionBiasActivationForward (kn_cu_lib.cudnnConvolutionBiasActivationForward)
#define cudnnBackendCreateDescriptor (kn_cu_lib.cudnnBackendCreateDescriptor)
#define cudnnBackendDestroyDescriptor (kn_cu_lib.cudnnBackendDestroyDescriptor)
#define cudnnBackendSetAttribute (kn_cu_lib.cudnnBackendSetAttribute)
#define cudnnBackendGetAttribute (kn_cu_lib.cudnnBackendGetAttribute)
#define cudnnBackendFinalize (kn_cu_lib.cudnnBackendFinalize)
#define cudnnBackendExecute (kn_cu_lib.cudnnBackendExecute)
#endif
#endif

#endif
