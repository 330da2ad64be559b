#include "ggml.h"

#include <stdio.h>

#ifdef GGML_USE_CUDA
#include "ggml-cuda.h"
#endif

const char * ggml_backend_list(void) {
#if defined(GGML_USE_CPU) && defined(GGML_USE_CUDA)
    return "CPU, CUDA";
#elif defined(GGML_USE_CUDA)
    return "CUDA";
#elif defined(GGML_USE_CPU)
    return "CPU";
#else
    return "";
#endif
}

void ggml_backend_print_info(void) {
#ifdef GGML_USE_CPU
    fprintf(stderr, "ggml: CPU backend, %d threads\n", ggml_cpu_n_threads());
#endif
#ifdef GGML_USE_CUDA
    const char * err = NULL;
    int n = ggml_backend_cuda_get_device_count(&err);
    if (n < 0) {
        fprintf(stderr, "ggml_cuda_init: failed to initialize CUDA: %s\n", err ? err : "unknown error");
    } else {
        fprintf(stderr, "ggml_cuda_init: found %d CUDA devices (%s)\n", n, ggml_backend_cuda_vmm_mode());
    }
#endif
}
