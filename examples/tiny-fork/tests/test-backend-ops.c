/* tiny-fork's stand-in for llama.cpp's tests/test-backend-ops (buildkit gpu-check, docs/gpu.md).
 *
 * The same command line (`test [-o OP,...] [-b BACKEND]`) and the same console output as the real
 * program, for a few ops of this stand-in's own libraries: each case runs the library's function,
 * checks the sentinel after its output (a write past the end is "sentinel mismatch: sent_2", as in
 * the real program) and compares the result with a plain reference. It has one device, CPU, and
 * no GPU backend: the real program compares a GPU backend with the CPU, this one compares the CPU
 * library with its reference. It is not llama.cpp's test suite; it exists so that the tests target,
 * gpu-check's run, parsing, verdict and gate can be tested in seconds without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

#define SENTINEL 1024
#define MAX_FAILED 64
#define FILL 0x5a5a5a5a

static const char * op_filter = NULL;
static int n_run = 0, n_ok = 0, n_failed = 0;
static char failed[MAX_FAILED][160];
static uint32_t seed = 42;

static float next_float(void) {
    seed = seed * 1664525u + 1013904223u;
    return (float) (seed >> 8) / (float) (1u << 24) * 2.0f - 1.0f;
}

static int wanted(const char * op) {
    if (op_filter == NULL) {
        return 1;
    }
    size_t n = strlen(op);
    for (const char * p = op_filter; *p;) {
        const char * end = strchr(p, ',');
        size_t len = end ? (size_t) (end - p) : strlen(p);
        if (len == n && strncmp(p, op, n) == 0) {
            return 1;
        }
        p += len + (end ? 1 : 0);
    }
    return 0;
}

/* like the real console printer: the reasons come first, then the case's name and its status */
static void report(const char * op, const char * params, const char * err) {
    if (err[0]) {
        printf("%s ", err);
    }
    printf("  %s(%s): ", op, params);
    fflush(stdout);
    n_run++;
    if (!err[0]) {
        n_ok++;
        printf("\033[1;32mOK\033[0m\n");
        return;
    }
    printf("\033[1;31mFAIL\033[0m\n");
    if (n_failed < MAX_FAILED) {
        snprintf(failed[n_failed++], sizeof failed[0], "%s(%s)", op, params);
    }
}

/* the library's argmax of every row into dst (nrows values), followed by a sentinel; 0: untouched */
static int argmax_checked(const float * src, int ncols, int nrows, int32_t * out) {
    int sent = nrows > SENTINEL ? nrows : SENTINEL;  /* room for a stray second row, so it is seen, not a crash */
    int32_t * dst = malloc(sizeof(int32_t) * (size_t) (nrows + sent));
    for (int i = 0; i < nrows + sent; ++i) {
        dst[i] = FILL;
    }
    ggml_argmax_rows(src, ncols, nrows, dst);
    int touched = 0;
    for (int i = nrows; i < nrows + sent; ++i) {
        touched |= dst[i] != FILL;
    }
    memcpy(out, dst, sizeof(int32_t) * (size_t) nrows);
    free(dst);
    return touched;
}

static int32_t argmax_ref(const float * row, int ncols) {
    int32_t best = 0;
    for (int c = 1; c < ncols; ++c) {
        if (row[c] > row[best]) {
            best = c;
        }
    }
    return best;
}

static float * random_rows(int ncols, int nrows) {
    float * x = malloc(sizeof(float) * (size_t) ncols * (size_t) nrows);
    for (size_t i = 0; i < (size_t) ncols * (size_t) nrows; ++i) {
        x[i] = next_float();
    }
    return x;
}

static void test_argmax(int ncols, int nrows) {
    char params[96], err[160] = "";
    snprintf(params, sizeof params, "type=f32,ne=[%d,%d,1,1]", ncols, nrows);
    if (!wanted("ARGMAX")) {
        return;
    }
    float * x = random_rows(ncols, nrows);
    int32_t * got = malloc(sizeof(int32_t) * (size_t) nrows);
    if (argmax_checked(x, ncols, nrows, got)) {
        snprintf(err, sizeof err, "sentinel mismatch: sent_2");
    } else {
        int wrong = 0;
        for (int r = 0; r < nrows; ++r) {
            wrong += got[r] != argmax_ref(x + (size_t) r * ncols, ncols);
        }
        if (wrong) {
            snprintf(err, sizeof err, "[ARGMAX] ERR = %.9f > %.9f", (double) wrong / nrows, 1e-7);
        }
    }
    report("ARGMAX", params, err);
    free(x);
    free(got);
}

