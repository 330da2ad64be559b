#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* number of CUDA devices, or a negative value when CUDA cannot be initialised
 * (e.g. no driver); *err receives a message then */
int ggml_backend_cuda_get_device_count(const char ** err);
/* vector add on the GPU: c = a + b; returns 0 on success */
int ggml_backend_cuda_vec_add(const float * a, const float * b, float * c, int n);
/* "VMM" when built with the driver API (links libcuda.so.1), "no VMM" otherwise */
const char * ggml_backend_cuda_vmm_mode(void);

#ifdef __cplusplus
}
#endif
