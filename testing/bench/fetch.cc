// fetch ADDRESS PORT TOTAL [HOST]: one HTTP/1.0 GET to ADDRESS:PORT (a dotted quad), naming
// HOST as its Host if given (the egress proxy checks it), the whole response read to EOF in
// 1 MiB reads and discarded; exits 0 if exactly TOTAL bytes (header included) arrived.
// fetch --first-byte COUNT ADDRESS PORT [HOST]: COUNT such GETs one after another, each closed
// at its first byte; prints the median microseconds from connect() to that byte.
// Run inside sandboxes by the bench's net_bulk and net_names: busybox nc reads 1 KiB at a time,
// and each read is a syscall gVisor intercepts, so nc would measure its own buffer, not the
// network. Static, no libraries beyond libc: it runs from the workspace in any rootfs.
#include <arpa/inet.h>
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

}  // namespace

int main(int argc, char** argv) {
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
