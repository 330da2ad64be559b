// ggml-cuda stand-in: one real kernel, so nvcc emits a cubin (and/or PTX) per arch.
#include "ggml-cuda.h"

#include <cuda_runtime.h>

#ifndef GGML_CUDA_NO_VMM
#include <cuda.h>
#endif

__global__ static void vec_add_kernel(const float * a, const float * b, float * c, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}

extern "C" const char * ggml_backend_cuda_vmm_mode(void) {
#ifdef GGML_CUDA_NO_VMM
    return "no VMM";
#else
    return "VMM";
#endif
}

extern "C" int ggml_backend_cuda_get_device_count(const char ** err) {
#ifndef GGML_CUDA_NO_VMM
    // with VMM, ggml-cuda uses the driver API directly (cuMemCreate & co.),
    // which is why libcuda.so.1 becomes a NEEDED library
    CUresult res = cuInit(0);
    if (res != CUDA_SUCCESS) {
        const char * msg = nullptr;
        cuGetErrorString(res, &msg);
        if (err) {
            *err = msg ? msg : "cuInit failed";
        }
        return -1;
    }
#endif
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (err) {
            *err = cudaGetErrorString(e);
        }
        return -1;
    }
#ifndef GGML_CUDA_NO_VMM
    for (int id = 0; id < n; ++id) {
        CUdevice dev;
        int vmm = 0;
        if (cuDeviceGet(&dev, id) == CUDA_SUCCESS) {
            cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
        }
        (void) vmm;
    }
#endif
    return n;
}

extern "C" int ggml_backend_cuda_vec_add(const float * a, const float * b, float * c, int n) {
    const size_t size = (size_t) n * sizeof(float);
    float * da = nullptr;
    float * db = nullptr;
    float * dc = nullptr;
    int rc = 1;
    if (cudaMalloc(&da, size) != cudaSuccess || cudaMalloc(&db, size) != cudaSuccess ||
        cudaMalloc(&dc, size) != cudaSuccess) {
        goto done;
    }
    cudaMemcpy(da, a, size, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, size, cudaMemcpyHostToDevice);
    vec_add_kernel<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    if (cudaGetLastError() != cudaSuccess) {
        goto done;
    }
    if (cudaMemcpy(c, dc, size, cudaMemcpyDeviceToHost) == cudaSuccess) {
        rc = 0;
    }
done:
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    return rc;
}
