#pragma once

// the whole llama-server program; returns the process exit code
int llama_server_main(int argc, char ** argv);
