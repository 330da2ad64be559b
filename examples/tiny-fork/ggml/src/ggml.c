#include "ggml.h"
#include <stddef.h>

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

void ggml_argmax_rows(const float * src, int ncols, int nrows, int32_t * dst) {
    for (int r = 0; r < nrows; ++r) {
        const float * row = src + (size_t) r * ncols;
        int32_t best = 0;
        for (int c = 1; c < ncols; ++c) {
            if (row[c] > row[best]) {
                best = c;
            }
        }
        dst[r] = best;
    }
}
