#pragma once

#ifdef __cplusplus
extern "C" {
#endif

/* e.g. "0.0.1-dev" (LLAMA_VERSION), like llama.cpp's llama_version() */
const char * llama_version(void);
/* initialise the backends and print what is there to stderr */
void llama_backend_init(void);
/* e.g. "CPU : OPENMP = 1 | CUDA" */
const char * llama_print_system_info(void);

#ifdef __cplusplus
}
#endif
