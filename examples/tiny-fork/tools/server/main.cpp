#include "server.h"

int main(int argc, char ** argv) {
    return llama_server_main(argc, argv);
}
