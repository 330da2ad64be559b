#include "llama.h"

#include "ggml.h"

#include <string>

const char * llama_version(void) {
    return LLAMA_VERSION;
}

void llama_backend_init(void) {
    ggml_backend_print_info();
}

const char * llama_print_system_info(void) {
    static std::string s;
    s = std::string("backends: ") + ggml_backend_list() + " | CPU : " + ggml_cpu_features() + " | ggml " + ggml_version();
    return s.c_str();
}
