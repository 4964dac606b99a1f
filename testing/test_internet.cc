#include "testing/test_internet.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "privhelper/network/dns_message.h"
#include "privhelper/network/links.h"
#include "privhelper/network/netns.h"

namespace paseo::testing {

const std::map<std::string, uint32_t> kZone = {
    {"allowed.example", 0xcb007114},  // 203.0.113.20
    {"other.example", 0xcb007115},    // 203.0.113.21
    {"x.wild.example", 0xcb007116},   // 203.0.113.22
    {"wild.example", 0xcb007117},     // 203.0.113.23
    // The test's own namespace, which stands for the privhelper's host: a name that resolves to
    // the host must not reach it (the egress proxy dials from there).
    {"host.example", 0xc0000201},     // 192.0.2.1
    // Servers a suite starts itself (InNetnsFile / RunIn with InternetPin()): a git server,
    // and the fake model APIs (testing/fake-model-api) under the names the agent CLIs use.
    {"git.example", 0xcb00711e},        // 203.0.113.30
    {"api.anthropic.com", 0xcb007128},  // 203.0.113.40
    {"api.openai.com", 0xcb007129},     // 203.0.113.41
};

namespace {

std::mutex g_asked_mu;
std::vector<std::string> g_asked;

void ServeDns(int udp) {
  std::thread([udp] {
    for (;;) {
      uint8_t buf[1500];
      sockaddr_in from{};
      socklen_t len = sizeof(from);
      ssize_t n = recvfrom(udp, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n <= 0) continue;
      auto query = network::dns::ParseQuery(absl::MakeConstSpan(buf, static_cast<size_t>(n)));
      if (!query.ok()) continue;
      std::string name = network::dns::Dotted(query->question.name);
      {
        std::lock_guard<std::mutex> lock(g_asked_mu);
        g_asked.push_back(name);
      }
      auto it = kZone.find(name);
      std::vector<network::dns::Record> answers;
      if (it != kZone.end() && query->question.type == 1) {
        network::dns::Record a;
        a.name = query->question.name;
        a.type = 1;
        a.klass = 1;
        a.ttl = 300;
        a.addr = it->second;
        answers.push_back(a);
      }
      auto reply = network::dns::BuildResponse(*query, it == kZone.end() ? 3 : 0, answers, 1232);
      sendto(udp, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
    }
  }).detach();
}

// The servers inside the internet's namespace (run there by InNetnsFile).
absl::Status StartInternetServers() {
  int p80 = ListenAny(80), p8080 = ListenAny(8080);
  if (p80 < 0 || p8080 < 0) return absl::InternalError("listen 80/8080");
  Serve(p80, "internet-80");
  Serve(p8080, "internet-8080");
  int dns = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(53);
  at.sin_addr.s_addr = htonl(0xcb007135);  // 203.0.113.53
  if (bind(dns, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0)
    return absl::InternalError("bind dns");
  ServeDns(dns);
  return absl::OkStatus();
}

absl::Status Build() {
  std::string pin = InternetPin();
  if (absl::Status made = network::CreateNetns(pin); !made.ok()) return made;
  int host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  network::SandboxLink uplink{"internet", pin, "pnet-up", 0xc0000201, 0xc0000202};
  absl::Status linked = network::CreateLink(host, uplink);
  close(host);
  if (!linked.ok()) return linked;
  for (const char* a : {"203.0.113.10/32", "169.254.169.254/32", "203.0.113.20/32",
                        "203.0.113.21/32", "203.0.113.22/32", "203.0.113.23/32",
                        "203.0.113.30/32", "203.0.113.40/32", "203.0.113.41/32",
                        "203.0.113.53/32"})
    if (RunIn(pin, {"ip", "addr", "add", a, "dev", "lo"}) != 0)
      return absl::InternalError(absl::StrCat("ip addr add ", a));
  if (RunIn("", {"ip", "route", "add", "203.0.113.0/24", "via", "192.0.2.2"}) != 0 ||
      RunIn("", {"ip", "route", "add", "169.254.169.254/32", "via", "192.0.2.2"}) != 0)
    return absl::InternalError("ip route add");
  if (absl::Status up = network::InNetnsFile(pin, StartInternetServers); !up.ok()) return up;
  // The host itself: every address of this namespace (its loopback, the uplink 192.0.2.1, each
  // sandbox link's host end) on port 8082.
  RunIn("", {"ip", "link", "set", "lo", "up"});
  int host_port = ListenAny(8082);
  if (host_port < 0) return absl::InternalError("listen 8082");
  Serve(host_port, "host-8082");
  return absl::OkStatus();
}

}  // namespace

absl::Status BuildInternet() {
  static const absl::Status built = Build();
  return built;
}

std::string InternetPin() {
  const char* tmp = getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/internet-netns";
}

std::vector<std::string> Asked() {
  std::lock_guard<std::mutex> lock(g_asked_mu);
  return g_asked;
}

int RunIn(const std::string& pin, const std::vector<std::string>& argv) {
  pid_t pid = fork();
  if (pid == 0) {
    if (!pin.empty()) {
      int fd = open(pin.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(126);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int ListenAny(uint16_t port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  if (bind(s, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0 || listen(s, 16) != 0) {
    close(s);
    return -1;
  }
  return s;
}

void Serve(int listener, std::string tag) {
  std::thread([listener, tag] {
    for (;;) {
      int c = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      char buf[2048];
      (void)!read(c, buf, sizeof(buf));
      std::string body = tag + "\n";
      std::string reply = absl::StrCat("HTTP/1.0 200 OK\r\nContent-Length: ", body.size(),
                                       "\r\nConnection: close\r\n\r\n", body);
      (void)!write(c, reply.data(), reply.size());
      close(c);
    }
  }).detach();
}

}  // namespace paseo::testing
