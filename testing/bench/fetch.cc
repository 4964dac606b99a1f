// fetch ADDRESS PORT TOTAL [HOST]: one HTTP/1.0 GET to ADDRESS:PORT (a dotted quad), naming
// HOST as its Host if given (the egress proxy checks it), the whole response read to EOF in
// 1 MiB reads and discarded; exits 0 if exactly TOTAL bytes (header included) arrived.
// fetch --first-byte COUNT ADDRESS PORT [HOST]: COUNT such GETs one after another, each closed
// at its first byte; prints the median microseconds from connect() to that byte.
// fetch --first-byte-tls COUNT ADDRESS PORT HOST: the same over TLS (HOST as the server name and
// the Host), the handshake inside the time; the certificate is not verified (a timing, not a
// trust check: the bench's server has its own throwaway certificate).
// Run inside sandboxes by the bench's net_bulk and net_names: busybox nc reads 1 KiB at a time,
// and each read is a syscall gVisor intercepts, so nc would measure its own buffer, not the
// network. Static (OpenSSL linked in): it runs from the workspace in any rootfs.
#include <arpa/inet.h>
#include <openssl/ssl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double NowMicros() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

// A connected socket with the request sent, or -1.
int Request(const char* address, const char* port, const char* host) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
  if (inet_pton(AF_INET, address, &to.sin_addr) != 1) return -1;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    std::perror("fetch: connect");
    if (s >= 0) close(s);
    return -1;
  }
  std::string request = "GET / HTTP/1.0\r\n";
  if (host != nullptr) request += std::string("Host: ") + host + "\r\n";
  request += "\r\n";
  if (write(s, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(s);
    return -1;
  }
  return s;
}

int FirstByte(int count, const char* address, const char* port, const char* host) {
  std::vector<double> us;
  for (int i = 0; i < count; ++i) {
    double t0 = NowMicros();
    int s = Request(address, port, host);
    if (s < 0) return 1;
    char c;
    ssize_t n = read(s, &c, 1);
    double t1 = NowMicros();
    close(s);
    if (n != 1) {
      std::fprintf(stderr, "fetch: no first byte\n");
      return 1;
    }
    us.push_back(t1 - t0);
  }
  std::sort(us.begin(), us.end());
  std::printf("%.0f\n", us[us.size() / 2]);
  return 0;
}

int FirstByteTls(int count, const char* address, const char* port, const char* host) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return 1;
  SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  std::vector<double> us;
  for (int i = 0; i < count; ++i) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(std::atoi(port)));
    if (inet_pton(AF_INET, address, &to.sin_addr) != 1) return 1;
    double t0 = NowMicros();
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
      std::perror("fetch: connect");
      return 1;
    }
    SSL* ssl = SSL_new(ctx);
    SSL_set_fd(ssl, s);
    SSL_set_tlsext_host_name(ssl, host);
    std::string request = std::string("GET / HTTP/1.1\r\nHost: ") + host + "\r\nConnection: close\r\n\r\n";
    char c;
    bool ok = SSL_connect(ssl) == 1 &&
              SSL_write(ssl, request.data(), static_cast<int>(request.size())) ==
                  static_cast<int>(request.size()) &&
              SSL_read(ssl, &c, 1) == 1;
    double t1 = NowMicros();
    SSL_free(ssl);
    close(s);
    if (!ok) {
      std::fprintf(stderr, "fetch: no first byte over TLS\n");
      return 1;
    }
    us.push_back(t1 - t0);
  }
  SSL_CTX_free(ctx);
  std::sort(us.begin(), us.end());
  std::printf("%.0f\n", us[us.size() / 2]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::strcmp(argv[1], "--first-byte-tls") == 0)
    return FirstByteTls(std::atoi(argv[2]), argv[3], argv[4], argv[5]);
  if (argc >= 5 && std::strcmp(argv[1], "--first-byte") == 0)
    return FirstByte(std::atoi(argv[2]), argv[3], argv[4], argc > 5 ? argv[5] : nullptr);
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: fetch ADDRESS PORT TOTAL [HOST] | --first-byte COUNT ADDRESS PORT [HOST]\n");
    return 2;
  }
  int s = Request(argv[1], argv[2], argc == 5 ? argv[4] : nullptr);
  if (s < 0) return 1;
  std::vector<char> buf(1 << 20);
  unsigned long long total = 0;
  for (;;) {
    ssize_t n = read(s, buf.data(), buf.size());
    if (n < 0) {
      std::perror("fetch: read");
      return 1;
    }
    if (n == 0) break;
    total += static_cast<unsigned long long>(n);
  }
  close(s);
  return total == std::strtoull(argv[3], nullptr, 10) ? 0 : 1;
}
