#include "ggml.h"

#include <stdint.h>
#include <string.h>

#ifdef GGML_USE_OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif
#if defined(__ARM_FEATURE_SVE)
#include <arm_sve.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

/* The vector code of this build's level, as llama.cpp's quants: intrinsics behind the compiler's
 * feature macros (-mavx2 defines __AVX2__ ...), so each variant holds the instructions of its level. */

static float cpu_dot(const float * a, const float * b, int n) {
    if (n < 64) {
        return ggml_dot(a, b, n); /* small inputs: the libggml-base reference */
    }
    float s = 0.0f;
    int i = 0;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    }
    s = _mm512_reduce_add_ps(acc);
#elif defined(__AVX__)
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
#if defined(__FMA__)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
#else
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
#endif
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    for (int k = 0; k < 8; ++k) {
        s += lanes[k];
    }
#elif defined(__ARM_FEATURE_SVE)
    svfloat32_t acc = svdup_n_f32(0.0f);
    for (; i < n; i += (int) svcntw()) {
        const svbool_t pg = svwhilelt_b32_s32(i, n);
        acc = svmla_f32_m(pg, acc, svld1_f32(pg, a + i), svld1_f32(pg, b + i));
    }
    s = svaddv_f32(svptrue_b32(), acc);
#elif defined(__ARM_NEON)
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (; i + 4 <= n; i += 4) {
        acc = vfmaq_f32(acc, vld1q_f32(a + i), vld1q_f32(b + i));
    }
    s = vaddvq_f32(acc);
#else
#ifdef GGML_USE_OPENMP
    #pragma omp parallel for reduction(+:s)
#endif
    for (int j = 0; j < n; ++j) {
        s += a[j] * b[j];
    }
    i = n;
#endif
    for (; i < n; ++i) {
        s += a[i] * b[i];
    }
    return s;
}

/* dot product of unsigned x signed bytes (the core of llama.cpp's quantized kernels) */
static int32_t cpu_dot_u8i8(const uint8_t * a, const int8_t * b, int n) {
    int32_t s = 0;
    int i = 0;
#if defined(__AVX512BW__)
    const __m512i ones = _mm512_set1_epi16(1);
    __m512i acc = _mm512_setzero_si512();
    for (; i + 64 <= n; i += 64) {
        const __m512i p = _mm512_maddubs_epi16(_mm512_loadu_si512(a + i), _mm512_loadu_si512(b + i));
        acc = _mm512_add_epi32(acc, _mm512_madd_epi16(p, ones));
    }
    s = _mm512_reduce_add_epi32(acc);
#elif defined(__AVX2__)
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc = _mm256_setzero_si256();
    for (; i + 32 <= n; i += 32) {
        const __m256i p = _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i *) (a + i)),
                                               _mm256_loadu_si256((const __m256i *) (b + i)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
    }
    int32_t lanes[8];
    _mm256_storeu_si256((__m256i *) lanes, acc);
    for (int k = 0; k < 8; ++k) {
        s += lanes[k];
    }
#elif defined(__SSSE3__)
    const __m128i ones = _mm_set1_epi16(1);
    __m128i acc = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        const __m128i p = _mm_maddubs_epi16(_mm_loadu_si128((const __m128i *) (a + i)),
                                            _mm_loadu_si128((const __m128i *) (b + i)));
        acc = _mm_add_epi32(acc, _mm_madd_epi16(p, ones));
    }
    int32_t lanes[4];
    _mm_storeu_si128((__m128i *) lanes, acc);
    s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#endif
    for (; i < n; ++i) {
        s += (int32_t) a[i] * (int32_t) b[i];
    }
    return s;
}

