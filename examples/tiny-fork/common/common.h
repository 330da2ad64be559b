#pragma once

#include <string>

enum llama_example {
    LLAMA_EXAMPLE_CLI,
    LLAMA_EXAMPLE_SERVER,
};

struct common_params {
    std::string hostname = "127.0.0.1";
    int         port     = 8080;
    std::string model;          // accepted, not loaded: tiny-fork has no model code
    int         n_threads = -1; // accepted
    bool        selftest  = false;
    bool        char_probe = false; // llama-server --char-probe: how each half of the build sees char
};

// "OpenSSL 3.0.x ..." when built with LLAMA_OPENSSL, else "no TLS"
const char * common_tls_info(void);

// Parses argv like llama.cpp's common_params_parse: LLAMA_ARG_* environment
// variables first, then the command line. Handles --version (prints the build
// info to stderr, exits 0) and --help (usage to stdout, exits 0). Returns false
// (after printing an error) on a bad argument.
bool common_params_parse(int argc, char ** argv, common_params & params, llama_example ex);
