#include "ggml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GGML_USE_CUDA
#include "ggml-cuda.h"
#endif

#ifdef GGML_BACKEND_DL
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

/* llama.cpp's ggml_backend_load_best("cpu"): every regular file libggml-cpu-*.so in the search
 * paths is opened and scored; the best is kept; with none scoring, plain libggml-cpu.so. */
static const struct ggml_cpu_iface * g_cpu = NULL;
static int g_loaded = 0;

typedef int (*score_fn_t)(void);
typedef const struct ggml_cpu_iface * (*init_fn_t)(void);

static void exe_dir(char * out, size_t size) {
    ssize_t n = readlink("/proc/self/exe", out, size - 1);
    out[n > 0 ? n : 0] = '\0';
    char * slash = strrchr(out, '/');
    if (slash) {
        *slash = '\0';
    }
}

static void search_paths(char paths[3][PATH_MAX], int * count) {
    *count = 0;
#ifdef GGML_BACKEND_DIR
    snprintf(paths[(*count)++], PATH_MAX, "%s", GGML_BACKEND_DIR);
#endif
    exe_dir(paths[(*count)++], PATH_MAX);
    if (getcwd(paths[*count], PATH_MAX)) {
        (*count)++;
    }
}

static const struct ggml_cpu_iface * load_backend(const char * path) {
    void * handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        fprintf(stderr, "load_backend: failed to load %s: %s\n", path, dlerror());
        return NULL;
    }
    score_fn_t score = (score_fn_t) dlsym(handle, "ggml_backend_score");
    if (score && score() == 0) {
        fprintf(stderr, "load_backend: backend %s is not supported on this system\n", path);
        dlclose(handle);
        return NULL;
    }
    init_fn_t init = (init_fn_t) dlsym(handle, "ggml_backend_init");
    if (!init) {
        fprintf(stderr, "load_backend: failed to find ggml_backend_init in %s\n", path);
        dlclose(handle);
        return NULL;
    }
    const struct ggml_cpu_iface * iface = init();
    fprintf(stderr, "load_backend: loaded %s backend from %s\n", iface->name, path);
    return iface;
}

void ggml_backend_load_all(void) {
    if (g_loaded) {
        return;
    }
    g_loaded = 1;
    char paths[3][PATH_MAX];
    int n_paths = 0;
    search_paths(paths, &n_paths);
    char best[4 * PATH_MAX] = "";
    int best_score = 0;
    for (int p = 0; p < n_paths; ++p) {
        DIR * dir = opendir(paths[p]);
        if (!dir) {
            continue;
        }
        struct dirent * entry;
        while ((entry = readdir(dir)) != NULL) {
            const char * name = entry->d_name;
            const size_t len = strlen(name);
            if (strncmp(name, "libggml-cpu-", 12) != 0 || len < 4 || strcmp(name + len - 3, ".so") != 0) {
                continue;
            }
            char path[4 * PATH_MAX];
            snprintf(path, sizeof(path), "%s/%s", paths[p], name);
            void * handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (!handle) {
                continue;
            }
            score_fn_t score = (score_fn_t) dlsym(handle, "ggml_backend_score");
            const int s = score ? score() : 0;
            if (s > best_score) {
                best_score = s;
                snprintf(best, sizeof(best), "%s", path);
            }
            dlclose(handle);
        }
        closedir(dir);
    }
    if (best_score > 0) {
        g_cpu = load_backend(best);
        return;
    }
    for (int p = 0; p < n_paths && !g_cpu; ++p) {
        char path[4 * PATH_MAX];
        snprintf(path, sizeof(path), "%s/libggml-cpu.so", paths[p]);
        if (access(path, F_OK) == 0) {
            g_cpu = load_backend(path);
        }
    }
}

static const struct ggml_cpu_iface * cpu(void) {
    ggml_backend_load_all();
    if (!g_cpu) {
        fprintf(stderr, "ggml: no CPU backend could be loaded\n");
        exit(1);
    }
    return g_cpu;
}

const char * ggml_backend_cpu_name(void) { return cpu()->name; }
float ggml_cpu_dot(const float * a, const float * b, int n) { return cpu()->dot(a, b, n); }
int32_t ggml_cpu_dot_u8i8(const uint8_t * a, const int8_t * b, int n) { return cpu()->dot_u8i8(a, b, n); }
int ggml_cpu_n_threads(void) { return cpu()->n_threads(); }
const char * ggml_cpu_features(void) { return cpu()->features(); }

#else

void ggml_backend_load_all(void) {
}

#endif

const char * ggml_backend_list(void) {
#if defined(GGML_USE_CPU) && defined(GGML_USE_CUDA)
    return "CPU, CUDA";
#elif defined(GGML_USE_CUDA)
    return "CUDA";
#elif defined(GGML_USE_CPU)
    return "CPU";
#else
    return "";
#endif
}

void ggml_backend_print_info(void) {
    ggml_backend_load_all();
#ifdef GGML_USE_CPU
    fprintf(stderr, "ggml: CPU backend, %d threads\n", ggml_cpu_n_threads());
#endif
#ifdef GGML_USE_CUDA
    const char * err = NULL;
    int n = ggml_backend_cuda_get_device_count(&err);
    if (n < 0) {
        fprintf(stderr, "ggml_cuda_init: failed to initialize CUDA: %s\n", err ? err : "unknown error");
    } else {
        fprintf(stderr, "ggml_cuda_init: found %d CUDA devices (%s)\n", n, ggml_backend_cuda_vmm_mode());
    }
#endif
}
