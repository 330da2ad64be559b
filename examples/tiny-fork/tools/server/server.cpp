// llama-server stand-in: --version like llama.cpp, and GET /health -> {"status":"ok"}
// on --host/--port (env LLAMA_ARG_HOST / LLAMA_ARG_PORT), plain POSIX sockets.
#include "server.h"

#include "common.h"
#include "llama.h"

#ifdef LLAMA_USE_OPENSSL
#include <openssl/crypto.h>
#include <openssl/ssl.h>
#endif

#ifdef GGML_USE_CUDA
#include "ggml-cuda.h"
#endif

#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>

static volatile sig_atomic_t g_stop = 0;

static void on_signal(int) {
    g_stop = 1;
}

static void send_all(int fd, const std::string & data) {
    size_t off = 0;
    while (off < data.size()) {
        const ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
        if (n <= 0) {
            return;
        }
        off += (size_t) n;
    }
}

static std::string response(int code, const char * reason, const std::string & body) {
    return "HTTP/1.1 " + std::to_string(code) + " " + reason + "\r\n"
           "Content-Type: application/json; charset=utf-8\r\n"
           "Content-Length: " + std::to_string(body.size()) + "\r\n"
           "Connection: close\r\n"
           "Server: llama.cpp\r\n"
           "\r\n" + body;
}

static void handle_client(int fd) {
    timeval tv{};
    tv.tv_sec = 5;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos && req.size() < 65536) {
        const ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) {
            break;
        }
        req.append(buf, (size_t) n);
    }

    // request line: METHOD SP PATH SP VERSION
    const size_t eol    = req.find("\r\n");
    const std::string line = req.substr(0, eol);
    const size_t sp1    = line.find(' ');
    const size_t sp2    = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
    if (sp1 == std::string::npos || sp2 == std::string::npos) {
        send_all(fd, response(400, "Bad Request",
                              "{\"error\":{\"code\":400,\"message\":\"Bad Request\",\"type\":\"invalid_request_error\"}}"));
        return;
    }
    const std::string method = line.substr(0, sp1);
    std::string       path   = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const size_t      q      = path.find('?');
    if (q != std::string::npos) {
        path.resize(q);
    }

    if ((method == "GET" || method == "HEAD") && (path == "/health" || path == "/v1/health")) {
        std::string r = response(200, "OK", "{\"status\":\"ok\"}");
        if (method == "HEAD") {
            r.resize(r.find("\r\n\r\n") + 4);
        }
        send_all(fd, r);
    } else {
        send_all(fd, response(404, "Not Found",
                              "{\"error\":{\"code\":404,\"message\":\"File Not Found\",\"type\":\"not_found_error\"}}"));
    }
}

static int open_listener(const std::string & host, int port) {
    addrinfo hints{};
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags    = AI_PASSIVE;
    addrinfo * res = nullptr;
    const std::string port_s = std::to_string(port);
    const int gai = getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res);
    if (gai != 0) {
        fprintf(stderr, "main: cannot resolve host %s: %s\n", host.c_str(), gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    for (addrinfo * ai = res; ai != nullptr; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) {
            continue;
        }
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) {
            break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

template <bool is_signed> struct char_kind      { static constexpr int value = 0; };
template <>               struct char_kind<true> { static constexpr int value = 1; };

static void print_char_view(const char * who, const int * v) {
    printf("char-probe %s: (char)200=%d is_signed=%d template=%s\n", who, v[0], v[1], v[2] ? "signed" : "unsigned");
}

// --char-probe: plain char as the host compiler sees it (the reference: the target's ABI), as the
// CUDA library's host half and its kernel see it. Exit 0 when every half that ran agrees.
static int char_probe() {
    volatile char c = (char) 200;
    const int ref[3] = { c, std::is_signed<char>::value ? 1 : 0, char_kind<std::is_signed<char>::value>::value };
    print_char_view("host", ref);
    int rc = 0;
#ifdef GGML_USE_CUDA
    int cu[3] = { 0, 0, 0 };
    ggml_backend_cuda_char_probe_host(cu);
    print_char_view("cuda-host", cu);
    rc |= (cu[0] != ref[0] || cu[1] != ref[1] || cu[2] != ref[2]) ? 1 : 0;
    const char * err = nullptr;
    int dev[3] = { 0, 0, 0 };
    if (ggml_backend_cuda_char_probe_device(dev, &err) == 0) {
        print_char_view("cuda-device", dev);
        rc |= (dev[0] != ref[0] || dev[1] != ref[1] || dev[2] != ref[2]) ? 1 : 0;
    } else {
        printf("char-probe cuda-device: not run (%s)\n", err ? err : "no device");
    }
#endif
    printf("char-probe: %s\n", rc ? "DISAGREE" : "agree");
    return rc;
}

int llama_server_main(int argc, char ** argv) {
    common_params params;
    if (!common_params_parse(argc, argv, params, LLAMA_EXAMPLE_SERVER)) {
        return 1;
    }
    if (params.char_probe) {
        return char_probe();
    }

#ifdef LLAMA_USE_OPENSSL
    OPENSSL_init_ssl(0, nullptr);
    fprintf(stderr, "main: HTTPS support via %s\n", OpenSSL_version(OPENSSL_VERSION));
#endif
    llama_backend_init();
    fprintf(stderr, "system_info: %s\n", llama_print_system_info());
    if (!params.model.empty()) {
        fprintf(stderr, "main: tiny-fork does not load models, ignoring %s\n", params.model.c_str());
    }

    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; // no SA_RESTART: accept() returns EINTR on SIGTERM/SIGINT
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);

    const int lfd = open_listener(params.hostname, params.port);
    if (lfd < 0) {
        fprintf(stderr, "main: couldn't bind HTTP server socket, hostname: %s, port: %d: %s\n",
                params.hostname.c_str(), params.port, strerror(errno));
        return 1;
    }
    fprintf(stderr, "main: server is listening on http://%s:%d - starting the main loop\n",
            params.hostname.c_str(), params.port);
    fflush(stderr);

    while (!g_stop) {
        const int cfd = accept(lfd, nullptr, nullptr);
        if (cfd < 0) {
            if (errno == EINTR) {
                continue;
            }
            perror("accept");
            continue;
        }
        handle_client(cfd);
        close(cfd);
    }
    close(lfd);
    fprintf(stderr, "main: cleaning up before exit...\n");
    return 0;
}
