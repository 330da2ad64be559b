// llama-cli stand-in: --version / --help like llama.cpp; --selftest runs the kernels.
#include "common.h"
#include "ggml.h"
#include "llama.h"

#ifdef GGML_USE_CUDA
#include "ggml-cuda.h"
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

int main(int argc, char ** argv) {
    common_params params;
    if (!common_params_parse(argc, argv, params, LLAMA_EXAMPLE_CLI)) {
        return 1;
    }

    llama_backend_init();
    fprintf(stderr, "system_info: %s | %s\n", llama_print_system_info(), common_tls_info());

    if (!params.selftest) {
        printf("tiny-fork llama-cli: nothing to do (try --selftest)\n");
        return 0;
    }

    const int n = 1000;
    std::vector<float> a(n), b(n), c(n);
    for (int i = 0; i < n; ++i) {
        a[i] = (float) i;
        b[i] = 1.0f;
    }
    const float dot = ggml_cpu_dot(a.data(), b.data(), n);
    printf("cpu: dot = %.1f (%s)\n", dot, dot == 499500.0f ? "ok" : "WRONG");
    int rc = dot == 499500.0f ? 0 : 1;
    std::vector<uint8_t> qa(1000);
    std::vector<int8_t> qb(1000);
    int32_t want = 0;
    for (int i = 0; i < 1000; ++i) {
        qa[i] = (uint8_t) (i % 251);
        qb[i] = (int8_t) ((i % 7) - 3);
        want += (int32_t) qa[i] * qb[i];
    }
    const int32_t qdot = ggml_cpu_dot_u8i8(qa.data(), qb.data(), 1000);
    printf("cpu: int8 dot = %d (%s)\n", (int) qdot, qdot == want ? "ok" : "WRONG");
    rc |= qdot == want ? 0 : 1;

#ifdef GGML_USE_CUDA
    const char * err = nullptr;
    const int n_dev = ggml_backend_cuda_get_device_count(&err);
    if (n_dev <= 0) {
        printf("cuda: no device (%s)\n", err ? err : "0 devices");
        rc = 1;
    } else if (ggml_backend_cuda_vec_add(a.data(), b.data(), c.data(), n) != 0) {
        printf("cuda: vec_add failed\n");
        rc = 1;
    } else {
        const bool ok = c[0] == 1.0f && c[n - 1] == (float) n;
        printf("cuda: vec_add on %d device(s) %s\n", n_dev, ok ? "ok" : "WRONG");
        rc |= ok ? 0 : 1;
    }
#endif
    return rc;
}
