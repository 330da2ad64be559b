#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* number of CUDA devices, or a negative value when CUDA cannot be initialised
 * (e.g. no driver); *err receives a message then */
int ggml_backend_cuda_get_device_count(const char ** err);
/* vector add on the GPU: c = a + b; returns 0 on success */
int ggml_backend_cuda_vec_add(const float * a, const float * b, float * c, int n);
/* plain char as this library's host half (as cudafe++ saw it) and device half (cicc) see it:
   out[0] = (int)(char)200, out[1] = std::is_signed<char>, out[2] = a template chosen on it (1 signed) */
void ggml_backend_cuda_char_probe_host(int * out);
/* the same from a kernel on device 0; 0 on success, else 1 and *err */
int ggml_backend_cuda_char_probe_device(int * out, const char ** err);
/* "VMM" when built with the driver API (links libcuda.so.1), "no VMM" otherwise */
const char * ggml_backend_cuda_vmm_mode(void);

#ifdef __cplusplus
}
#endif
