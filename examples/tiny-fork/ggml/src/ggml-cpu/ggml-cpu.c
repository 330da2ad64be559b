#include "ggml.h"

#ifdef GGML_USE_OPENMP
#include <omp.h>
#endif

const char * ggml_backend_cpu_name(void) {
    return "CPU";
}

int ggml_cpu_n_threads(void) {
#ifdef GGML_USE_OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

float ggml_cpu_dot(const float * a, const float * b, int n) {
    if (n < 64) {
        return ggml_dot(a, b, n); /* small inputs: the libggml-base reference */
    }
    float s = 0.0f;
#ifdef GGML_USE_OPENMP
    #pragma omp parallel for reduction(+:s)
#endif
    for (int i = 0; i < n; ++i) {
        s += a[i] * b[i];
    }
    return s;
}