static int cpu_n_threads(void) {
#ifdef GGML_USE_OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* "AVX = 1 | AVX2 = 1 | ..." like llama.cpp's system_info, from the compiler's macros */
static const char * cpu_features(void) {
    return ""
#if defined(__SSE4_2__)
        "SSE42 = 1 | "
#endif
#if defined(__AVX__)
        "AVX = 1 | "
#endif
#if defined(__AVX2__)
        "AVX2 = 1 | "
#endif
#if defined(__FMA__)
        "FMA = 1 | "
#endif
#if defined(__F16C__)
        "F16C = 1 | "
#endif
#if defined(__AVXVNNI__)
        "AVX_VNNI = 1 | "
#endif
#if defined(__AVX512F__)
        "AVX512 = 1 | "
#endif
#if defined(__AVX512VBMI__)
        "AVX512_VBMI = 1 | "
#endif
#if defined(__AVX512VNNI__)
        "AVX512_VNNI = 1 | "
#endif
#if defined(__AVX512BF16__)
        "AVX512_BF16 = 1 | "
#endif
#if defined(__AMX_INT8__)
        "AMX_INT8 = 1 | "
#endif
#if defined(__ARM_NEON)
        "NEON = 1 | "
#endif
#ifdef GGML_USE_OPENMP
        "OPENMP = 1"
#else
        "OPENMP = 0"
#endif
        ;
}

#ifdef GGML_BACKEND_DL

/* ggml_backend_score(): 0 if this CPU lacks a feature the backend was built with, else higher for
 * more features: llama.cpp's ggml-cpu/arch/x86/cpu-feats.cpp, with the same bits. */
int ggml_backend_score(void) {
    int score = 1;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
#define GGML_NEED(cond, bit) do { if (!(cond)) { return 0; } score += 1 << (bit); } while (0)
#ifdef GGML_FMA
    GGML_NEED(__builtin_cpu_supports("fma"), 0);
#endif
#ifdef GGML_F16C
    GGML_NEED(__builtin_cpu_supports("f16c"), 1);
#endif
#ifdef GGML_SSE42
    GGML_NEED(__builtin_cpu_supports("sse4.2"), 2);
#endif
#ifdef GGML_BMI2
    GGML_NEED(__builtin_cpu_supports("bmi2"), 3);
#endif
#ifdef GGML_AVX
    GGML_NEED(__builtin_cpu_supports("avx"), 4);
#endif
#ifdef GGML_AVX2
    GGML_NEED(__builtin_cpu_supports("avx2"), 5);
#endif
#ifdef GGML_AVX_VNNI
    GGML_NEED(__builtin_cpu_supports("avxvnni"), 6);
#endif
#ifdef GGML_AVX512
    GGML_NEED(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
              __builtin_cpu_supports("avx512bw"), 7);
#endif
#ifdef GGML_AVX512_VBMI
    GGML_NEED(__builtin_cpu_supports("avx512vbmi"), 8);
#endif
#ifdef GGML_AVX512_BF16
    GGML_NEED(__builtin_cpu_supports("avx512bf16"), 9);
#endif
#ifdef GGML_AVX512_VNNI
    GGML_NEED(__builtin_cpu_supports("avx512vnni"), 10);
#endif
#ifdef GGML_AMX_INT8
    GGML_NEED(__builtin_cpu_supports("amx-int8"), 11);
#endif
#undef GGML_NEED
#elif defined(__aarch64__) && defined(__linux__)
    /* llama.cpp's ggml-cpu/arch/arm/cpu-feats.cpp: the HWCAP bits of each feature, same score bits */
    unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
    (void) hwcap; (void) hwcap2;
#define GGML_NEED(cond, bit) do { if (!(cond)) { return 0; } score += 1 << (bit); } while (0)
#ifdef GGML_ARM_DOTPROD
    GGML_NEED(hwcap & (1UL << 20), 1);  /* HWCAP_ASIMDDP */
#endif
#ifdef GGML_ARM_FP16_VECTOR_ARITHMETIC
    GGML_NEED(hwcap & (1UL << 10), 2);  /* HWCAP_ASIMDHP */
#endif
#ifdef GGML_ARM_SVE
    GGML_NEED(hwcap & (1UL << 22), 3);  /* HWCAP_SVE */
#endif
#ifdef GGML_ARM_MATMUL_INT8
    GGML_NEED(hwcap2 & (1UL << 13), 4);  /* HWCAP2_I8MM */
#endif
#ifdef GGML_ARM_SVE2
    GGML_NEED(hwcap2 & (1UL << 1), 5);  /* HWCAP2_SVE2 */
#endif
#undef GGML_NEED
#endif
    return score;
}

/* the loader (libggml) reaches the backend through this table only: no symbol of the module
 * clashes with libggml's own ggml_cpu_* entry points */
const struct ggml_cpu_iface * ggml_backend_init(void) {
    static const struct ggml_cpu_iface iface = {
        "CPU", cpu_dot, cpu_dot_u8i8, cpu_n_threads, cpu_features,
    };
    return &iface;
}

#else

const char * ggml_backend_cpu_name(void) {
    return "CPU";
}

int ggml_cpu_n_threads(void) {
    return cpu_n_threads();
}

float ggml_cpu_dot(const float * a, const float * b, int n) {
    return cpu_dot(a, b, n);
}

int32_t ggml_cpu_dot_u8i8(const uint8_t * a, const int8_t * b, int n) {
    return cpu_dot_u8i8(a, b, n);
}

const char * ggml_cpu_features(void) {
    return cpu_features();
}

#endif
