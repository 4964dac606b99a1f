// Root suite for the broker's audit log (docs/operations.md, "Audit log"): real operations
// through the CLI each leave exactly one line with the right fields (on the default
// destination, the broker's stderr), and 100,000 refused connections leave the log within its
// configured bound -- every one of them accounted for when coalesced, and the rotating files
// never past maxBytes * maxFiles when not.
#include <dirent.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "schema/api.capnp.h"
#include "testing/harness.h"

namespace paseo::testing {

Service* g_service = nullptr;

namespace {

constexpr int kFlood = 100000;

// One parsed audit line: its fields as text (numbers in decimal).
using Line = std::map<std::string, std::string>;

Line Parse(const std::string& text) {
  Line out;
  capnp::JsonCodec codec;
  capnp::MallocMessageBuilder message;
  auto value = message.initRoot<capnp::JsonValue>();
  auto error = kj::runCatchingExceptions(
      [&] { codec.decodeRaw(kj::ArrayPtr<const char>(text.data(), text.size()), value); });
  if (error != nullptr || !value.isObject()) {
    out["<invalid>"] = text;
    return out;
  }
  for (auto f : value.getObject()) {
    auto v = f.getValue();
    if (v.isString()) out[f.getName().cStr()] = v.getString().cStr();
    else if (v.isNumber()) out[f.getName().cStr()] = absl::StrCat(static_cast<int64_t>(v.getNumber()));
  }
  return out;
}

std::vector<Line> ParseLines(const std::string& text, const std::string& prefix = "") {
  std::vector<Line> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (!prefix.empty()) {
      if (l.rfind(prefix, 0) != 0) continue;
      l = l.substr(prefix.size());
    }
    lines.push_back(Parse(l));
  }
  return lines;
}

std::string AuditDir(const Service& svc) { return svc.base() + "/state/audit"; }

constexpr char kPrefix[] = "paseo-sandbox-audit: ";

// The audit lines of a service with the default destination: the broker's stderr, which the
// harness keeps in Log() (the journal under systemd).
std::vector<Line> JournalLines(const Service& svc) { return ParseLines(svc.Log(), kPrefix); }

std::vector<Line> FileLines(const Service& svc) {
  std::string text;
  // Oldest first: audit.log.N-1 ... audit.log.1, audit.log.
  for (int k = 99; k >= 1; --k) text += ReadFile(AuditDir(svc) + "/audit.log." + std::to_string(k));
  text += ReadFile(AuditDir(svc) + "/audit.log");
  return ParseLines(text);
}

uint64_t AuditBytes(const Service& svc) {
  uint64_t total = 0;
  for (const auto& name : ListDir(AuditDir(svc))) {
    struct stat st;
    if (stat((AuditDir(svc) + "/" + name).c_str(), &st) == 0) total += st.st_size;
  }
  return total;
}

// The lines that matched `keep`.
template <typename Pred>
std::vector<Line> Where(const std::vector<Line>& lines, Pred keep) {
  std::vector<Line> out;
  for (const auto& l : lines)
    if (keep(l)) out.push_back(l);
  return out;
}

size_t OpenFds(pid_t pid) {
  return ListDir("/proc/" + std::to_string(pid) + "/fd").size();
}

// Connects to `socket` as uid:gid (in the socket's group) from a child process: first `hold`
// connections it keeps open (the broker's limit for a uid no deployment allows is 16), then
// `flood` connections, each refused at accept. The first of those is a probe: the child reads
// it until the broker closes it, and as the broker accepts in order, every held connection was
// accepted before it (counting the broker's open fds instead once failed in CI: a fresh
// service's transient fd at the first count). Returns the child's exit status (0: every
// connect succeeded and the probe was refused).
int FloodConnections(const Service& svc, uid_t uid, int hold, int flood) {
  std::string path = svc.socket();
  gid_t groups[] = {static_cast<gid_t>(uid), svc.socket_gid()};
  pid_t child = fork();
  if (child == 0) {
    if (setgroups(2, groups) != 0 || setgid(uid) != 0 || setuid(uid) != 0) _exit(2);
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    auto connect_one = [&]() -> int {
      for (;;) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0) _exit(3);
        if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return s;
        int err = errno;
        close(s);
        if (err != EAGAIN && err != EINTR) _exit(4);
        usleep(1000);  // the backlog is full: the broker catches up
      }
    };
    for (int i = 0; i < hold; ++i) connect_one();
    int probe = connect_one();
    // Bounded: a broker that stopped accepting must fail the test, not hang it (120 s: on a
    // loaded machine the broker accepts late).
    pollfd closed{probe, POLLIN, 0};
    char c;
    if (poll(&closed, 1, 120000) != 1 || read(probe, &c, 1) != 0) _exit(5);
    close(probe);
    for (int i = 1; i < flood; ++i) close(connect_one());
    _exit(0);
  }
  int status = 0;
  if (!WaitPidWithin(child, 300, &status)) return -1;  // killed at the deadline
  return status;
}

