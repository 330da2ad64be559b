#include "common.h"

#include "build-info.h"
#include "ggml.h"
#include "llama.h"

#ifdef LLAMA_USE_OPENSSL
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

const char * common_tls_info(void) {
#ifdef LLAMA_USE_OPENSSL
    OPENSSL_init_ssl(0, nullptr);
    return OpenSSL_version(OPENSSL_VERSION);
#else
    return "no TLS";
#endif
}

static bool parse_int(const char * s, int & out) {
    if (s == nullptr || *s == '\0') {
        return false;
    }
    char * end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (*end != '\0') {
        return false;
    }
    out = (int) v;
    return true;
}

static void print_usage(const char * prog, llama_example ex) {
    printf("usage: %s [options]\n\n", prog);
    printf("tiny-fork: a stand-in for llama.cpp used to test container builds\n\n");
    printf("  -h,    --help, --usage      print usage and exit\n");
    printf("         --version            show version and build info\n");
    printf("         --list-devices       load the backends, print the devices and exit\n");
    printf("  -m,    --model FNAME        accepted and ignored (env: LLAMA_ARG_MODEL)\n");
    printf("  -t,    --threads N          accepted and ignored (env: LLAMA_ARG_THREADS)\n");
    printf("  -c,    --ctx-size N         accepted and ignored (env: LLAMA_ARG_CTX_SIZE)\n");
    printf("  -lv,   --verbosity N        accepted and ignored (the backend log is always shown)\n");
    printf("  -ngl,  --n-gpu-layers N     accepted and ignored (env: LLAMA_ARG_N_GPU_LAYERS)\n");
    if (ex == LLAMA_EXAMPLE_SERVER) {
        printf("         --host HOST          ip address to listen on (default: 127.0.0.1) (env: LLAMA_ARG_HOST)\n");
        printf("         --port PORT          port to listen on (default: 8080) (env: LLAMA_ARG_PORT)\n");
        printf("         --char-probe         print how host code, CUDA host code and a kernel see char, and exit\n");
    } else {
        printf("         --selftest           run the CPU (and CUDA, if built in) kernels and exit\n");
    }
}

bool common_params_parse(int argc, char ** argv, common_params & params, llama_example ex) {
    // environment first, the command line overrides it
    if (const char * v = std::getenv("LLAMA_ARG_HOST")) {
        params.hostname = v;
    }
    if (const char * v = std::getenv("LLAMA_ARG_PORT")) {
        if (!parse_int(v, params.port)) {
            fprintf(stderr, "error: invalid LLAMA_ARG_PORT: %s\n", v);
            return false;
        }
    }
    if (const char * v = std::getenv("LLAMA_ARG_MODEL")) {
        params.model = v;
    }

    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        const char * next = i + 1 < argc ? argv[i + 1] : nullptr;

        if (arg == "--version") {
            llama_print_build_info(llama_version());
            exit(0);
        }
        if (arg == "--list-devices") {
            // like llama.cpp: loads the backends (with GGML_BACKEND_DL the log names the CPU
            // backend file it chose), then lists the non-CPU devices
            ggml_backend_load_all();
            printf("Available devices:\n  (none)\n");
            exit(0);
        }
        if (arg == "-h" || arg == "--help" || arg == "--usage") {
            print_usage(argv[0], ex);
            exit(0);
        }
        if (ex == LLAMA_EXAMPLE_CLI && arg == "--selftest") {
            params.selftest = true;
            continue;
        }
        if (ex == LLAMA_EXAMPLE_SERVER && arg == "--char-probe") {
            params.char_probe = true;
            continue;
        }
        if (ex == LLAMA_EXAMPLE_SERVER && arg == "--host") {
            if (!next) {
                fprintf(stderr, "error: expected value for argument: %s\n", arg.c_str());
                return false;
            }
            params.hostname = next;
            ++i;
            continue;
        }
        int *  int_target = nullptr;
        int    ignored    = 0;
        if (ex == LLAMA_EXAMPLE_SERVER && arg == "--port") {
            int_target = &params.port;
        } else if (arg == "-t" || arg == "--threads") {
            int_target = &params.n_threads;
        } else if (arg == "-lv" || arg == "--verbosity" || arg == "--log-verbosity" ||
                   arg == "-c" || arg == "--ctx-size" || arg == "-ngl" || arg == "--n-gpu-layers" ||
                   arg == "--gpu-layers") {
            int_target = &ignored;
        }
        if (int_target) {
            if (!next || !parse_int(next, *int_target)) {
                fprintf(stderr, "error: invalid value for argument: %s\n", arg.c_str());
                return false;
            }
            ++i;
            continue;
        }
        if (arg == "-m" || arg == "--model") {
            if (!next) {
                fprintf(stderr, "error: expected value for argument: %s\n", arg.c_str());
                return false;
            }
            params.model = next;
            ++i;
            continue;
        }
        fprintf(stderr, "error: invalid argument: %s\n", arg.c_str());
        return false;
    }
    if (params.port < 0 || params.port > 65535) {
        fprintf(stderr, "error: invalid port: %d\n", params.port);
        return false;
    }
    return true;
}
