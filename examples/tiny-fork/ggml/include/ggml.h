#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* libggml-base */
const char * ggml_version(void);
float ggml_dot(const float * a, const float * b, int n);

/* libggml-cpu */
const char * ggml_backend_cpu_name(void);
/* sum of a[i]*b[i] computed with OpenMP threads (when built with OpenMP) */
float ggml_cpu_dot(const float * a, const float * b, int n);
int ggml_cpu_n_threads(void);

/* libggml: the backends compiled in, e.g. "CPU" or "CPU, CUDA" */
const char * ggml_backend_list(void);
/* one line per backend about its state; writes to stderr */
void ggml_backend_print_info(void);

#ifdef __cplusplus
}
#endif
