// See egress_link.h.
#include "privhelper/egress_link.h"

#include <fcntl.h>
#include <string.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <kj/debug.h>

#include "absl/strings/str_cat.h"
#include "common/spawn.h"
#include "common/status.h"
#include "privhelper/capabilities.h"
#include "privhelper/network/netns.h"
#include "privhelper/network/sandbox_network.h"
#include "privhelper/runsc.h"

namespace paseo {
namespace {

constexpr int kChildHostMountsFd = 5;
constexpr int kChildHostNetFd = 6;
constexpr int kBacklog = 256;  // connections that wait while the proxy restarts

void Log(const std::string& line) {
  std::string out = "paseo-sandbox-privhelper: egress: " + line + "\n";
  (void)!write(STDERR_FILENO, out.data(), out.size());
}

// The listening socket the privhelper keeps for one sandbox (its copy survives the proxy).
class ListenerCap final : public egress::rpc::Listener::Server {
 public:
  explicit ListenerCap(int fd) : fd_(fcntl(fd, F_DUPFD_CLOEXEC, 3)) {}
  kj::Maybe<int> getFd() override {
    if (fd_.get() < 0) return nullptr;
    return fd_.get();
  }

 private:
  kj::AutoCloseFd fd_;
};

}  // namespace

void EgressLink::ErrorHandler::taskFailed(kj::Exception&& e) {
  Log(absl::StrCat("a request to the proxy failed: ", e.getDescription().cStr()));
}

EgressLink::EgressLink(kj::UnixEventPort& events, kj::LowLevelAsyncIoProvider& io, kj::Timer& timer,
                       Options options)
    : events_(events), io_(io), timer_(timer), options_(std::move(options)), tasks_(errors_) {
  dev_null_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

EgressLink::~EgressLink() {
  if (dev_null_ >= 0) close(dev_null_);
}

absl::Status EgressLink::Start() { return Spawn(); }

absl::Status EgressLink::Spawn() {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    return ErrnoStatus("socketpair", "for the egress proxy");
  SpawnRequest req;
  req.exec_fd = options_.exec_fd;
  req.path = options_.path;
  req.argv = {options_.path, absl::StrCat("--pool=", options_.pool)};
  for (const std::string& u : options_.upstreams) req.argv.push_back(absl::StrCat("--upstream=", u));
  if (!options_.trusted_ca.empty()) req.argv.push_back(absl::StrCat("--upstream-ca=", options_.trusted_ca));
  req.env = {"PATH=/usr/bin:/bin", "LC_ALL=C"};
  // stdin: nothing; stdout/stderr: the privhelper's log streams, shared on purpose.
  req.fds = {{0, dev_null_},
             {1, STDOUT_FILENO},
             {2, STDERR_FILENO},
             {3, pair[1]},
             {kChildHostMountsFd, options_.host_mounts_fd},
             {kChildHostNetFd, options_.host_net_fd}};
  uid_t uid = options_.uid;
  gid_t gid = options_.gid;
  req.in_child = [uid, gid] {
    // The host's namespaces: its network (where the links' host ends and the internet are) and
    // its mounts (none of the privhelper's staging binds).
    if (setns(kChildHostMountsFd, CLONE_NEWNS) != 0) return errno;
    if (setns(kChildHostNetFd, CLONE_NEWNET) != 0) return errno;
    close(kChildHostMountsFd);
    close(kChildHostNetFd);
    return BecomeUnprivileged(uid, gid);
  };
  auto pid = paseo::Spawn(req);
  close(pair[1]);
  if (!pid.ok()) {
    close(pair[0]);
    return pid.status();
  }
  auto exit = WatchChild(events_, *pid);
  auto run = kj::heap<Running>();
  run->pid = *pid;
  run->stream = io_.wrapUnixSocketFd(pair[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  // One fd per message: each addSandbox's listener.
  // capnp 0.9.2 sends fds only on a network whose maxFdsPerMessage is non-zero (decision 3);
  // one the proxy sent back would be closed with its message (no answer carries a capability).
  // Its answers are empty: a small traversal limit.
  capnp::ReaderOptions answers;
  answers.traversalLimitInWords = 64 * 1024;
  answers.nestingLimit = 16;
  run->network = kj::heap<capnp::TwoPartyVatNetwork>(*run->stream, /*maxFdsPerMessage=*/1,
                                                     capnp::rpc::twoparty::Side::CLIENT, answers);
  run->rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(capnp::makeRpcClient(*run->network));
  capnp::word scratch[4];
  memset(scratch, 0, sizeof(scratch));
  capnp::MallocMessageBuilder message(scratch);
  auto vat = message.getRoot<capnp::rpc::twoparty::VatId>();
  vat.setSide(capnp::rpc::twoparty::Side::SERVER);
  run->control = run->rpc->bootstrap(vat).castAs<egress::rpc::Control>();
  running_ = kj::mv(run);
  Log(absl::StrCat("proxy started (pid ", *pid, ")"));
  for (const auto& [id, served] : served_) {
    auto answer = Send(id, served);
    if (served.secrets.empty()) {
      tasks_.add(answer.ignoreResult());
      continue;
    }
    tasks_.add(answer.then([this, id = id](std::string ca) {
      Log(absl::StrCat("sandbox ", id, " got a new egress CA from the restarted proxy"));
      if (on_new_ca_) on_new_ca_(id, ca);
    }));
  }
  tasks_.add(Supervise(kj::mv(exit)));
  return absl::OkStatus();
}

kj::Promise<void> EgressLink::Supervise(kj::Promise<int> exit) {
  return exit.then([this](int status) {
    Log(absl::StrCat("proxy exited (status ", status, "); restarting in ",
                     backoff_ / kj::MILLISECONDS, " ms"));
    running_ = nullptr;
    kj::Duration delay = backoff_;
    backoff_ = std::min(backoff_ * 2, 30 * kj::SECONDS);
    return timer_.afterDelay(delay).then([this] {
      absl::Status started = Spawn();
      if (!started.ok()) {
        Log(absl::StrCat("cannot restart the proxy: ", started.message()));
        // Try again after the next backoff, through a watch that ends at once.
        tasks_.add(Supervise(kj::Promise<int>(-1)));
      } else {
        // A proxy that stays up a minute resets the backoff.
        tasks_.add(timer_.afterDelay(60 * kj::SECONDS).then([this, pid = running_->pid] {
          if (running_ && running_->pid == pid) backoff_ = 1 * kj::SECONDS;
        }));
      }
    });
  });
}

EgressSecret::~EgressSecret() {
  // Including the bytes a short string keeps inline (and a moved-from one may still hold).
  explicit_bzero(value.data(), value.capacity());
}

absl::StatusOr<kj::Promise<std::string>> EgressLink::Add(const std::string& id, uint32_t host_addr,
                                                         uint32_t sandbox_addr,
                                                         std::vector<network::AllowedName> names,
                                                         std::vector<EgressSecret> secrets) {
  if (served_.count(id)) return absl::AlreadyExistsError(absl::StrCat("egress: ", id, " is served"));
  if (!secrets.empty() && !running_)
    return absl::UnavailableError(
        "the egress proxy is not running, and secrets need it (see the privhelper's log)");
  int fd = -1;
  absl::Status made = network::InNetns(options_.host_net_fd, [&]() -> absl::Status {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return ErrnoStatus("socket", "egress listener");
    int one = 1;
    // The link's host end may not be up yet (as the resolver's sockets).
    setsockopt(fd, SOL_IP, IP_FREEBIND, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(host_addr);
    a.sin_port = htons(options_.port);
    // A proxy of the previous privhelper (an adopted sandbox's) may hold the port until it
    // sees its control connection end, a moment after that privhelper did: a second at most.
    int rc = -1;
    for (int attempt = 0; attempt < 50; ++attempt) {
      rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
      if (rc == 0 || errno != EADDRINUSE) break;
      usleep(20000);
    }
    if (rc != 0)
      return ErrnoStatus("bind", absl::StrCat(network::FormatIpv4(host_addr), ":", options_.port));
    if (listen(fd, kBacklog) != 0) return ErrnoStatus("listen", "egress listener");
    return absl::OkStatus();
  });
  if (!made.ok()) {
    if (fd >= 0) close(fd);
    return made;
  }
  Served served;
  served.sandbox_addr = sandbox_addr;
  served.names = std::move(names);
  served.secrets = std::move(secrets);
  served.listener = kj::AutoCloseFd(fd);
  auto [it, inserted] = served_.emplace(id, std::move(served));
  if (!running_) return kj::Promise<std::string>(std::string());
  if (it->second.secrets.empty()) {
    tasks_.add(Send(id, it->second).ignoreResult());
    return kj::Promise<std::string>(std::string());
  }
  return Send(id, it->second);
}

void EgressLink::Remove(const std::string& id) {
  auto it = served_.find(id);
  if (it == served_.end()) return;
  served_.erase(it);
  if (!running_) return;
  auto req = running_->control.removeSandboxRequest();
  req.setId(id);
  tasks_.add(req.send().ignoreResult());
}

kj::Promise<std::string> EgressLink::Send(const std::string& id, const Served& served) {
  auto req = running_->control.addSandboxRequest();
  req.setId(id);
  req.setSandboxAddr(served.sandbox_addr);
  auto rules = req.initRules(static_cast<unsigned>(served.names.size()));
  for (unsigned i = 0; i < served.names.size(); ++i) {
    rules[i].setName(served.names[i].name);
    auto ports = rules[i].initPorts(static_cast<unsigned>(served.names[i].ports.size()));
    for (unsigned j = 0; j < served.names[i].ports.size(); ++j) ports.set(j, served.names[i].ports[j]);
  }
  req.setListener(kj::heap<ListenerCap>(served.listener.get()));
  auto secrets = req.initSecrets(static_cast<unsigned>(served.secrets.size()));
  for (unsigned i = 0; i < served.secrets.size(); ++i) {
    const EgressSecret& s = served.secrets[i];
    secrets[i].setName(s.name);
    auto hosts = secrets[i].initHosts(static_cast<unsigned>(s.hosts.size()));
    for (unsigned j = 0; j < s.hosts.size(); ++j) hosts.set(j, s.hosts[j]);
    secrets[i].setHeader(s.header);
    secrets[i].setPlaceholder(s.placeholder);
    secrets[i].setValue(kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.value.data()), s.value.size()));
  }
  return req.send().then([](auto answer) { return std::string(answer.getCaCertificate().cStr()); });
}

}  // namespace paseo
