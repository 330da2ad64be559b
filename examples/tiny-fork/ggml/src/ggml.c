#include "ggml.h"

const char * ggml_version(void) {
    return GGML_VERSION_STR;
}

float ggml_dot(const float * a, const float * b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) {
        s += a[i] * b[i];
    }
    return s;
}
