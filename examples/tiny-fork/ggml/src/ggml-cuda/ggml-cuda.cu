// ggml-cuda stand-in: one real kernel, so nvcc emits a cubin (and/or PTX) per arch.
#include "ggml-cuda.h"

#include <cuda_runtime.h>

#include <type_traits>

#ifndef GGML_CUDA_NO_VMM
#include <cuda.h>
#endif

__global__ static void vec_add_kernel(const float * a, const float * b, float * c, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}

// Plain char as each half of this file sees it. nvcc's front ends (cudafe++ for the host half, cicc
// for the device half) decide char's signedness themselves; a cross build must tell them the
// target's (a host compiler's char is not theirs). The kernel's byte load is LDG.E.S8 for a signed
// char and LDG.E.U8 for an unsigned one; the template is chosen on std::is_signed<char> in each half.
template <bool is_signed> struct char_kind      { static constexpr int value = 0; };  // unsigned
template <>               struct char_kind<true> { static constexpr int value = 1; };  // signed

__global__ static void char_probe_kernel(const char * in, int * out) {
    out[0] = in[0];
    out[1] = std::is_signed<char>::value ? 1 : 0;
    out[2] = char_kind<std::is_signed<char>::value>::value;
}

extern "C" void ggml_backend_cuda_char_probe_host(int * out) {
    volatile char c = (char) 200;
    out[0] = c;
    out[1] = std::is_signed<char>::value ? 1 : 0;
    out[2] = char_kind<std::is_signed<char>::value>::value;
}

extern "C" int ggml_backend_cuda_char_probe_device(int * out, const char ** err) {
    const char byte = (char) 200;
    char * d_in   = nullptr;
    int *  d_out  = nullptr;
    cudaError_t e = cudaMalloc(&d_in, 1);
    if (e == cudaSuccess) {
        e = cudaMalloc(&d_out, 3 * sizeof(int));
    }
    if (e == cudaSuccess) {
        e = cudaMemcpy(d_in, &byte, 1, cudaMemcpyHostToDevice);
    }
    if (e == cudaSuccess) {
        char_probe_kernel<<<1, 1>>>(d_in, d_out);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
        e = cudaMemcpy(out, d_out, 3 * sizeof(int), cudaMemcpyDeviceToHost);
    }
    cudaFree(d_in);
    cudaFree(d_out);
    if (e != cudaSuccess && err) {
        *err = cudaGetErrorString(e);
    }
    return e == cudaSuccess ? 0 : 1;
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
