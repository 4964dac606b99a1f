// fetch ADDRESS PORT TOTAL: one HTTP/1.0 GET to ADDRESS:PORT (a dotted quad), the whole response
// read to EOF in 1 MiB reads and discarded; exits 0 if exactly TOTAL bytes (header included)
// arrived. Run inside sandboxes by the bench's net_bulk: busybox nc reads 1 KiB at a time, and
// each read is a syscall gVisor intercepts, so nc would measure its own buffer, not the network.
// Static, no libraries beyond libc: it runs from the workspace in any rootfs.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: fetch ADDRESS PORT TOTAL\n");
    return 2;
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[2])));
  if (inet_pton(AF_INET, argv[1], &to.sin_addr) != 1) return 2;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0 || connect(s, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    std::perror("fetch: connect");
    return 1;
  }
  const char request[] = "GET / HTTP/1.0\r\n\r\n";
  if (write(s, request, sizeof(request) - 1) != static_cast<ssize_t>(sizeof(request) - 1)) return 1;
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
