// paseo-sandbox-egress: the egress proxy (decision 58). Started by the privhelper only, as its
// own system user with no capabilities, in the host's network namespace; the privhelper's
// socketpair is fd 3 and carries schema/egress.capnp's Control. It ends when that connection
// ends. Each connection's outcome is one line on stderr (the privhelper's log, the journal
// under systemd): "paseo-sandbox-egress: " and a JSON object.
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/debug.h>
#include <kj/main.h>

#include "absl/strings/str_cat.h"
#include "common/json_writer.h"
#include "egress/audit_limiter.h"
#include "egress/egress_proxy.h"
#include "egress/upstream_resolver.h"
#include "privhelper/network/dns_upstreams.h"
#include "privhelper/network/sandbox_network.h"
#include "schema/egress.capnp.h"

namespace paseo::egress {
namespace {

void Log(const std::string& line) {
  std::string out = "paseo-sandbox-egress: " + line + "\n";
  (void)!write(STDERR_FILENO, out.data(), out.size());
}

// One line per connection, at most AuditLimiter's rate per sandbox (the rest coalesced).
AuditLimiter g_limiter;

double NowSeconds() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec / 1e9;
}

void WriteCoalesced() {
  for (const auto& [id, n] : g_limiter.TakeSuppressed()) {
    JsonWriter w;
    w.BeginObject();
    w.Key("sandbox");
    w.String(id);
    w.Key("coalesced");
    w.Int(static_cast<int64_t>(n));
    w.EndObject();
    Log(w.Take());
  }
}

kj::Promise<void> CoalesceEverySecond(kj::Timer& timer) {
  return timer.afterDelay(1 * kj::SECONDS).then([&timer] {
    WriteCoalesced();
    return CoalesceEverySecond(timer);
  });
}

void AuditLine(const EgressEvent& e) {
  if (!g_limiter.Allow(e.sandbox_id, NowSeconds())) return;
  JsonWriter w;
  w.BeginObject();
  w.Key("sandbox");
  w.String(e.sandbox_id);
  w.Key("name");
  w.String(e.name);
  w.Key("port");
  w.Int(e.port);
  w.Key("allowed");
  w.Bool(e.allowed);
  if (!e.reason.empty()) {
    w.Key("reason");
    w.String(e.reason);
  }
  if (e.allowed) {
    w.Key("upstream");
    w.String(e.upstream);
  }
  if (!e.secrets.empty()) {
    // Their names: the proxy terminated this connection's TLS to put them in.
    w.Key("secrets");
    w.BeginArray();
    for (const std::string& s : e.secrets) w.String(s);
    w.EndArray();
  }
  w.EndObject();
  Log(w.Take());
}

bool HasAnyCapability() {
  cap_t caps = cap_get_proc();
  if (caps == nullptr) return true;
  cap_t none = cap_init();
  bool any = cap_compare(caps, none) != 0;
  cap_free(none);
  cap_free(caps);
  return any;
}

class ControlServer final : public rpc::Control::Server {
 public:
  ControlServer(EgressProxy& proxy, kj::LowLevelAsyncIoProvider& io) : proxy_(proxy), io_(io) {}

 protected:
  kj::Promise<void> addSandbox(AddSandboxContext context) override {
    auto params = context.getParams();
    EgressSandbox sandbox;
    sandbox.id = params.getId().cStr();
    sandbox.sandbox_addr = params.getSandboxAddr();
    for (auto rule : params.getRules()) {
      EgressRule r{rule.getName().cStr(), {}};
      for (uint16_t p : rule.getPorts()) r.ports.push_back(p);
      sandbox.rules.push_back(std::move(r));
    }
    for (auto secret : params.getSecrets()) {
      BoundSecret b;
      b.name = secret.getName().cStr();
      for (auto h : secret.getHosts()) b.hosts.push_back(h.cStr());
      b.header = secret.getHeader().cStr();
      b.placeholder = secret.getPlaceholder().cStr();
      auto value = secret.getValue();
      b.value = std::make_shared<SecretBytes>(
          absl::string_view(reinterpret_cast<const char*>(value.begin()), value.size()));
      sandbox.secrets.push_back(std::move(b));
    }
    // The fd came with this message: taken now, so the sandbox is served before the next call
    // (a removeSandbox right after) is handled.
    int got = -1;
    KJ_IF_MAYBE(f, capnp::ClientHook::from(params.getListener())->getFd()) {
      got = fcntl(*f, F_DUPFD_CLOEXEC, 3);
    }
    KJ_REQUIRE(got >= 0, "no listening socket came with addSandbox");
    auto receiver = io_.wrapListenSocketFd(got, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP |
                                                    kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC);
    auto added = proxy_.AddSandbox(std::move(sandbox), kj::mv(receiver));
    KJ_REQUIRE(added.ok(), std::string(added.status().message()));
    context.getResults().setCaCertificate(*added);
    return kj::READY_NOW;
  }

  kj::Promise<void> removeSandbox(RemoveSandboxContext context) override {
    proxy_.RemoveSandbox(context.getParams().getId().cStr());
    WriteCoalesced();
    g_limiter.Forget(context.getParams().getId().cStr());
    return kj::READY_NOW;
  }