/* COUNT_EQUAL of the argmaxes of two matrices, as the real test builds it */
static void test_count_equal(int ncols, int nrows) {
    char params[96], err[160] = "";
    snprintf(params, sizeof params, "type=f32,ne=[%d,%d,1,1]", ncols, nrows);
    if (!wanted("COUNT_EQUAL")) {
        return;
    }
    float * a = random_rows(ncols, nrows);
    float * b = random_rows(ncols, nrows);
    int32_t * ia = malloc(sizeof(int32_t) * (size_t) nrows);
    int32_t * ib = malloc(sizeof(int32_t) * (size_t) nrows);
    int touched = argmax_checked(a, ncols, nrows, ia) | argmax_checked(b, ncols, nrows, ib);
    long got = 0, want = 0;
    for (int r = 0; r < nrows; ++r) {
        got += ia[r] == ib[r];
        want += argmax_ref(a + (size_t) r * ncols, ncols) == argmax_ref(b + (size_t) r * ncols, ncols);
    }
    if (touched) {
        snprintf(err, sizeof err, "sentinel mismatch: sent_2");
    } else if (got != want) {
        snprintf(err, sizeof err, "[COUNT_EQUAL] ERR = %.9f > %.9f", fabs((double) (got - want)) / nrows, 1e-7);
    }
    report("COUNT_EQUAL", params, err);
    free(a);
    free(b);
    free(ia);
    free(ib);
}

static void test_mul_mat(int k) {
    char params[96], err[160] = "";
    snprintf(params, sizeof params, "type_a=f32,type_b=f32,m=1,n=1,k=%d,bs=[1,1],nr=[1,1]", k);
    if (!wanted("MUL_MAT")) {
        return;
    }
    float * a = random_rows(k, 1);
    float * b = random_rows(k, 1);
    double ref = 0.0;
    for (int i = 0; i < k; ++i) {
        ref += (double) a[i] * b[i];
    }
    double got = ggml_cpu_dot(a, b, k);
    double nmse = (got - ref) * (got - ref) / (ref * ref + 1e-30);
    if (!(nmse <= 5e-4)) {
        snprintf(err, sizeof err, "[MUL_MAT] ERR = %.9f > %.9f", nmse, 5e-4);
    }
    report("MUL_MAT", params, err);
    free(a);
    free(b);
}

int main(int argc, char ** argv) {
    const char * backend = NULL;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "test") == 0) {
            continue;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            op_filter = argv[++i];
        } else if (strcmp(argv[i], "-b") == 0 && i + 1 < argc) {
            backend = argv[++i];
        } else {
            printf("Usage: %s [test] [-o <op,..>] [-b <backend>]\n", argv[0]);
            return 1;
        }
    }
    ggml_backend_load_all();
    printf("Testing 1 devices\n\n");
    printf("Backend 1/1: CPU\n");
    if (backend != NULL && strcmp(backend, "CPU") != 0) {
        printf("  Skipping\n");
    } else if (backend == NULL) {
        printf("  Skipping CPU backend\n");
    } else {
        printf("  Device description: %s\n\n", ggml_backend_cpu_name());
        test_argmax(32, 1);
        test_argmax(32, 513);
        test_argmax(100, 10);
        test_count_equal(4, 500);
        test_count_equal(4, 5000);
        test_mul_mat(256);
        printf("  %d/%d tests passed\n", n_ok, n_run);
        if (n_failed) {
            printf("\nFailing tests:\n");
            for (int i = 0; i < n_failed; ++i) {
                printf("  %s\n", failed[i]);
            }
        }
        printf("  Backend CPU: %s\n", n_ok == n_run ? "\033[1;32mOK\033[0m" : "\033[1;31mFAIL\033[0m");
    }
    int ok = backend == NULL || strcmp(backend, "CPU") != 0 || n_ok == n_run;
    printf("%d/1 backends passed\n%s\n", ok, ok ? "\033[1;32mOK\033[0m" : "\033[1;31mFAIL\033[0m");
    return ok ? 0 : 1;
}
