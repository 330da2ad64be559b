#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libggml-base */
const char * ggml_version(void);
float ggml_dot(const float * a, const float * b, int n);
/* dst[r] = the column of row r's largest value (nrows values; src: nrows rows of ncols) */
void ggml_argmax_rows(const float * src, int ncols, int nrows, int32_t * dst);

/* the CPU backend: in libggml-cpu, or with GGML_BACKEND_DL in libggml, which forwards to the
 * libggml-cpu[-variant].so module it loaded (the first call loads one) */
const char * ggml_backend_cpu_name(void);
/* sum of a[i]*b[i], with the vector code of the backend's level */
float ggml_cpu_dot(const float * a, const float * b, int n);
/* sum of a[i]*b[i] for unsigned x signed bytes */
int32_t ggml_cpu_dot_u8i8(const uint8_t * a, const int8_t * b, int n);
int ggml_cpu_n_threads(void);
/* "AVX = 1 | AVX2 = 1 | ... | OPENMP = 1": what the CPU backend was compiled with */
const char * ggml_cpu_features(void);

/* GGML_BACKEND_DL: what a backend module exports as ggml_backend_init() */
struct ggml_cpu_iface {
    const char * name;
    float (*dot)(const float * a, const float * b, int n);
    int32_t (*dot_u8i8)(const uint8_t * a, const int8_t * b, int n);
    int (*n_threads)(void);
    const char * (*features)(void);
};

/* load the backends (GGML_BACKEND_DL: the best libggml-cpu-*.so in GGML_BACKEND_DIR, the
 * executable's folder or the current folder, as llama.cpp); logs what it loaded to stderr */
void ggml_backend_load_all(void);

/* libggml: the backends compiled in, e.g. "CPU" or "CPU, CUDA" */
const char * ggml_backend_list(void);
/* one line per backend about its state; writes to stderr */
void ggml_backend_print_info(void);

#ifdef __cplusplus
}
#endif