 private:
  EgressProxy& proxy_;
  kj::LowLevelAsyncIoProvider& io_;
};

struct Options {
  std::vector<std::string> upstreams;
  std::string pool;
  std::vector<std::string> upstream_ca_files;
};

// Every certificate of a PEM file, each on its own.
bool ReadCertificates(const std::string& path, std::vector<std::string>& out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string text;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0 && text.size() < (16u << 20)) text.append(buf, n);
  close(fd);
  const std::string kBegin = "-----BEGIN CERTIFICATE-----";
  const std::string kEnd = "-----END CERTIFICATE-----";
  size_t found = 0;
  for (size_t at = text.find(kBegin); at != std::string::npos; at = text.find(kBegin, at + 1)) {
    size_t end = text.find(kEnd, at);
    if (end == std::string::npos) break;
    out.push_back(text.substr(at, end + kEnd.size() - at) + "\n");
    ++found;
  }
  return found > 0;
}

int Main(int argc, char** argv) {
  Options options;
  {
    kj::TopLevelProcessContext context(argv[0]);
    auto parse =
        kj::MainBuilder(context, "paseo-sandbox-egress",
                        "The egress proxy of paseo-sandbox: checks the name of each connection "
                        "a sandbox makes to an allowNames rule's port and dials that name itself. "
                        "Started by paseo-sandbox-privhelper (control on fd 3), not by hand.")
            .addOptionWithArg({"upstream"},
                              [&](kj::StringPtr v) -> kj::MainBuilder::Validity {
                                if (!network::ParseDnsUpstream(v.cStr()).ok()) return "not IPv4[:port]";
                                options.upstreams.push_back(v.cStr());
                                return true;
                              },
                              "<ip[:port]>", "a DNS upstream (repeatable)")
            .addOptionWithArg({"pool"},
                              [&](kj::StringPtr v) -> kj::MainBuilder::Validity {
                                if (!network::ParseCidr(v.cStr())) return "not a CIDR";
                                options.pool = v.cStr();
                                return true;
                              },
                              "<cidr>", "the sandboxes' address pool (never dialled)")
            .addOptionWithArg({"upstream-ca"},
                              [&](kj::StringPtr v) -> kj::MainBuilder::Validity {
                                options.upstream_ca_files.push_back(v.cStr());
                                return true;
                              },
                              "<pem file>",
                              "CA certificates trusted for a secret's host besides the system's "
                              "(repeatable)")
            .callAfterParsing([&]() -> kj::MainBuilder::Validity {
              if (options.upstreams.empty() || options.pool.empty())
                return "--upstream and --pool are required";
              return true;
            })
            .build();
    kj::Vector<kj::StringPtr> params;
    for (int i = 1; i < argc; ++i) params.add(argv[i]);
    parse(argv[0], params.asPtr());
  }
  struct stat st;
  if (fstat(3, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    Log("fd 3 must be the privhelper's socketpair");
    return 2;
  }
  if (geteuid() == 0 || getuid() == 0 || getegid() == 0 || getgid() == 0 || HasAnyCapability()) {
    Log("refusing to run as root or with capabilities");
    return 1;
  }
  // Nothing of this process's memory in a core file, nor readable by another process of its
  // user (decision 59: secrets pass here).
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  signal(SIGPIPE, SIG_IGN);

  std::vector<network::DnsUpstream> upstreams;
  for (const std::string& u : options.upstreams) upstreams.push_back(*network::ParseDnsUpstream(u));
  network::Cidr pool = *network::ParseCidr(options.pool);

  auto io = kj::setupAsyncIo();
  UpstreamResolver resolver(io.provider->getNetwork(), io.provider->getTimer(), upstreams);
  EgressOptions proxy_options;
  for (const std::string& f : options.upstream_ca_files) {
    if (!ReadCertificates(f, proxy_options.upstream_trusted_pem)) {
      Log(absl::StrCat("no certificate in ", f, " (it must be readable by this user)"));
      return 2;
    }
  }
  proxy_options.denied = [pool](uint32_t a) { return network::IsAlwaysDenied(a) || pool.Contains(a); };
  EgressProxy proxy(*io.provider, io.provider->getTimer(), resolver, AuditLine, proxy_options);

  auto stream = io.lowLevelProvider->wrapUnixSocketFd(3, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  // One fd per message: addSandbox's listener (capnp 0.9.2 passes none at 0).
  capnp::TwoPartyVatNetwork network(*stream, /*maxFdsPerMessage=*/1, capnp::rpc::twoparty::Side::SERVER);
  auto rpc = capnp::makeRpcServer(network, kj::heap<ControlServer>(proxy, *io.lowLevelProvider));
  Log(absl::StrCat("serving (", upstreams.size(), " DNS upstreams, pool ", pool.ToString(), ")"));
  auto coalescing = CoalesceEverySecond(io.provider->getTimer()).eagerlyEvaluate(nullptr);
  network.onDisconnect().wait(io.waitScope);
  Log("the privhelper's connection ended; exiting");
  return 0;
}

}  // namespace
}  // namespace paseo::egress

int main(int argc, char** argv) { return paseo::egress::Main(argc, argv); }