class AuditTest : public ::testing::Test {
 protected:
  Service& svc = *g_service;
  Identity Alpha() const { return {4242, 4242, {4242, svc.socket_gid()}}; }
  Identity Stranger() const { return {4999, 4999, {4999, svc.socket_gid()}}; }

  // The lines written since `since` lines.
  std::vector<Line> Since(size_t since) {
    auto all = JournalLines(svc);
    return std::vector<Line>(all.begin() + std::min(since, all.size()), all.end());
  }
  // Exactly one line of `operation` among `lines` (and its fields), else a failure.
  Line One(const std::vector<Line>& lines, const std::string& operation,
           const std::string& result) {
    auto found = Where(lines, [&](const Line& l) {
      return l.count("operation") && l.at("operation") == operation;
    });
    EXPECT_EQ(found.size(), 1u) << operation;
    if (found.size() != 1) return {};
    EXPECT_EQ(found[0].at("result"), result) << operation;
    return found[0];
  }
};

TEST_F(AuditTest, EveryOperationLeavesExactlyOneLineWithItsFields) {
  const std::string uid = "4242";
  size_t mark = JournalLines(svc).size();
  CliResult created = svc.Cli(Alpha(), {"create", "--deployment=alpha"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  std::string id(absl::StripAsciiWhitespace(created.out));
  auto lines = Since(mark);
  for (const auto& l : lines) {
    ASSERT_FALSE(l.count("<invalid>")) << l.at("<invalid>");
    EXPECT_EQ(l.at("uid"), uid);
    EXPECT_EQ(l.at("gid"), uid);
    EXPECT_GT(std::stoll(l.at("pid")), 0);
    EXPECT_TRUE(absl::EndsWith(l.at("time"), "Z")) << l.at("time");
  }
  Line create = One(lines, "Supervisor.createSandbox", "ok");
  EXPECT_EQ(create["deployment"], "alpha");
  EXPECT_EQ(create["sandboxId"], id);
  EXPECT_EQ(create.count("reason"), 0u);

  mark += lines.size();
  CliResult exec = svc.Cli(Alpha(), {"exec", id, "--", "sh", "-c", "echo audited"});
  ASSERT_EQ(exec.exit_code, 0) << exec.err;
  EXPECT_EQ(exec.out, "audited\n");
  lines = Since(mark);
  Line start = One(lines, "Sandbox.startProcess", "ok");
  EXPECT_EQ(start["deployment"], "alpha");
  EXPECT_EQ(start["sandboxId"], id);
  ASSERT_TRUE(absl::StartsWith(start["processId"], "p-")) << start["processId"];
  Line waited = One(lines, "Process.wait", "ok");
  EXPECT_EQ(waited["processId"], start["processId"]);

  // A bad argument, refused by the broker with its reason.
  mark += lines.size();
  CliResult bad = svc.Cli(Alpha(), {"exec", "--cwd=relative/dir", id, "--", "true"});
  EXPECT_NE(bad.exit_code, 0);
  lines = Since(mark);
  Line refused = One(lines, "Sandbox.startProcess", "refused");
  EXPECT_EQ(refused["error"], "invalid-argument");
  EXPECT_TRUE(absl::StrContains(refused["reason"], "cwd")) << refused["reason"];
  EXPECT_EQ(refused["sandboxId"], id);
  EXPECT_EQ(refused.count("processId"), 0u);

  mark += lines.size();
  CliResult ps = svc.Cli(Alpha(), {"--json", "ps"});
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  lines = Since(mark);
  One(lines, "Supervisor.listSandboxes", "ok");

  // A uid no deployment allows: refused, and its uid is what the line says.
  mark += lines.size();
  CliResult stranger = svc.Cli(Stranger(), {"create", "--deployment=alpha"});
  EXPECT_NE(stranger.exit_code, 0);
  lines = Since(mark);
  Line denied = One(lines, "Supervisor.createSandbox", "refused");
  EXPECT_EQ(denied["uid"], "4999");
  EXPECT_EQ(denied["deployment"], "alpha");
  EXPECT_EQ(denied["error"], "permission-denied");

  mark += lines.size();
  CliResult rm = svc.Cli(Alpha(), {"rm", id});
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  lines = Since(mark);
  Line deleted = One(lines, "Sandbox.delete", "ok");
  EXPECT_EQ(deleted["sandboxId"], id);
  EXPECT_EQ(deleted["deployment"], "alpha");
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  struct stat st;
  EXPECT_NE(stat(AuditDir(svc).c_str(), &st), 0) << "no audit directory without a file log";
}

// A client that speaks capnp-rpc frames itself, so it can send what the library would never
// build: the Call's parameters are bytes this test chose.
class RawRpc {
 public:
  explicit RawRpc(const std::string& path) {
    fd_ = kj::AutoCloseFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    connected_ = connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    // Question 0: the Supervisor, which every call below targets as a promised answer.
    capnp::MallocMessageBuilder m;
    m.initRoot<capnp::rpc::Message>().initBootstrap().setQuestionId(0);
    SendWords(capnp::messageToFlatArray(m));
  }
  bool connected() const { return connected_; }

  void SendWords(kj::ArrayPtr<const capnp::word> words) {
    auto bytes = words.asBytes();
    if (write(fd_.get(), bytes.begin(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
      connected_ = false;
  }

  // The Return for `question` (other messages skipped); null if none came within 30 s.
  kj::Own<capnp::MessageReader> ReturnFor(uint32_t question) {
    for (;;) {
      pollfd p{fd_.get(), POLLIN, 0};
      if (poll(&p, 1, 30000) != 1) return {};
      kj::Own<capnp::MessageReader> reader;
      if (kj::runCatchingExceptions([&] {
            reader = kj::heap<capnp::StreamFdMessageReader>(fd_.get());
          }) != nullptr)
        return {};  // the broker closed the connection
      auto msg = reader->getRoot<capnp::rpc::Message>();
      if (msg.isReturn() && msg.getReturn().getAnswerId() == question) return reader;
    }
  }

 private:
  kj::AutoCloseFd fd_;
  bool connected_ = false;
};

// A Supervisor call (question `question`, method `method`) whose parameters `fill` builds.
template <typename Fill>
kj::Array<capnp::word> SupervisorCall(uint32_t question, uint16_t method, Fill&& fill) {
  capnp::MallocMessageBuilder m;
  auto call = m.initRoot<capnp::rpc::Message>().initCall();
  call.setQuestionId(question);
  call.initTarget().initPromisedAnswer().setQuestionId(0);
  call.setInterfaceId(capnp::typeId<api::Supervisor>());
  call.setMethodId(method);
  fill(call.initParams().getContent());
  auto words = capnp::messageToFlatArray(m);
  uint32_t segments_less_one;
  memcpy(&segments_less_one, words.begin(), 4);
  KJ_ASSERT(segments_less_one == 0, "one segment");
  return words;
}

constexpr char kMarker[] = "deployment-marker-0123456";

// createSandbox with spec.deploymentId = kMarker, then `patch` applied to the words: the
// segment (segment word k is words[1 + k]), the index of the pointer to the marker text and
// the index of the text's first word.
template <typename Patch>
kj::Array<capnp::word> PatchedCreate(uint32_t question, Patch&& patch) {
  auto words = SupervisorCall(question, 0, [](capnp::AnyPointer::Builder content) {
    content.initAs<api::Supervisor::CreateSandboxParams>().initSpec().setDeploymentId(kMarker);
  });
  auto* seg = reinterpret_cast<uint64_t*>(words.begin() + 1);
  size_t count = words.size() - 1;
  std::string_view all(reinterpret_cast<const char*>(seg), count * 8);
  size_t text = all.find(kMarker) / 8;
  for (size_t i = 0; i < count; ++i) {
    uint64_t w = seg[i];
    int32_t offset = static_cast<int32_t>(static_cast<uint32_t>(w)) >> 2;
    if ((w & 3) == 1 && ((w >> 32) & 7) == 2 && static_cast<int64_t>(i) + 1 + offset ==
                                                        static_cast<int64_t>(text)) {
      patch(seg, i, text);
      return words;
    }
  }
  ADD_FAILURE() << "the marker's pointer was not found";
  return words;
}

// Messages capnp cannot read, sent at the public socket as createSandbox: each is refused as
// invalid-argument with our own reason naming what and where, audited as refused with that
// reason, creates nothing, and leaves the connection usable.
TEST_F(AuditTest, MalformedRequestsAreRefusedInOurWordsAndAudited) {
  struct Case {
    const char* name;
    kj::Array<capnp::word> words;
    std::string reason;
  };
  uint32_t q = 1;
  std::vector<Case> cases;
  cases.push_back({"spec is a list", SupervisorCall(q++, 0, [](capnp::AnyPointer::Builder c) {
                     c.initAsAnyStruct(0, 1).getPointerSection()[0].initAs<capnp::List<uint16_t>>(3);
                   }),
                   "malformed request: a pointer of the wrong kind at spec"});
  cases.push_back({"text past the message's end", PatchedCreate(q++, [](uint64_t* seg, size_t p, size_t) {
                     seg[p] = (seg[p] & 0x7ffffffffull) | (uint64_t{0x1fffffff} << 35);
                   }),
                   "malformed request: a pointer out of bounds at spec.deploymentId"});
  cases.push_back({"text without its NUL", PatchedCreate(q++, [](uint64_t* seg, size_t, size_t t) {
                     reinterpret_cast<char*>(seg + t)[sizeof(kMarker) - 1] = 'x';
                   }),
                   "malformed request: text without its terminating NUL at spec.deploymentId"});
  cases.push_back({"a far pointer to a segment that is not there",
                   PatchedCreate(q++, [](uint64_t* seg, size_t p, size_t) {
                     seg[p] = (uint64_t{7} << 32) | 2;
                   }),
                   "malformed request: a pointer out of bounds at spec.deploymentId"});
  cases.push_back({"a capability where text belongs", PatchedCreate(q++, [](uint64_t* seg, size_t p, size_t) {
                     seg[p] = 3;
                   }),
                   "malformed request: a pointer of the wrong kind at spec.deploymentId"});
  const size_t broker_fds = OpenFds(svc.broker_pid());
  auto rpc_owner = std::make_unique<RawRpc>(svc.socket());
  RawRpc& rpc = *rpc_owner;
  ASSERT_TRUE(rpc.connected());
  size_t mark = JournalLines(svc).size();
  for (uint32_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    rpc.SendWords(c.words);
    auto answer = rpc.ReturnFor(i + 1);
    ASSERT_NE(answer.get(), nullptr) << c.name << ": no answer (the connection ended?)";
    auto ret = answer->getRoot<capnp::rpc::Message>().getReturn();
    ASSERT_TRUE(ret.isException()) << c.name;
    EXPECT_EQ(std::string(ret.getException().getReason().cStr()), "invalid-argument: " + c.reason)
        << c.name;
  }
  // The connection still serves a well-formed call.
  rpc.SendWords(SupervisorCall(q, 3, [](capnp::AnyPointer::Builder c) {
    c.initAs<api::Supervisor::InfoParams>();
  }));
  auto info = rpc.ReturnFor(q);
  ASSERT_NE(info.get(), nullptr);
  auto ret = info->getRoot<capnp::rpc::Message>().getReturn();
  ASSERT_TRUE(ret.isResults());
  EXPECT_GT(ret.getResults().getContent().getAs<api::Supervisor::InfoResults>().getVersion().size(), 0u);
  // One refused line each, with the same reason; nothing was created.
  std::vector<Line> lines;
  for (int i = 0; i < 100; ++i) {
    lines = Where(Since(mark), [](const Line& l) {
      return l.count("operation") && l.at("operation") == "Supervisor.createSandbox";
    });
    if (lines.size() >= cases.size()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(lines.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(lines[i]["result"], "refused") << cases[i].name;
    EXPECT_EQ(lines[i]["error"], "invalid-argument") << cases[i].name;
    EXPECT_TRUE(absl::StrContains(lines[i]["reason"], cases[i].reason))
        << cases[i].name << ": " << lines[i]["reason"];
  }
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  // Gone from the broker too before the next test counts its fds.
  rpc_owner.reset();
  for (int i = 0; i < 1000 && OpenFds(svc.broker_pid()) > broker_fds; ++i) usleep(10000);
  EXPECT_LE(OpenFds(svc.broker_pid()), broker_fds) << "the broker kept the closed connection";
}

// Coalesced (the default: 20 a second per uid), 100,000 refused connections are a few lines a
// second on the journal -- and the counts in them add up to every refusal.
TEST_F(AuditTest, AHundredThousandRefusedConnectionsAreAllCountedInAFewLines) {
  const uid_t flooder = 4998;
  auto from_flooder = [](const Line& l) { return l.count("uid") && l.at("uid") == "4998"; };
  size_t before = Where(JournalLines(svc), from_flooder).size();
  ASSERT_EQ(before, 0u);
  auto started = std::chrono::steady_clock::now();
  ASSERT_EQ(FloodConnections(svc, flooder, 16, kFlood), 0);
  int64_t counted = 0;
  std::vector<Line> lines;
  // The last second's summary is written by the broker's once-a-second flush.
  for (int i = 0; i < 100 && counted < kFlood; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    lines = Where(JournalLines(svc), from_flooder);
    counted = 0;
    for (const auto& l : lines)
      counted += l.at("result") == "coalesced" ? std::stoll(l.at("count")) : 1;
  }
  EXPECT_EQ(counted, kFlood);
  // From the first connect until every refusal was counted (connects that the backlog queued
  // are refused after the flooder has finished; the last summary comes with the next flush).
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (const auto& l : lines) {
    ASSERT_FALSE(l.count("<invalid>"));
    EXPECT_EQ(l.at("operation"), "connect");
    EXPECT_EQ(l.at("error"), "unavailable");
  }
  size_t bytes = 0;
  std::istringstream log(svc.Log());
  for (std::string l; std::getline(log, l);)
    if (l.rfind(kPrefix, 0) == 0 && absl::StrContains(l, "\"uid\":4998,")) bytes += l.size() + 1;
  std::printf("100000 refused connections in %.1f s: %zu lines, %zu bytes on the journal\n",
              seconds, lines.size(), bytes);
  // At most refusalsPerSecond (20) + 1 summary per wall-clock second the refusals touched
  // (at most seconds + 2 of them), however fast or slow this machine is.
  EXPECT_LE(lines.size(), static_cast<size_t>(21 * (seconds + 2)));
}

// Not coalesced at all (refusalsPerSecond 1000000), the same flood overflows a 64 KiB x 3 log
// many times over: it rotates, and never holds more than maxBytes * maxFiles.
TEST(AuditBoundTest, AHundredThousandRefusedConnectionsStayWithinMaxBytesTimesMaxFiles) {
  ServiceOptions options;
  options.helper_json_extra =
      R"(, "audit": {"destination": "file", "maxBytes": 65536, "maxFiles": 3,
                     "refusalsPerSecond": 1000000})";
  Service svc(options);
  ASSERT_EQ(FloodConnections(svc, 4998, 16, kFlood), 0);
  // The broker may still be writing the flood's last lines and rotating (a listing once caught
  // audit.log.1 renamed away and not yet made again): wait until the size stays put.
  for (int i = 0, stable = 0; i < 200 && stable < 5; ++i) {
    uint64_t before = AuditBytes(svc);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    stable = AuditBytes(svc) == before && ListDir(AuditDir(svc)).size() == 3 ? stable + 1 : 0;
  }
  uint64_t bytes = AuditBytes(svc);
  std::printf("100000 uncoalesced refused connections: %llu bytes of audit log in %zu files\n",
              static_cast<unsigned long long>(bytes), ListDir(AuditDir(svc)).size());
  EXPECT_LE(bytes, 3u * 65536u);
  // audit.log.1 and .2 were each filled until the next line did not fit.
  EXPECT_GT(bytes, 2u * (65536u - 8192u)) << "it rotated";
  std::vector<std::string> names = ListDir(AuditDir(svc));
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"audit.log", "audit.log.1", "audit.log.2"}));
  auto lines = FileLines(svc);
  ASSERT_FALSE(lines.empty());
  for (const auto& l : lines) ASSERT_FALSE(l.count("<invalid>")) << l.at("<invalid>");
  EXPECT_EQ(lines.back().at("operation"), "connect");
  EXPECT_EQ(lines.back().at("uid"), "4998");
  // The files are the broker's alone.
  struct stat st;
  ASSERT_EQ(stat(AuditDir(svc).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, svc.broker_uid());
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  svc.Stop();
  EXPECT_EQ(svc.Leaks(), std::vector<std::string>{});
  svc.RemoveWorkArea();
}

}  // namespace
}  // namespace paseo::testing

// The shared service has the default destination (the journal: prefixed lines on the broker's
// stderr); AuditBoundTest makes a service of its own with a file log.
int main(int argc, char** argv) {
  return paseo::testing::RunTestsWithOwnService(argc, argv, paseo::testing::ServiceOptions{},
                                                &paseo::testing::g_service);
}
