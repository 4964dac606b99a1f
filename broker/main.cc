// paseo-sandbox-broker: the unprivileged half. Started only by the privhelper, with the helper
// socketpair as fd 3 and the listening client socket as fd 4; it refuses to run as root or with
// any capability. Serves the public API (schema/api.capnp) to every connecting peer, bound to
// that peer's SO_PEERCRED identity.
#include <fcntl.h>
#include <signal.h>
#include <sys/capability.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <malloc.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/debug.h>
#include <kj/main.h>

#include "broker/audit_log.h"
#include "broker/authorization.h"
#include "broker/api_servers.h"
#include "broker/broker.h"
#include "broker/connection_limits.h"

namespace paseo {
namespace {

// Public socket limits: no fds are accepted (and at most one sent per message); message sizes, unfinished messages, connections
// per uid and waiting calls are bounded in connection_limits.h; in total at most this many
// connections, and at most this many bytes of calls in flight per connection.
constexpr size_t kClientFlowLimitBytes = 32 << 20;
constexpr size_t kMaxConnections = 4096;

void Log(const std::string& message) {
  std::fprintf(stderr, "paseo-sandbox-broker: %s\n", message.c_str());
}

bool IsSocket(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

bool HasAnyCapability() {
  cap_t caps = cap_get_proc();
  cap_t empty = cap_init();
  bool any = cap_compare(caps, empty) != 0;
  cap_free(caps);
  cap_free(empty);
  return any;
}

class Listener {
 public:
  Listener(Broker& broker, AuditLog& audit, kj::LowLevelAsyncIoProvider& low,
           kj::Own<kj::ConnectionReceiver> receiver, kj::Timer& timer)
      : broker_(broker),
        audit_(audit),
        low_(low),
        receiver_(kj::mv(receiver)),
        timer_(timer),
        tasks_(handler_) {}

  kj::Promise<void> Run() {
    return receiver_->accept().then(
        [this](kj::Own<kj::AsyncIoStream> stream) {
          Accept(kj::mv(stream));
          return Run();
        },
        [this](kj::Exception&& e) -> kj::Promise<void> {
          // EMFILE and friends: keep serving the connections we have and try again shortly,
          // rather than letting one flood end the broker.
          Log(std::string("accept failed, retrying: ") + e.getDescription().cStr());
          return timer_.afterDelay(100 * kj::MILLISECONDS).then([this] { return Run(); });
        });
  }

 private:
  void Accept(kj::Own<kj::AsyncIoStream> stream) {
    Peer peer;
    int fd = -1;
    KJ_IF_MAYBE(f, stream->getFd()) { fd = *f; }
    if (fd < 0 || !ReadPeer(fd, &peer)) {
      Log("dropping a connection without peer credentials");
      AuditRefusedConnection(peer, "permission-denied", "no peer credentials");
      return;
    }
    // A peer that may use no deployment needs only info() and a refusal: it gets the small
    // pool, fewer connections and a small message size (connection_limits.h).
    bool allowed = !broker_.registry().DeploymentsFor(peer).empty();
    const ReceivePool& pool = budget_.limits(allowed);
    size_t& mine = per_uid_[peer.uid];
    if (open_ >= kMaxConnections || mine >= pool.connections_per_uid) {
      if (mine == 0) per_uid_.erase(peer.uid);
      LogDropped(peer.uid);
      AuditRefusedConnection(peer, "unavailable",
                             open_ >= kMaxConnections ? "too many connections"
                                                      : "too many connections from this uid");
      return;
    }
    // kj's receiver hands out a plain stream; fds travel only on a capability stream, so the
    // same socket is wrapped again as one (the first wrapper then closes only its own dup).
    int socket = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (socket < 0) {
      Log(std::string("dropping a connection: dup: ") + strerror(errno));
      AuditRefusedConnection(peer, "unavailable", std::string("dup: ") + strerror(errno));
      return;
    }
    stream = nullptr;
    auto capable = low_.wrapUnixSocketFd(socket, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    ++open_;
    ++mine;
    uid_t uid = peer.uid;
    auto metered = kj::heap<MeteredStream>(kj::mv(capable), budget_, allowed, uid, timer_);
    MeteredStream& raw = *metered;
    auto calls = calls_.Open(uid, [&raw] {
      raw.Abort(absl::UnavailableError("too many refused calls; connection closed"));
    });
    // The traversal limit: twice the largest message, as every call's parameters are read
    // twice (checked whole before the method runs, common/message_check.h, then used).
    auto conn = kj::heap<ClientConnection>(kj::mv(metered), 2 * (pool.per_message / 8),
                                           NewSupervisor(broker_, audit_, peer, kj::mv(calls)),
                                           kClientFlowLimitBytes);
    auto done = conn->network.onDisconnect().attach(kj::mv(conn));
    tasks_.add(done.then([this, uid] {
      --open_;
      if (--per_uid_[uid] == 0) per_uid_.erase(uid);
      GiveBackMemory();
    }));
  }

  // A connection closed before any call: one audit line "connect" (coalesced per uid).
  void AuditRefusedConnection(const Peer& peer, const char* error, const std::string& why) {
    AuditRecord r;
    r.operation = "connect";
    r.uid = peer.uid == static_cast<uid_t>(-1) ? -1 : static_cast<int64_t>(peer.uid);
    r.gid = peer.gids.empty() ? -1 : static_cast<int64_t>(peer.gids[0]);
    r.pid = peer.pid;
    r.result = AuditResult::kRefused;
    r.error = error;
    r.reason = std::string(error) + ": " + why;
    audit_.Write(r);
  }

  // At most one line a second, so a flood of refused connections cannot fill the log.
  void LogDropped(uid_t uid) {
    ++dropped_;
    kj::TimePoint now = timer_.now();
    if (now - last_drop_log_ < 1 * kj::SECONDS) return;
    last_drop_log_ = now;
    Log("connection limit reached; dropped " + std::to_string(dropped_) +
        " connection(s), the last from uid " + std::to_string(uid));
    dropped_ = 0;
  }

  // A burst of calls leaves freed memory in malloc's arenas; return it to the system once the
  // connection that caused it is gone: at most once a second, and a second after the last of
  // a burst of closes.
  void GiveBackMemory() {
    if (trim_pending_) return;
    trim_pending_ = true;
    tasks_.add(timer_.afterDelay(1 * kj::SECONDS).then([this] {
      trim_pending_ = false;
      malloc_trim(0);
    }));
  }

  struct Handler : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override { KJ_LOG(INFO, "client connection ended", e); }
  };
  Broker& broker_;
  AuditLog& audit_;
  kj::LowLevelAsyncIoProvider& low_;
  kj::Own<kj::ConnectionReceiver> receiver_;
  kj::Timer& timer_;
  ReceiveBudget budget_;
  CallLimiter calls_;
  Handler handler_;
  kj::TaskSet tasks_;
  size_t open_ = 0;
  std::map<uid_t, size_t> per_uid_;
  size_t dropped_ = 0;
  kj::TimePoint last_drop_log_ = kj::origin<kj::TimePoint>();
  bool trim_pending_ = false;

 public:
  size_t open() const { return open_; }
  size_t parked_calls() const { return calls_.waiting(); }
};

// The operator socket (fd 6, schema/operator.capnp): root's alone. A peer of any other uid is
// dropped at once; at most kMaxOperatorConnections at a time, each with small messages.
class OperatorListener {
 public:
  static constexpr size_t kMaxOperatorConnections = 8;
  OperatorListener(Broker& broker, const AuditLog& audit, OperatorCounters counters,
                   kj::Own<kj::ConnectionReceiver> receiver, kj::Timer& timer)
      : broker_(broker),
        audit_(audit),
        counters_(kj::mv(counters)),
        receiver_(kj::mv(receiver)),
        timer_(timer),
        tasks_(handler_) {}

  kj::Promise<void> Run() {
    return receiver_->accept().then(
        [this](kj::Own<kj::AsyncIoStream> stream) {
          Accept(kj::mv(stream));
          return Run();
        },
        [this](kj::Exception&& e) -> kj::Promise<void> {
          Log(std::string("operator socket: accept failed, retrying: ") + e.getDescription().cStr());
          return timer_.afterDelay(100 * kj::MILLISECONDS).then([this] { return Run(); });
        });
  }

 private:
  struct Connection {
    explicit Connection(kj::Own<kj::AsyncIoStream> s, capnp::Capability::Client bootstrap)
        : stream(kj::mv(s)),
          network(*stream, capnp::rpc::twoparty::Side::SERVER, Options()),
          rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
    static capnp::ReaderOptions Options() {
      capnp::ReaderOptions o;
      o.traversalLimitInWords = 1 << 16;  // its calls have no parameters
      return o;
    }
    kj::Own<kj::AsyncIoStream> stream;
    capnp::TwoPartyVatNetwork network;
    capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
  };

  void Accept(kj::Own<kj::AsyncIoStream> stream) {
    Peer peer;
    int fd = -1;
    KJ_IF_MAYBE(f, stream->getFd()) { fd = *f; }
    if (fd < 0 || !ReadPeer(fd, &peer) || peer.uid != 0 || open_ >= kMaxOperatorConnections)
      return;  // dropped: only root may ask, and a few at once
    ++open_;
    auto conn = kj::heap<Connection>(kj::mv(stream), NewOperator(broker_, audit_, counters_));
    auto done = conn->network.onDisconnect().attach(kj::mv(conn));
    tasks_.add(done.then([this] { --open_; }));
  }

  struct Handler : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override { KJ_LOG(INFO, "operator connection ended", e); }
  };
  Broker& broker_;
  const AuditLog& audit_;
  OperatorCounters counters_;
  kj::Own<kj::ConnectionReceiver> receiver_;
  kj::Timer& timer_;
  Handler handler_;
  kj::TaskSet tasks_;
  size_t open_ = 0;
};

// The audit log the privhelper's policy asks for (helper.capnp AuditPolicy): the rotating file
// in the directory the privhelper made ours, or lines on stderr.
absl::StatusOr<std::unique_ptr<AuditLog>> OpenAuditLog(helper::AuditPolicy::Reader policy) {
  std::unique_ptr<AuditSink> sink;
  if (policy.getToFile()) {
    auto file = RotatingFileSink::Open(policy.getPath().cStr(), policy.getMaxBytes(),
                                       policy.getMaxFiles());
    if (!file.ok()) return file.status();
    sink = std::move(*file);
  } else {
    sink = std::make_unique<StderrAuditSink>();
  }
  // An older privhelper sends no audit policy: its refusals are then coalesced at the default.
  uint32_t per_second = policy.getRefusalsPerSecond() > 0 ? policy.getRefusalsPerSecond() : 20;
  return std::make_unique<AuditLog>(std::move(sink), per_second);
}

// The command line: only the privhelper starts the broker, always with exactly these.
struct Options {
  int helper_fd = -1;
  int listen_fd = -1;
  int operator_fd = -1;  // optional: the operator socket (schema/operator.capnp)
  std::string log_dir;
};

kj::MainFunc ParseOptions(kj::ProcessContext& context, Options& options) {
  auto fd = [](int expected, int* out) {
    return [expected, out](kj::StringPtr value) -> kj::MainBuilder::Validity {
      if (value != kj::str(expected)) return kj::str("must be ", expected);
      *out = expected;
      return true;
    };
  };
  return kj::MainBuilder(context, kBrokerVersion,
                         "The unprivileged half of paseo-sandbox: serves the public API on the "
                         "listening socket (fd 4), asking the privhelper (fd 3) for everything "
                         "privileged. Started by paseo-sandbox-privhelper, not by hand.")
      .addOptionWithArg({"helper-fd"}, fd(3, &options.helper_fd), "<3>",
                        "the privhelper's socketpair end")
      .addOptionWithArg({"listen-fd"}, fd(4, &options.listen_fd), "<4>",
                        "the listening client socket")
      .addOptionWithArg({"operator-fd"}, fd(6, &options.operator_fd), "<6>",
                        "the listening operator socket (root's alone)")
      .addOptionWithArg(
          {"log-dir"},
          [&options](kj::StringPtr value) -> kj::MainBuilder::Validity {
            if (!value.startsWith("/")) return "must be an absolute path";
            options.log_dir = value.cStr();
            return true;
          },
          "<dir>", "the broker's own state directory (output logs and records)")
      .callAfterParsing([&options]() -> kj::MainBuilder::Validity {
        if (options.log_dir.empty()) return "--log-dir is required";
        if (options.helper_fd < 0 || options.listen_fd < 0)
          return "--helper-fd=3 and --listen-fd=4 are required";
        return true;
      })
      .build();
}

int Main(int argc, char** argv) {
  Options options;
  {
    kj::TopLevelProcessContext context(argv[0]);
    auto parse = ParseOptions(context, options);
    kj::Vector<kj::StringPtr> params;
    for (int i = 1; i < argc; ++i) params.add(argv[i]);
    // Exits the process (status 1, or 0 for --help) on a usage error.
    parse(argv[0], params.asPtr());
  }
  int helper_fd = options.helper_fd;
  int listen_fd = options.listen_fd;
  std::string log_dir = options.log_dir;
  if (!IsSocket(helper_fd) || !IsSocket(listen_fd)) {
    Log("fd 3 and fd 4 must be the helper socketpair and the listening socket");
    return 2;
  }
  if (options.operator_fd >= 0 && !IsSocket(options.operator_fd)) {
    Log("fd 6 must be the listening operator socket");
    return 2;
  }
  if (geteuid() == 0 || getuid() == 0 || getegid() == 0 || getgid() == 0 || HasAnyCapability()) {
    Log("refusing to run as root or with capabilities");
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);
  auto io = kj::setupAsyncIo();
  auto& low = *io.lowLevelProvider;
  auto helper_stream =
      low.wrapUnixSocketFd(helper_fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  capnp::TwoPartyVatNetwork helper_network(*helper_stream, /*maxFdsPerMessage=*/3,
                                           capnp::rpc::twoparty::Side::CLIENT);
  auto helper_rpc = capnp::makeRpcClient(helper_network);
  capnp::MallocMessageBuilder vat_id_message(4);
  auto vat_id = vat_id_message.initRoot<capnp::rpc::twoparty::VatId>();
  vat_id.setSide(capnp::rpc::twoparty::Side::SERVER);
  auto helper = helper_rpc.bootstrap(vat_id).castAs<helper::Helper>();

  auto policy_response = helper.policyRequest().send().wait(io.waitScope);
  capnp::MallocMessageBuilder policy_message;
  policy_message.setRoot(policy_response.getPolicy());

  auto policy = policy_message.getRoot<helper::BrokerPolicy>().asReader();
  auto audit = OpenAuditLog(policy.getAudit());
  if (!audit.ok()) {
    Log(std::string(audit.status().message()));
    return 1;
  }
  // Once a second: the summaries of coalesced refusals whose second has ended.
  kj::Timer& timer = io.provider->getTimer();
  std::function<kj::Promise<void>()> flush_every_second = [&]() -> kj::Promise<void> {
    return timer.afterDelay(1 * kj::SECONDS).then([&] {
      (*audit)->Flush();
      return flush_every_second();
    });
  };
  auto flushing = flush_every_second().eagerlyEvaluate(nullptr);

  Broker broker(low, io.unixEventPort, io.provider->getTimer(), helper, policy, log_dir);
  // Rebuild the registry from the privhelper's inventory: after a broker crash, every sandbox
  // and process is taken over (its output continues in its log at the same offsets); after a
  // full restart with policy keep, adopted sandboxes appear as running-unattached.
  auto inventory = helper.inventoryRequest().send().wait(io.waitScope);
  broker.Restore(inventory, io.waitScope);
  Listener listener(broker, **audit, low,
                    low.wrapListenSocketFd(listen_fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP),
                    io.provider->getTimer());
  kj::Promise<void> serving = listener.Run();
  kj::Own<OperatorListener> operator_listener;
  if (options.operator_fd >= 0) {
    OperatorCounters counters;
    counters.started_at_unix_ms = AuditLog::SystemClockMs();
    counters.connections = [&listener] { return listener.open(); };
    counters.parked_calls = [&listener] { return listener.parked_calls(); };
    operator_listener = kj::heap<OperatorListener>(
        broker, **audit, kj::mv(counters),
        low.wrapListenSocketFd(options.operator_fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP),
        io.provider->getTimer());
    serving = serving.exclusiveJoin(operator_listener->Run());
  }
  Log("serving");
  // Serve until the privhelper goes away: without it the broker can do nothing useful.
  serving.exclusiveJoin(helper_network.onDisconnect()).wait(io.waitScope);
  Log("privhelper connection closed; exiting");
  return 0;
}

}  // namespace
}  // namespace paseo

int main(int argc, char** argv) { return paseo::Main(argc, argv); }
