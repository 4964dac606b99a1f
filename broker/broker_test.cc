// The broker's operations through its real API servers, against an in-process fake privhelper
// (fake_helper.h): no root, no runsc. Covers the create/delete flows and their races, refusals
// that must not reach the privhelper, process I/O, input bounds, and restore after a crash.
#include "broker/broker.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <tuple>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>

#include <capnp/rpc-twoparty.h>
#include <capnp/schema.h>
#include <kj/async-io.h>

#include "broker/api_servers.h"
#include "broker/connection_limits.h"
#include "broker/fake_helper.h"

namespace paseo {
namespace {

std::string TempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string templ = std::string(base ? base : "/tmp") + "/broker-XXXXXX";
  char* made = mkdtemp(templ.data());
  EXPECT_NE(made, nullptr);
  return templ;
}

void WriteAll(int fd, const std::string& bytes) {
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
}

// An OutputSink that keeps what it is given.
class Collector final : public api::OutputSink::Server {
 public:
  std::string bytes;
  uint64_t lost = 0;
  uint64_t gap_at = 0;  // the offset of the last gap
  bool ended = false;
  ProcessExit status;

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto data = context.getParams().getData();
    EXPECT_EQ(context.getParams().getOffset(), lost + bytes.size()) << "offsets are contiguous";
    bytes.append(reinterpret_cast<const char*>(data.begin()), data.size());
    return kj::READY_NOW;
  }
  kj::Promise<void> gap(GapContext context) override {
    gap_at = lost + bytes.size();
    lost += context.getParams().getLostBytes();
    return kj::READY_NOW;
  }
  kj::Promise<void> end(EndContext context) override {
    ended = true;
    status = FromCapnp(context.getParams().getStatus());
    return kj::READY_NOW;
  }
};

std::string Description(kj::Maybe<kj::Exception>& e) {
  KJ_IF_MAYBE(ex, e) { return ex->getDescription().cStr(); }
  return "(no error)";
}

class LineSink : public AuditSink {
 public:
  explicit LineSink(std::vector<std::string>* lines) : lines_(lines) {}
  void Append(absl::string_view line) override { lines_->emplace_back(line); }

 private:
  std::vector<std::string>* lines_;
};

class BrokerTest : public ::testing::Test {
 protected:
  ~BrokerTest() noexcept override {}
  BrokerTest() : io_(kj::setupAsyncIo()), dir_(TempDir()) { Start(); }

  // A broker (again, after a simulated crash) over the same state dir with a new fake helper.
  void Start() {
    auto fake = kj::heap<FakeHelper>();
    helper_ = fake.get();
    helper_client_ = kj::mv(fake);
    broker_ = kj::heap<Broker>(*io_.lowLevelProvider, io_.unixEventPort, timer_, helper_client_,
                               helper_->policy(), dir_);
  }

  kj::WaitScope& ws() { return io_.waitScope; }
  api::Supervisor::Client Connect(Peer peer) {
    uid_t uid = peer.uid;
    return NewSupervisor(*broker_, audit_, std::move(peer), calls_.Open(uid));
  }

  struct Created {
    api::Sandbox::Client sandbox;
    std::string id;
  };
  Created Create(api::Supervisor::Client& sup, const std::string& deployment = "work") {
    auto req = sup.createSandboxRequest();
    req.initSpec().setDeploymentId(deployment);
    auto label = req.getSpec().initLabels(1)[0];
    label.setKey("purpose");
    label.setValue("test");
    auto res = req.send().wait(ws());
    return {res.getSandbox(), res.getInfo().getId().cStr()};
  }
  struct Started {
    api::Process::Client process;
    std::string id;
  };
  Started Start(api::Sandbox::Client& sandbox, std::vector<std::string> argv = {"cat"}) {
    auto req = sandbox.startProcessRequest();
    auto list = req.initSpec().initArgv(static_cast<unsigned>(argv.size()));
    for (unsigned i = 0; i < argv.size(); ++i) list.set(i, argv[i]);
    auto res = req.send().wait(ws());
    return {res.getProcess(), res.getInfo().getId().cStr()};
  }
  // Subscribes to the process's stdout from offset 0; the collector lives as long as the test
  // (the broker lets go of its sink once the stream has ended, and the test still reads it).
  std::pair<api::Subscription::Client, Collector*> Subscribe(api::Process::Client& process) {
    auto collector = kj::heap<Collector>();
    Collector* raw = collector.get();
    api::OutputSink::Client sink = kj::mv(collector);
    kept_sinks_.push_back(sink.castAs<api::OutputSink>());  // a second reference
    auto sub = process.subscribeRequest();
    sub.setStream(api::Stream::STDOUT);
    sub.setFromOffset(0);
    sub.setSink(kj::mv(sink));
    return {sub.send().wait(ws()).getSubscription(), raw};
  }
  Started StartKeyed(api::Sandbox::Client& sandbox, const std::string& key,
                     api::OutputMode output = api::OutputMode::DROP_OLDEST) {
    auto req = sandbox.startProcessRequest();
    auto spec = req.initSpec();
    spec.initArgv(1).set(0, "cat");
    spec.setKey(key);
    spec.setOutput(output);
    auto res = req.send().wait(ws());
    return {res.getProcess(), res.getInfo().getId().cStr()};
  }
  // A process (keyed, if `key` is given) that wrote `written`, then a broker restart: the new
  // broker is up, not yet restored. Returns the sandbox's and the process's ids.
  std::pair<std::string, std::string> WroteThenBrokerRestarted(const std::string& written,
                                                               const std::string& key = "") {
    std::pair<std::string, std::string> ids;
    {
      auto sup = Connect(owner_);
      Created sb = Create(sup);
      Started p = key.empty() ? Start(sb.sandbox, {"yes"}) : StartKeyed(sb.sandbox, key);
      ids = {sb.id, p.id};
      WriteAll(helper_->process(p.id).stdout_w.get(), written);
      Until([&] {
        return (*broker_->registry().VisibleProcess(owner_, sb.id, p.id))->stdout_log->end() ==
               written.size();
      });
    }
    broker_ = nullptr;
    Start();
    return ids;
  }
  // Reads both streams of a pipe process to their end (it must end), so it counts as drained.
  void ReadToEnd(api::Process::Client& process) {
    for (auto stream : {api::Stream::STDOUT, api::Stream::STDERR}) {
      auto collector = kj::heap<Collector>();
      Collector* raw = collector.get();
      api::OutputSink::Client sink = kj::mv(collector);
      kept_sinks_.push_back(sink.castAs<api::OutputSink>());  // read after the broker drops it
      auto sub = process.subscribeRequest();
      sub.setStream(stream);
      sub.setSink(kj::mv(sink));
      auto subscription = sub.send().wait(ws()).getSubscription();
      // Dropped as soon as end() arrives, before its return reaches the broker (regression:
      // the end call was cancelled with the subscription, so the process never counted as
      // drained and was never released).
      Until([&] { return raw->ended; });
    }
  }
  // Moves the release rules' clock on and lets the broker act on it.
  void Advance(kj::Duration by) {
    timer_.advanceTo(timer_.now() + by);
    for (int i = 0; i < 5; ++i) io_.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).wait(ws());
  }
  size_t Released(const std::string& process_id) {
    size_t n = 0;
    for (const auto& c : helper_->calls) n += c == "release " + process_id;
    return n;
  }
  bool Exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
  }

  // Runs the event loop until `done` or 5 s pass.
  void Until(const std::function<bool()>& done) {
    for (int i = 0; i < 500 && !done(); ++i) io_.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(ws());
    ASSERT_TRUE(done()) << "timed out";
  }

  kj::AsyncIoContext io_;
  // The release rules' clock, advanced by the tests (ReleaseRules, registry.h).
  kj::TimerImpl timer_{kj::origin<kj::TimePoint>()};
  CallLimiter calls_{4, 6};
  // Every audit line the API servers write, in order (no coalescing here).
  std::vector<std::string> audit_lines_;
  AuditLog audit_{std::make_unique<LineSink>(&audit_lines_), 1000000};
  std::string dir_;
  FakeHelper* helper_ = nullptr;
  helper::Helper::Client helper_client_ = nullptr;
  kj::Own<Broker> broker_;
  Peer owner_{1000, {1000}};
  Peer other_{2000, {2000}};
  Peer nobody_{3000, {3000}};
  std::vector<api::OutputSink::Client> kept_sinks_;  // Subscribe's collectors, until the end
};

TEST_F(BrokerTest, CreateListInspectDelete) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  ASSERT_EQ(helper_->calls.size(), 1u);
  EXPECT_EQ(helper_->calls[0], "create " + sb.id + " work default");
  EXPECT_EQ(helper_->create_peers, std::vector<std::string>{"1000:1000"});
  auto list_response = sup.listSandboxesRequest().send().wait(ws());
  auto listed = list_response.getSandboxes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].getId().cStr(), sb.id);
  EXPECT_STREQ(listed[0].getState().cStr(), "running");
  EXPECT_EQ(listed[0].getOwnerUid(), 1000u);
  EXPECT_STREQ(listed[0].getLabels()[0].getValue().cStr(), "test");
  auto other = Connect(other_);
  EXPECT_EQ(other.listSandboxesRequest().send().wait(ws()).getSandboxes().size(), 0u);
  auto req = other.getSandboxRequest();
  req.setId(sb.id);
  auto hidden = req.send().ignoreResult().then([] { return std::string("(no error)"); },
                                                [](kj::Exception&& e) {
                                                  return std::string(e.getDescription().cStr());
                                                });
  EXPECT_EQ(hidden.wait(ws()).rfind("not-found: ", 0), 0u);
  sb.sandbox.deleteRequest().send().wait(ws());
  EXPECT_EQ(helper_->calls.at(helper_->calls.size() - 2), "delete " + sb.id);
  EXPECT_EQ(helper_->calls.back(), "awaitGone " + sb.id);
  Until([&] { return broker_->registry().Find(sb.id) == nullptr; });
  EXPECT_EQ(sup.listSandboxesRequest().send().wait(ws()).getSandboxes().size(), 0u);
  struct stat st;
  EXPECT_NE(stat((dir_ + "/" + sb.id).c_str(), &st), 0) << "its state dir is removed";
}

// The audit log (audit_log.h): every call on every interface leaves exactly one line when it
// ends, with who asked, what about and how it ended -- allowed or refused, refused before or
// after the method body -- and a stream's accepted chunks none.
TEST_F(BrokerTest, EveryCallLeavesExactlyOneAuditLine) {
  auto field = [](const std::string& line, const std::string& key) -> std::string {
    std::string k = "\"" + key + "\":";
    size_t at = line.find(k);
    if (at == std::string::npos) return "<absent>";
    at += k.size();
    if (line[at] != '"') return line.substr(at, line.find_first_of(",}", at) - at);
    return line.substr(at + 1, line.find('"', at + 1) - at - 1);
  };
  auto sup = Connect(Peer{1000, {1000}, 4321});
  Created sb = Create(sup);
  ASSERT_EQ(audit_lines_.size(), 1u);
  EXPECT_EQ(field(audit_lines_[0], "operation"), "Supervisor.createSandbox");
  EXPECT_EQ(field(audit_lines_[0], "uid"), "1000");
  EXPECT_EQ(field(audit_lines_[0], "gid"), "1000");
  EXPECT_EQ(field(audit_lines_[0], "pid"), "4321");
  EXPECT_EQ(field(audit_lines_[0], "deployment"), "work");
  EXPECT_EQ(field(audit_lines_[0], "sandboxId"), sb.id);
  EXPECT_EQ(field(audit_lines_[0], "result"), "ok");
  EXPECT_EQ(field(audit_lines_[0], "reason"), "<absent>");

  Started p = Start(sb.sandbox);
  ASSERT_EQ(audit_lines_.size(), 2u);
  EXPECT_EQ(field(audit_lines_[1], "operation"), "Sandbox.startProcess");
  EXPECT_EQ(field(audit_lines_[1], "deployment"), "work");
  EXPECT_EQ(field(audit_lines_[1], "sandboxId"), sb.id);
  EXPECT_EQ(field(audit_lines_[1], "processId"), p.id);

  // A stream's accepted chunks are not audited one by one; closing it is.
  for (int i = 0; i < 3; ++i) {
    auto w = p.process.writeInputRequest();
    w.setData(kj::StringPtr("x").asBytes());
    w.send().wait(ws());
  }
  p.process.closeInputRequest().send().wait(ws());
  ASSERT_EQ(audit_lines_.size(), 3u);
  EXPECT_EQ(field(audit_lines_[2], "operation"), "Process.closeInput");
  EXPECT_EQ(field(audit_lines_[2], "processId"), p.id);

  // Refused inside the method body (a synchronous throw) and by a later promise.
  auto sig = p.process.signalRequest();
  sig.setSignal(0);
  EXPECT_NE(kj::runCatchingExceptions([&] { sig.send().wait(ws()); }), nullptr);
  ASSERT_EQ(audit_lines_.size(), 4u);
  EXPECT_EQ(field(audit_lines_[3], "operation"), "Process.signal");
  EXPECT_EQ(field(audit_lines_[3], "result"), "refused");
  EXPECT_EQ(field(audit_lines_[3], "error"), "invalid-argument");
  EXPECT_EQ(field(audit_lines_[3], "reason").rfind("invalid-argument: ", 0), 0u)
      << audit_lines_[3];

  // Someone else's: refused, with the ids asked for.
  auto other = Connect(other_);
  auto get = other.getSandboxRequest();
  get.setId(sb.id);
  EXPECT_NE(kj::runCatchingExceptions([&] { get.send().wait(ws()); }), nullptr);
  ASSERT_EQ(audit_lines_.size(), 5u);
  EXPECT_EQ(field(audit_lines_[4], "operation"), "Supervisor.getSandbox");
  EXPECT_EQ(field(audit_lines_[4], "uid"), "2000");
  EXPECT_EQ(field(audit_lines_[4], "sandboxId"), sb.id);
  EXPECT_EQ(field(audit_lines_[4], "error"), "not-found");

  // A deployment the peer may not use, and the info anyone may ask for.
  auto stranger = Connect(nobody_);
  auto create = stranger.createSandboxRequest();
  create.initSpec().setDeploymentId("work");
  EXPECT_NE(kj::runCatchingExceptions([&] { create.send().wait(ws()); }), nullptr);
  stranger.infoRequest().send().wait(ws());
  ASSERT_EQ(audit_lines_.size(), 7u);
  EXPECT_EQ(field(audit_lines_[5], "operation"), "Supervisor.createSandbox");
  EXPECT_EQ(field(audit_lines_[5], "deployment"), "work");
  EXPECT_EQ(field(audit_lines_[5], "error"), "permission-denied");
  EXPECT_EQ(field(audit_lines_[6], "operation"), "Supervisor.info");
  EXPECT_EQ(field(audit_lines_[6], "result"), "ok");

  // A call that waits is written when it ends.
  auto waited = p.process.waitRequest().send();
  for (int i = 0; i < 3; ++i) io_.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).wait(ws());
  EXPECT_EQ(audit_lines_.size(), 7u);
  helper_->Exit(p.id, 0);
  waited.wait(ws());
  ASSERT_EQ(audit_lines_.size(), 8u);
  EXPECT_EQ(field(audit_lines_[7], "operation"), "Process.wait");

  sb.sandbox.listProcessesRequest().send().wait(ws());
  sb.sandbox.deleteRequest().send().wait(ws());
  ASSERT_EQ(audit_lines_.size(), 10u);
  EXPECT_EQ(field(audit_lines_[8], "operation"), "Sandbox.listProcesses");
  EXPECT_EQ(field(audit_lines_[9], "operation"), "Sandbox.delete");
  EXPECT_EQ(field(audit_lines_[9], "result"), "ok");
  for (const auto& line : audit_lines_) EXPECT_EQ(line.back(), '\n');
}

// Every method of Supervisor, Sandbox and Process is audited through AuditedDispatch; the
// API's other server-side interfaces must stay without methods, or a method added to them
// would not be (give its server a dispatchCall through AuditedDispatch first).
TEST(AuditCoverageTest, TheOtherServedInterfacesHaveNoMethods) {
  EXPECT_EQ(capnp::Schema::from<api::Subscription>().getMethods().size(), 0u);
  EXPECT_EQ(capnp::Schema::from<api::Socket>().getMethods().size(), 0u);
}

// The network the privhelper set up is what list and inspect show.
TEST_F(BrokerTest, ASandboxShowsItsNetwork) {
  auto sup = Connect(owner_);
  Created none = Create(sup);
  helper_->create_network_address = "10.88.0.6";
  Created net = Create(sup);
  auto none_info = none.sandbox.inspectRequest().send().wait(ws());
  EXPECT_STREQ(none_info.getInfo().getNetwork().getMode().cStr(), "none");
  EXPECT_STREQ(none_info.getInfo().getNetwork().getAddress().cStr(), "");
  auto net_info = net.sandbox.inspectRequest().send().wait(ws());
  EXPECT_STREQ(net_info.getInfo().getNetwork().getMode().cStr(), "sandbox");
  EXPECT_STREQ(net_info.getInfo().getNetwork().getAddress().cStr(), "10.88.0.6");
  ASSERT_EQ(net_info.getInfo().getNetwork().getInboundPorts().size(), 1u);
  EXPECT_EQ(net_info.getInfo().getNetwork().getInboundPorts()[0], 4096);
  auto listed = sup.listSandboxesRequest().send().wait(ws());
  int with_address = 0;
  for (auto s : listed.getSandboxes()) with_address += s.getNetwork().getAddress() == "10.88.0.6";
  EXPECT_EQ(with_address, 1);
}

// The privhelper checks the client's own permissions on each workspace (attack run item 1), so
// it must learn who the client is: its uid and every gid, primary first.
TEST_F(BrokerTest, ACreateCarriesTheClientsUidAndGroupsToThePrivhelper) {
  auto sup = Connect(Peer{1000, {1000, 27, 44}});
  Create(sup);
  EXPECT_EQ(helper_->create_peers, std::vector<std::string>{"1000:1000,27,44"});
}

TEST_F(BrokerTest, RefusedCreatesNeverReachThePrivhelper) {
  struct Case {
    std::string name;
    Peer peer;
    std::function<void(api::SandboxSpec::Builder)> spec;
    std::string reason;
  };
  std::vector<Case> cases = {
      {"no deployment at all", nobody_, [](auto s) { s.setDeploymentId("work"); },
       "permission-denied"},
      {"someone else's deployment", owner_, [](auto s) { s.setDeploymentId("other"); },
       "permission-denied"},
      {"unknown deployment", owner_, [](auto s) { s.setDeploymentId("nope"); },
       "permission-denied"},
      {"NUL in the deployment id", owner_,
       [](auto s) { s.setDeploymentId(capnp::Text::Reader("work\0x", 6)); }, "invalid-argument"},
      {"not UTF-8", owner_, [](auto s) { s.setDeploymentId("w\xff"); }, "invalid-argument"},
      {"profile not allowed", owner_,
       [](auto s) {
         s.setDeploymentId("work");
         s.setProfile("root");
       },
       "permission-denied"},
      {"label too long", owner_,
       [](auto s) {
         s.setDeploymentId("work");
         s.initLabels(1)[0].setKey(std::string(300, 'k'));
       },
       "invalid-argument"},
      {"too many labels", owner_,
       [](auto s) {
         s.setDeploymentId("work");
         s.initLabels(33);
       },
       "invalid-argument"},
  };
  for (auto& c : cases) {
    auto sup = Connect(c.peer);
    auto req = sup.createSandboxRequest();
    c.spec(req.initSpec());
    auto error = kj::runCatchingExceptions([&] { req.send().wait(ws()); });
    EXPECT_EQ(Description(error).rfind(c.reason + ": ", 0), 0u) << c.name << ": " << Description(error);
  }
  EXPECT_TRUE(helper_->calls.empty());
  EXPECT_EQ(broker_->registry().size(), 0u);
}

TEST_F(BrokerTest, APrivhelperRefusalIsForwardedWithItsReasonAndLeavesNothing) {
  auto sup = Connect(owner_);
  helper_->create_error = "invalid-argument: workspaces[0]: outside the deployment's roots";
  auto req = sup.createSandboxRequest();
  req.initSpec().setDeploymentId("work");
  auto error = kj::runCatchingExceptions([&] { req.send().wait(ws()); });
  EXPECT_EQ(Description(error), "invalid-argument: workspaces[0]: outside the deployment's roots");
  // Text without a known reason token is not passed off as one.
  helper_->create_error = "PromiseFulfiller was destroyed: x";
  auto again = sup.createSandboxRequest();
  again.initSpec().setDeploymentId("work");
  error = kj::runCatchingExceptions([&] { again.send().wait(ws()); });
  EXPECT_EQ(Description(error), "internal: PromiseFulfiller was destroyed: x");
  EXPECT_EQ(broker_->registry().size(), 0u);
}

// Regression: a create whose client went away mid-call left the sandbox `creating` for good.
TEST_F(BrokerTest, ACreateCompletesEvenIfItsCallerLeaves) {
  helper_->hold = true;
  {
    auto sup = Connect(owner_);
    auto req = sup.createSandboxRequest();
    req.initSpec().setDeploymentId("work");
    auto call = req.send();
    Until([&] { return helper_->calls.size() == 1; });
    EXPECT_EQ(broker_->registry().List(owner_).size(), 0u);
  }  // the call is cancelled
  helper_->Release();
  Until([&] { return broker_->registry().List(owner_).size() == 1; });
  EXPECT_EQ(broker_->registry().List(owner_)[0]->state, SandboxState::kRunning);
}

TEST_F(BrokerTest, ConcurrentDeletesOneWinsAndARefusedDeleteLeavesItUsable) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  helper_->delete_error = "failed-precondition: sandbox is still being created";
  auto error = kj::runCatchingExceptions([&] { sb.sandbox.deleteRequest().send().wait(ws()); });
  EXPECT_EQ(Description(error), "failed-precondition: sandbox is still being created");
  EXPECT_EQ(broker_->registry().Find(sb.id)->state, SandboxState::kRunning);

  helper_->delete_error.clear();
  helper_->hold = true;
  auto first = sb.sandbox.deleteRequest().send();
  Until([&] { return broker_->registry().Find(sb.id)->state == SandboxState::kDeleting; });
  // A second delete is the same delete: it answers when the first does, and asks nothing more.
  auto second = sb.sandbox.deleteRequest().send();
  auto start = sb.sandbox.startProcessRequest();
  start.initSpec().initArgv(1).set(0, "true");
  error = kj::runCatchingExceptions([&] { start.send().wait(ws()); });
  EXPECT_EQ(Description(error).rfind("failed-precondition: ", 0), 0u) << Description(error);
  helper_->Release();
  first.wait(ws());
  second.wait(ws());
  EXPECT_EQ(std::count(helper_->calls.begin(), helper_->calls.end(), "delete " + sb.id), 2)
      << "the failed one and one more";
  Until([&] { return broker_->registry().Find(sb.id) == nullptr; });
}

TEST_F(BrokerTest, ADeletedSandboxIsDeletingUntilThePrivhelperHasReleasedIt) {
  auto sup = Connect(owner_);
  auto create = [&] {
    auto req = sup.createSandboxRequest();
    req.initSpec().setDeploymentId("work");
    req.getSpec().setKey("task-1");
    auto res = req.send().wait(ws());
    return Created{res.getSandbox(), res.getInfo().getId().cStr()};
  };
  Created sb = create();
  helper_->hold_gone = true;
  sb.sandbox.deleteRequest().send().wait(ws());  // nothing runs in it any more
  auto listing = sup.listSandboxesRequest().send().wait(ws());  // owns what `listed` reads
  auto listed = listing.getSandboxes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_STREQ(listed[0].getState().cStr(), "deleting");
  EXPECT_STREQ(sb.sandbox.inspectRequest().send().wait(ws()).getInfo().getState().cStr(),
               "deleting");
  sb.sandbox.deleteRequest().send().wait(ws());  // answered at once: it is past that point
  EXPECT_EQ(std::count(helper_->calls.begin(), helper_->calls.end(), "delete " + sb.id), 1);
  // Its key is free: a create with it makes a new sandbox.
  Created again = create();
  EXPECT_NE(again.id, sb.id);

  helper_->ReleaseGone();
  Until([&] { return broker_->registry().Find(sb.id) == nullptr; });
  struct stat st;
  EXPECT_NE(stat((dir_ + "/" + sb.id).c_str(), &st), 0) << "its state dir is removed";
  EXPECT_NE(broker_->registry().Find(again.id), nullptr);
}

TEST_F(BrokerTest, ATeardownThatFailsLeavesTheSandboxStoppedForAnotherDelete) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  helper_->gone_error = "internal: runsc delete failed";
  sb.sandbox.deleteRequest().send().wait(ws());
  Until([&] { return broker_->registry().Find(sb.id)->state == SandboxState::kStopped; });
  auto inspected = sb.sandbox.inspectRequest().send().wait(ws());  // owns what `info` reads
  auto info = inspected.getInfo();
  EXPECT_NE(std::string(info.getStateReason().cStr()).find("delete it again"), std::string::npos)
      << info.getStateReason().cStr();
  helper_->gone_error.clear();
  sb.sandbox.deleteRequest().send().wait(ws());
  Until([&] { return broker_->registry().Find(sb.id) == nullptr; });
}

// The privhelper keeps a sandbox whose teardown failed `deleting` (it never runs again): a
// delete that fails once the teardown began leaves it stopped for another delete, not running.
TEST_F(BrokerTest, ADeleteWhoseTeardownFailsLeavesTheSandboxStoppedNotRunning) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  helper_->delete_error = "internal: runsc delete failed";
  auto error = kj::runCatchingExceptions([&] { sb.sandbox.deleteRequest().send().wait(ws()); });
  EXPECT_EQ(Description(error), "internal: runsc delete failed");
  EXPECT_EQ(broker_->registry().Find(sb.id)->state, SandboxState::kStopped);
  auto inspected = sb.sandbox.inspectRequest().send().wait(ws());  // owns what `info` reads
  auto info = inspected.getInfo();
  EXPECT_NE(std::string(info.getStateReason().cStr()).find("delete it again"), std::string::npos)
      << info.getStateReason().cStr();
  auto start = sb.sandbox.startProcessRequest();
  start.initSpec().initArgv(1).set(0, "true");
  error = kj::runCatchingExceptions([&] { start.send().wait(ws()); });
  EXPECT_EQ(Description(error).rfind("failed-precondition: ", 0), 0u) << Description(error);
  helper_->delete_error.clear();
  sb.sandbox.deleteRequest().send().wait(ws());
  Until([&] { return broker_->registry().Find(sb.id) == nullptr; });
}

// A gc or a restart of the privhelper finished a teardown that had failed: the next delete
// finds nothing there, and that is what it wanted.
TEST_F(BrokerTest, ADeleteOfASandboxThePrivhelperNoLongerHoldsForgetsIt) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  helper_->gone_error = "internal: runsc delete failed";
  sb.sandbox.deleteRequest().send().wait(ws());
  Until([&] { return broker_->registry().Find(sb.id)->state == SandboxState::kStopped; });
  helper_->delete_error = "not-found: no sandbox " + sb.id;
  sb.sandbox.deleteRequest().send().wait(ws());
  EXPECT_EQ(broker_->registry().Find(sb.id), nullptr);
  struct stat st;
  EXPECT_NE(stat((dir_ + "/" + sb.id).c_str(), &st), 0) << "its state dir is removed";
}

TEST_F(BrokerTest, ProcessOutputInputAndExit) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  Started p = Start(sb.sandbox);
  auto& fake = helper_->process(p.id);
  WriteAll(fake.stdout_w.get(), "hello ");
  auto [subscription, collector] = Subscribe(p.process);
  Collector& out = *collector;
  Until([&] { return out.bytes == "hello "; });
  WriteAll(fake.stdout_w.get(), "world");
  Until([&] { return out.bytes == "hello world"; });

  auto w = p.process.writeInputRequest();
  w.setData(kj::StringPtr("typed").asBytes());
  w.send().wait(ws());
  char buf[16];
  ASSERT_EQ(read(fake.stdin_r.get(), buf, sizeof(buf)), 5);
  EXPECT_EQ(std::string(buf, 5), "typed");
  p.process.closeInputRequest().send().wait(ws());
  EXPECT_EQ(helper_->calls.back(), "closeInput " + p.id);
  EXPECT_EQ(read(fake.stdin_r.get(), buf, sizeof(buf)), 0) << "end-of-file after close";
  // A refused stream write is reported by that call or, as capnp streams do, by the next call
  // on the same capability.
  auto again = p.process.writeInputRequest();
  again.setData(kj::StringPtr("late").asBytes());
  auto error = kj::runCatchingExceptions([&] {
    again.send().wait(ws());
    p.process.infoRequest().send().wait(ws());
  });
  EXPECT_EQ(Description(error), "failed-precondition: input is closed");
  auto found = sb.sandbox.getProcessRequest();
  found.setId(p.id);
  p.process = found.send().wait(ws()).getProcess();

  helper_->Exit(p.id, 3);
  auto waited = p.process.waitRequest().send().wait(ws());
  EXPECT_EQ(FromCapnp(waited.getStatus()), ProcessExit::Exited(3));
  Until([&] { return out.ended; });
  EXPECT_EQ(out.status, ProcessExit::Exited(3));
  EXPECT_EQ(out.bytes, "hello world");
}

// Regression (attack run, item 5): a sandbox whose sentry was SIGKILLed stayed `running`, and
// exec into it reached runsc, which failed with its own message.
TEST_F(BrokerTest, ASandboxThatStopsByItselfIsShownStoppedRefusesProcessesAndDeletes) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  EXPECT_EQ(helper_->sandbox_waits, std::vector<std::string>{sb.id});
  Started p = Start(sb.sandbox);
  auto [subscription, collector] = Subscribe(p.process);
  Collector& out = *collector;

  const std::string why = "its gVisor kernel (runsc-sandbox) exited (killed by signal 9)";
  helper_->StopSandbox(sb.id, why);
  Until([&] { return broker_->registry().Find(sb.id)->state == SandboxState::kStopped; });
  auto inspected = sb.sandbox.inspectRequest().send().wait(ws());
  EXPECT_STREQ(inspected.getInfo().getState().cStr(), "stopped");
  EXPECT_EQ(inspected.getInfo().getStateReason().cStr(), why);
  size_t calls = helper_->calls.size();
  auto start = sb.sandbox.startProcessRequest();
  start.initSpec().initArgv(1).set(0, "true");
  auto error = kj::runCatchingExceptions([&] { start.send().wait(ws()); });
  EXPECT_EQ(Description(error), "failed-precondition: sandbox " + sb.id + " is stopped: " + why);
  EXPECT_EQ(helper_->calls.size(), calls) << "refused before the privhelper";

  // Its process ends (runsc could not wait): the wait answers and the stream ends.
  helper_->EndUnknown(p.id);
  auto waited = p.process.waitRequest().send().wait(ws());
  EXPECT_EQ(FromCapnp(waited.getStatus()), ProcessExit::Unknown());
  Until([&] { return out.ended; });
  EXPECT_EQ(out.status, ProcessExit::Unknown());
  auto del = sb.sandbox.deleteRequest();
  del.setForce(false);
  del.send().wait(ws());
  Until([&] { return broker_->registry().Find(sb.id) == nullptr; });
}

TEST_F(BrokerTest, SignalsAndResizesAreCheckedBeforeThePrivhelper) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  Started p = Start(sb.sandbox);
  size_t calls = helper_->calls.size();
  for (int bad : {0, 65, -9}) {
    auto req = p.process.signalRequest();
    req.setSignal(bad);
    auto error = kj::runCatchingExceptions([&] { req.send().wait(ws()); });
    EXPECT_EQ(Description(error).rfind("invalid-argument: ", 0), 0u) << bad;
  }
  EXPECT_EQ(helper_->calls.size(), calls);
  auto req = p.process.signalRequest();
  req.setSignal(15);
  req.send().wait(ws());
  EXPECT_EQ(helper_->calls.back(), "signal " + p.id + " 15");
  auto resize = p.process.resizeRequest();
  resize.setRows(10);
  resize.setCols(10);
  auto error = kj::runCatchingExceptions([&] { resize.send().wait(ws()); });
  EXPECT_EQ(Description(error), "failed-precondition: not a tty process");
  auto empty = sb.sandbox.startProcessRequest();
  empty.initSpec();
  error = kj::runCatchingExceptions([&] { empty.send().wait(ws()); });
  EXPECT_EQ(Description(error), "invalid-argument: argv: must not be empty");
}

// A capnp client is held to one stream write at a time by flow control; a client speaking the
// protocol by hand is not, so the broker bounds what it queues itself.
TEST_F(BrokerTest, InputQueuedForAProcessThatNeverReadsIsBounded) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  Started p = Start(sb.sandbox);
  ProcessRecord* record = *broker_->registry().VisibleProcess(owner_, sb.id, p.id);
  std::string mib(1 << 20, 'x');
  auto bytes = kj::ArrayPtr<const capnp::byte>(reinterpret_cast<const capnp::byte*>(mib.data()),
                                               mib.size());
  std::vector<kj::Promise<void>> writes;
  absl::Status refused;
  for (int i = 0; i < 24 && refused.ok(); ++i) {
    auto w = broker_->WriteInput(*record, bytes);
    if (w.ok()) writes.push_back(kj::mv(*w));
    else refused = w.status();
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_EQ(writes.size(), 15u) << "16 MiB less the per-call cost";
  EXPECT_LE(record->input->queued(), InputQueue::kMaxQueuedBytes);
  // The process ends without reading: the queued writes fail, and nothing stays queued.
  helper_->Exit(p.id, 0);
  for (auto& w : writes) {
    auto error = kj::runCatchingExceptions([&] { w.wait(ws()); });
    EXPECT_NE(error, nullptr);
  }
  EXPECT_EQ(record->input->queued(), 0u);
  Until([&] { return record->ended(); });
  auto late = broker_->WriteInput(*record, bytes);
  EXPECT_EQ(late.status().message(), "the process has ended");
}

TEST_F(BrokerTest, ARestartedBrokerRestoresOwnersLabelsArgvAndContinuesLogs) {
  std::string sandbox_id, process_id;
  {
    auto sup = Connect(owner_);
    Created sb = Create(sup);
    Started p = Start(sb.sandbox, {"sh", "-c", "echo before"});
    sandbox_id = sb.id;
    process_id = p.id;
    WriteAll(helper_->process(p.id).stdout_w.get(), "before|");
    Until([&] {
      return (*broker_->registry().VisibleProcess(owner_, sb.id, p.id))->stdout_log->end() == 7;
    });
  }
  ASSERT_EQ(mkdir((dir_ + "/sb-stale").c_str(), 0700), 0);
  broker_ = nullptr;  // the broker dies; its state dir stays
  Start();
  helper_->inventory_sandboxes.push_back({sandbox_id, "work", "default"});
  auto& kept = helper_->AddKeptProcess(sandbox_id, process_id);
  auto inventory = helper_client_.inventoryRequest().send().wait(ws());
  broker_->Restore(inventory, ws());

  auto sup = Connect(owner_);
  auto list_response = sup.listSandboxesRequest().send().wait(ws());
  auto listed = list_response.getSandboxes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].getOwnerUid(), 1000u);
  EXPECT_STREQ(listed[0].getLabels()[0].getKey().cStr(), "purpose");
  ProcessRecord* p = *broker_->registry().VisibleProcess(owner_, sandbox_id, process_id);
  EXPECT_EQ(p->argv, (std::vector<std::string>{"sh", "-c", "echo before"}));
  WriteAll(kept.stdout_w.get(), "after");
  helper_->Exit(process_id, 0);
  Until([&] { return p->ended() && p->stdout_log->closed(); });
  EXPECT_EQ(p->stdout_log->Read(0, 100), "before|after") << "offsets continue across the crash";
  struct stat st;
  EXPECT_NE(stat((dir_ + "/sb-stale").c_str(), &st), 0) << "logs of gone sandboxes are removed";
}

// A restarted privhelper's spawner kept only the newest bytes of a drop-oldest stream: the
// reattach starts later than the log ends, the range between is a gap a subscriber is told of
// (exactly, between what it had and what follows), and the gap survives another broker restart.
TEST_F(BrokerTest, AReattachThatStartsLaterLeavesAnExactGapThatSurvivesARestart) {
  auto [sandbox_id, process_id] = WroteThenBrokerRestarted("before|");
  helper_->inventory_sandboxes.push_back({sandbox_id, "work", "default"});
  auto& kept = helper_->AddKeptProcess(sandbox_id, process_id);
  helper_->reattach_starts[process_id] = {1007, 0};  // 1000 bytes lost after "before|"
  auto inventory = helper_client_.inventoryRequest().send().wait(ws());
  broker_->Restore(inventory, ws());
  EXPECT_EQ(helper_->reattach_asked[process_id], (std::pair<uint64_t, uint64_t>{7, 0}))
      << "the privhelper is asked to continue where the logs end";
  ProcessRecord* p = *broker_->registry().VisibleProcess(owner_, sandbox_id, process_id);
  WriteAll(kept.stdout_w.get(), "after");
  Until([&] { return p->stdout_log->end() == 1012; });
  EXPECT_EQ(p->stdout_log->Read(0, 100), "before|");
  EXPECT_EQ(p->stdout_log->Read(1007, 100), "after");
  EXPECT_EQ(p->stdout_log->Read(500, 100), "") << "nothing is read from the gap";
  auto collector = kj::heap<Collector>();
  Collector* got = collector.get();
  api::OutputSink::Client sink = kj::mv(collector);
  auto delivery = Deliver(kj::addRef(*p), api::Stream::STDOUT, 0, sink).eagerlyEvaluate(nullptr);
  Until([&] { return got->bytes.size() == 12; });
  EXPECT_EQ(got->bytes, "before|after");
  EXPECT_EQ(got->lost, 1000u);
  EXPECT_EQ(got->gap_at, 7u) << "the gap is reported exactly where it is";

  // Another broker restart: the record kept the gap.
  delivery = nullptr;
  p = nullptr;
  broker_ = nullptr;
  Start();
  helper_->inventory_sandboxes.push_back({sandbox_id, "work", "default"});
  helper_->AddKeptProcess(sandbox_id, process_id);
  auto again = helper_client_.inventoryRequest().send().wait(ws());
  broker_->Restore(again, ws());
  EXPECT_EQ(helper_->reattach_asked[process_id].first, 1012u);
  p = *broker_->registry().VisibleProcess(owner_, sandbox_id, process_id);
  ASSERT_EQ(p->stdout_log->gaps().size(), 1u);
  EXPECT_EQ(p->stdout_log->gaps()[0], (std::pair<uint64_t, uint64_t>{7, 1007}));
}

// A process the broker knew of that a restarted privhelper could not keep (lostReason) is listed
// as ended, unknown, with its output as it was and the reason after it.
TEST_F(BrokerTest, AProcessARestartedPrivhelperLostIsListedEndedWithTheReason) {
  auto [sandbox_id, process_id] = WroteThenBrokerRestarted("working", "job");
  FakeHelper::Known known{sandbox_id, "work", "default"};
  known.unattached = true;
  known.lost_reason = "its spawner could not be reattached: test";
  helper_->inventory_sandboxes.push_back(known);
  auto inventory = helper_client_.inventoryRequest().send().wait(ws());
  broker_->Restore(inventory, ws());
  ProcessRecord* p = *broker_->registry().VisibleProcess(owner_, sandbox_id, process_id);
  EXPECT_TRUE(p->ended());
  EXPECT_EQ(p->exit.kind, ProcessExit::kUnknown);
  EXPECT_EQ(p->stdout_log->Read(0, 100), "working");
  EXPECT_THAT(p->stderr_log->Read(0, 1000),
              ::testing::HasSubstr("did not survive the supervisor's restart (its spawner could not be "
                        "reattached: test)"));
  EXPECT_EQ(p->key, "job") << "found by its key as before";
}

// A process the privhelper holds but cannot reattach (its spawner did not answer the resume) is
// listed as ended, unknown, with why: a wait on it ends, it does not vanish.
TEST_F(BrokerTest, AProcessWhoseReattachFailsIsListedEndedWithWhy) {
  auto [sandbox_id, process_id] = WroteThenBrokerRestarted("partial");
  helper_->inventory_sandboxes.push_back({sandbox_id, "work", "default"});
  // Held by the privhelper, but without pipes to hand over: its reattach is refused.
  helper_->inventory_processes.emplace_back(sandbox_id, process_id);
  auto inventory = helper_client_.inventoryRequest().send().wait(ws());
  broker_->Restore(inventory, ws());
  EXPECT_NE(std::find(helper_->calls.begin(), helper_->calls.end(), "reattach " + process_id),
            helper_->calls.end());
  auto found = broker_->registry().VisibleProcess(owner_, sandbox_id, process_id);
  ASSERT_TRUE(found.ok()) << found.status();
  ProcessRecord* p = *found;
  EXPECT_TRUE(p->ended());
  EXPECT_EQ(p->exit.kind, ProcessExit::kUnknown);
  EXPECT_EQ(p->stdout_log->Read(0, 100), "partial");
  EXPECT_THAT(p->stderr_log->Read(0, 1000),
              ::testing::HasSubstr("did not survive the supervisor's restart (it could not be "
                                   "reattached: not-found: no process " + process_id + ")"));
}

TEST_F(BrokerTest, ARestartedBrokerKnowsWhichSandboxesStoppedAndWatchesTheOthers) {
  broker_ = nullptr;
  Start();
  helper_->inventory_sandboxes.push_back({"sb-running", "work", "default"});
  FakeHelper::Known dead{"sb-dead", "work", "default"};
  dead.stopped = true;
  dead.stop_reason = "its gVisor file server (runsc-gofer) exited (killed by signal 9)";
  helper_->inventory_sandboxes.push_back(dead);
  FakeHelper::Known oom{"sb-oom", "work", "default"};
  oom.stopped = oom.oom_killed = true;
  helper_->inventory_sandboxes.push_back(oom);
  auto inventory = helper_client_.inventoryRequest().send().wait(ws());
  broker_->Restore(inventory, ws());
  ws().poll();
  EXPECT_EQ(helper_->sandbox_waits, std::vector<std::string>{"sb-running"});
  auto& registry = broker_->registry();
  EXPECT_EQ(registry.Find("sb-running")->state, SandboxState::kRunning);
  EXPECT_EQ(registry.Find("sb-dead")->state, SandboxState::kStopped);
  EXPECT_EQ(registry.Find("sb-dead")->stop_reason, dead.stop_reason);
  EXPECT_EQ(registry.Find("sb-oom")->state, SandboxState::kOomKilled);
  EXPECT_EQ(registry.Find("sb-oom")->stop_reason, kOomKilledSandboxReason);
  helper_->StopSandbox("sb-running", "its gVisor kernel (runsc-sandbox) exited (exit status 2)");
  Until([&] { return registry.Find("sb-running")->state == SandboxState::kStopped; });
}

// ---------------------------------------------------------------- keys and pause

TEST_F(BrokerTest, ConcurrentCreatesWithOneKeyMakeOneSandbox) {
  auto sup = Connect(owner_);
  auto other_connection = Connect(owner_);
  helper_->hold = true;
  auto keyed = [&](api::Supervisor::Client& s) {
    auto req = s.createSandboxRequest();
    req.initSpec().setDeploymentId("work");
    req.getSpec().setKey("workspace-7");
    return req.send();
  };
  auto first = keyed(sup);
  auto second = keyed(other_connection);
  ws().poll();
  // findSandbox does not see it while it is being created.
  auto find = [&](api::Supervisor::Client& s, const std::string& deployment,
                  const std::string& key) {
    auto req = s.findSandboxRequest();
    req.setDeploymentId(deployment);
    req.setKey(key);
    return req.send();
  };
  auto early = kj::runCatchingExceptions([&] { find(sup, "work", "workspace-7").wait(ws()); });
  EXPECT_EQ(Description(early).rfind("not-found: ", 0), 0u) << Description(early);
  helper_->Release();
  auto a = first.wait(ws());
  auto b = second.wait(ws());
  EXPECT_EQ(helper_->calls.size(), 1u) << "one create reached the privhelper";
  EXPECT_STREQ(a.getInfo().getId().cStr(), b.getInfo().getId().cStr());
  EXPECT_NE(a.getCreated(), b.getCreated());
  EXPECT_TRUE(a.getCreated());
  EXPECT_STREQ(b.getInfo().getKey().cStr(), "workspace-7");
  EXPECT_STREQ(b.getInfo().getState().cStr(), "running");
  // A later create returns it as well, without asking the privhelper.
  auto c = keyed(sup).wait(ws());
  EXPECT_FALSE(c.getCreated());
  EXPECT_STREQ(c.getInfo().getId().cStr(), a.getInfo().getId().cStr());
  EXPECT_EQ(helper_->calls.size(), 1u);

  auto found = find(sup, "work", "workspace-7").wait(ws());
  EXPECT_STREQ(found.getInfo().getId().cStr(), a.getInfo().getId().cStr());
  EXPECT_STREQ(found.getInfo().getKey().cStr(), "workspace-7");
  auto inspected = found.getSandbox().inspectRequest().send().wait(ws());
  EXPECT_STREQ(inspected.getInfo().getId().cStr(), a.getInfo().getId().cStr());
  // Another deployment's peer, a missing key, an empty or bad key: refused.
  auto other_peer = Connect(other_);
  for (auto& [client, deployment, key, reason] :
       std::vector<std::tuple<api::Supervisor::Client*, std::string, std::string, std::string>>{
           {&other_peer, "work", "workspace-7", "not-found"},
           {&sup, "work", "workspace-8", "not-found"},
           {&sup, "work", "", "invalid-argument"},
           {&sup, "work", std::string(300, 'k'), "invalid-argument"}}) {
    // Plain names for the lambda: clang 14 cannot capture structured bindings.
    api::Supervisor::Client* c = client;
    const std::string &d = deployment, &k = key;
    auto error = kj::runCatchingExceptions([&] { find(*c, d, k).wait(ws()); });
    EXPECT_EQ(Description(error).rfind(reason + ": ", 0), 0u) << key << ": " << Description(error);
  }
}

TEST_F(BrokerTest, AFailedKeyedCreateFailsItsWaiterAndFreesTheKey) {
  auto sup = Connect(owner_);
  helper_->hold = true;
  helper_->create_error = "invalid-argument: no such workspace";
  auto keyed = [&] {
    auto req = sup.createSandboxRequest();
    req.initSpec().setDeploymentId("work");
    req.getSpec().setKey("k");
    return req.send();
  };
  auto first = keyed();
  auto second = keyed();
  ws().poll();
  helper_->Release();
  for (auto* call : {&first, &second}) {
    auto error = kj::runCatchingExceptions([&] { call->wait(ws()); });
    EXPECT_EQ(Description(error).rfind("invalid-argument: no such workspace", 0), 0u)
        << Description(error);
  }
  helper_->create_error = "";
  auto retried = keyed().wait(ws());
  EXPECT_TRUE(retried.getCreated());
  EXPECT_EQ(helper_->calls.size(), 2u);
}

// (Another uid's key is already-exists: registry_test, where two uids share a deployment.)
TEST_F(BrokerTest, ADeletedSandboxsKeyIsFreeAgain) {
  auto sup = Connect(owner_);
  auto keyed = [&] {
    auto req = sup.createSandboxRequest();
    req.initSpec().setDeploymentId("work");
    req.getSpec().setKey("k");
    return req.send().wait(ws());
  };
  auto made = keyed();
  std::string id = made.getInfo().getId().cStr();
  made.getSandbox().deleteRequest().send().wait(ws());
  auto again = keyed();
  EXPECT_TRUE(again.getCreated());
  EXPECT_STRNE(again.getInfo().getId().cStr(), id.c_str());
}

TEST_F(BrokerTest, APausedSandboxStartsNothingUntilResumed) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  sb.sandbox.pauseRequest().send().wait(ws());
  auto state = [&] {
    return std::string(sb.sandbox.inspectRequest().send().wait(ws()).getInfo().getState().cStr());
  };
  EXPECT_EQ(state(), "paused");
  sb.sandbox.pauseRequest().send().wait(ws());  // does nothing
  EXPECT_EQ(std::count(helper_->calls.begin(), helper_->calls.end(), "pause " + sb.id), 1);
  auto start = sb.sandbox.startProcessRequest();
  start.initSpec().initArgv(1).set(0, "true");
  auto refused = kj::runCatchingExceptions([&] { start.send().wait(ws()); });
  EXPECT_EQ(Description(refused).rfind("failed-precondition: ", 0), 0u) << Description(refused);
  EXPECT_EQ(std::count_if(helper_->calls.begin(), helper_->calls.end(),
                          [](const std::string& c) { return c.rfind("start ", 0) == 0; }),
            0);
  auto listed = sup.listSandboxesRequest().send().wait(ws());
  EXPECT_STREQ(listed.getSandboxes()[0].getState().cStr(), "paused");

  sb.sandbox.resumeRequest().send().wait(ws());
  EXPECT_EQ(state(), "running");
  sb.sandbox.resumeRequest().send().wait(ws());  // does nothing
  EXPECT_EQ(std::count(helper_->calls.begin(), helper_->calls.end(), "resume " + sb.id), 1);
  Started p = Start(sb.sandbox);
  EXPECT_FALSE(p.id.empty());
}

TEST_F(BrokerTest, PauseRefusalsAndAPausedSandboxDeletes) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  helper_->pause_error = "internal: cannot pause sandbox: runsc said no";
  auto failed = kj::runCatchingExceptions([&] { sb.sandbox.pauseRequest().send().wait(ws()); });
  EXPECT_EQ(Description(failed).rfind("internal: cannot pause", 0), 0u) << Description(failed);
  EXPECT_EQ(broker_->registry().Find(sb.id)->state, SandboxState::kRunning);
  helper_->pause_error = "";
  sb.sandbox.pauseRequest().send().wait(ws());
  // Someone who may not use the deployment cannot reach it at all.
  auto stranger = Connect(other_);
  auto get = stranger.getSandboxRequest();
  get.setId(sb.id);
  auto hidden = kj::runCatchingExceptions([&] { get.send().wait(ws()); });
  EXPECT_EQ(Description(hidden).rfind("not-found: ", 0), 0u);
  auto del = sb.sandbox.deleteRequest();
  del.send().wait(ws());
  Until([&] { return broker_->registry().Find(sb.id) == nullptr; });
  // A stopped sandbox can be neither paused nor resumed.
  Created dead = Create(sup);
  helper_->StopSandbox(dead.id, "its gVisor kernel (runsc-sandbox) exited");
  Until([&] { return broker_->registry().Find(dead.id)->state == SandboxState::kStopped; });
  for (bool pause : {true, false}) {
    auto error = kj::runCatchingExceptions([&] {
      if (pause) dead.sandbox.pauseRequest().send().wait(ws());
      else dead.sandbox.resumeRequest().send().wait(ws());
    });
    EXPECT_EQ(Description(error).rfind("failed-precondition: ", 0), 0u) << Description(error);
  }
}

TEST_F(BrokerTest, KeysAndPauseSurviveABrokerRestart) {
  std::string id;
  {
    auto sup = Connect(owner_);
    auto req = sup.createSandboxRequest();
    req.initSpec().setDeploymentId("work");
    req.getSpec().setKey("survivor");
    id = req.send().wait(ws()).getInfo().getId().cStr();
  }
  broker_ = nullptr;
  Start();
  FakeHelper::Known paused{id, "work", "default"};
  paused.unattached = paused.paused = true;
  helper_->inventory_sandboxes.push_back(paused);
  auto inventory = helper_client_.inventoryRequest().send().wait(ws());
  broker_->Restore(inventory, ws());
  auto sup = Connect(owner_);
  auto find = sup.findSandboxRequest();
  find.setDeploymentId("work");
  find.setKey("survivor");
  auto found = find.send().wait(ws());
  EXPECT_STREQ(found.getInfo().getId().cStr(), id.c_str());
  EXPECT_STREQ(found.getInfo().getState().cStr(), "paused");
  EXPECT_STREQ(found.getInfo().getKey().cStr(), "survivor");
  found.getSandbox().resumeRequest().send().wait(ws());
  EXPECT_EQ(broker_->registry().Find(id)->state, SandboxState::kUnattached);
  // The key still makes creates idempotent.
  auto req = sup.createSandboxRequest();
  req.initSpec().setDeploymentId("work");
  req.getSpec().setKey("survivor");
  EXPECT_FALSE(req.send().wait(ws()).getCreated());
}

TEST_F(BrokerTest, AProcessKeyIsUniqueInItsSandboxAndFindsItsProcess) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  Started a = StartKeyed(sb.sandbox, "agent-1");
  size_t calls = helper_->calls.size();
  auto again = kj::runCatchingExceptions([&] { StartKeyed(sb.sandbox, "agent-1"); });
  EXPECT_EQ(Description(again).rfind("already-exists: ", 0), 0u) << Description(again);
  EXPECT_EQ(helper_->calls.size(), calls) << "a refused start reaches nothing";
  for (auto bad : {std::string("a\0b", 3), std::string(257, 'k')}) {
    auto refused = kj::runCatchingExceptions([&] {
      auto req = sb.sandbox.startProcessRequest();
      req.initSpec().initArgv(1).set(0, "cat");
      req.getSpec().setKey(capnp::Text::Reader(bad.data(), bad.size()));
      req.send().wait(ws());
    });
    EXPECT_EQ(Description(refused).rfind("invalid-argument: ", 0), 0u) << Description(refused);
  }
  // Another sandbox has its own keys.
  Created other = Create(sup);
  StartKeyed(other.sandbox, "agent-1");

  auto find = sb.sandbox.findProcessRequest();
  find.setKey("agent-1");
  auto found = find.send().wait(ws());
  EXPECT_FALSE(found.getReleased());
  EXPECT_EQ(std::string(found.getInfo().getId().cStr()), a.id);
  EXPECT_EQ(std::string(found.getInfo().getKey().cStr()), "agent-1");
  EXPECT_EQ(found.getProcess().infoRequest().send().wait(ws()).getInfo().getId(), a.id);
  auto missing = sb.sandbox.findProcessRequest();
  missing.setKey("nobody");
  auto error = kj::runCatchingExceptions([&] { missing.send().wait(ws()); });
  EXPECT_EQ(Description(error).rfind("not-found: ", 0), 0u) << Description(error);
  // Another deployment's client cannot probe keys.
  auto stranger = Connect(other_);
  auto get = stranger.getSandboxRequest();
  get.setId(sb.id);
  auto hidden = kj::runCatchingExceptions([&] { get.send().wait(ws()); });
  EXPECT_EQ(Description(hidden).rfind("not-found: ", 0), 0u);
}

TEST_F(BrokerTest, ReleaseIsRefusedWhileRunningThenForgetsEverythingButTheKey) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  Started p = StartKeyed(sb.sandbox, "job");
  std::string log = dir_ + "/" + sb.id + "/" + p.id + ".stdout";
  ASSERT_TRUE(Exists(log));
  auto running = kj::runCatchingExceptions([&] { p.process.releaseRequest().send().wait(ws()); });
  EXPECT_EQ(Description(running).rfind("failed-precondition: ", 0), 0u) << Description(running);
  EXPECT_EQ(Released(p.id), 0u);

  helper_->Exit(p.id, 7);
  p.process.waitRequest().send().wait(ws());
  p.process.releaseRequest().send().wait(ws());
  EXPECT_EQ(Released(p.id), 1u);
  EXPECT_EQ(helper_->held_processes(), 0u) << "the privhelper let go of it too";
  EXPECT_FALSE(Exists(log));
  EXPECT_FALSE(Exists(dir_ + "/" + sb.id + "/" + p.id + ".stderr"));
  EXPECT_EQ(sb.sandbox.listProcessesRequest().send().wait(ws()).getProcesses().size(), 0u);
  auto info = kj::runCatchingExceptions([&] { p.process.infoRequest().send().wait(ws()); });
  EXPECT_EQ(Description(info).rfind("not-found: ", 0), 0u) << "a held capability goes too";
  auto get = sb.sandbox.getProcessRequest();
  get.setId(p.id);
  auto gone = kj::runCatchingExceptions([&] { get.send().wait(ws()); });
  EXPECT_EQ(Description(gone).rfind("not-found: ", 0), 0u);

  auto find = sb.sandbox.findProcessRequest();
  find.setKey("job");
  auto found = find.send().wait(ws());
  EXPECT_TRUE(found.getReleased());
  EXPECT_EQ(std::string(found.getInfo().getId().cStr()), p.id);
  EXPECT_EQ(FromCapnp(found.getInfo().getStatus()), ProcessExit::Exited(7));
  auto reuse = kj::runCatchingExceptions([&] { StartKeyed(sb.sandbox, "job"); });
  EXPECT_EQ(Description(reuse).rfind("already-exists: ", 0), 0u) << "a released key stays taken";
}

TEST_F(BrokerTest, TheLastReleasedKeysAreRemembered) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  SandboxRecord* record = broker_->registry().Find(sb.id);
  for (size_t i = 0; i < ReleaseRules::kReleasedKeysKept; ++i)
    record->released.push_back({"p-x" + std::to_string(i), "k" + std::to_string(i), {}});
  auto p = StartKeyed(sb.sandbox, "last");
  helper_->Exit(p.id, 0);
  p.process.waitRequest().send().wait(ws());
  p.process.releaseRequest().send().wait(ws());
  EXPECT_EQ(record->released.size(), ReleaseRules::kReleasedKeysKept);
  EXPECT_EQ(record->released.back().key, "last");
}

TEST_F(BrokerTest, ADrainedProcessIsReleasedAfterAMinute) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  Started p = Start(sb.sandbox);
  WriteAll(helper_->process(p.id).stdout_w.get(), "out");
  helper_->Exit(p.id, 0);
  ReadToEnd(p.process);
  ws().poll();  // the end calls' returns (their subscriptions are gone already)
  ProcessRecord* r = *broker_->registry().VisibleProcess(owner_, sb.id, p.id);
  EXPECT_TRUE(r->stdout_drained);
  EXPECT_TRUE(r->stderr_drained);
  EXPECT_TRUE(r->drained_at.has_value());
  EXPECT_TRUE(r->ended_at.has_value());
  Advance(59 * kj::SECONDS);
  EXPECT_EQ(Released(p.id), 0u);
  Advance(2 * kj::SECONDS);
  EXPECT_EQ(Released(p.id), 1u);
  EXPECT_EQ(broker_->registry().Find(sb.id)->processes.size(), 0u);
}

TEST_F(BrokerTest, AnEndedProcessNobodyReadsIsReleasedAfterAnHour) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  Started p = Start(sb.sandbox);
  Started partly = Start(sb.sandbox);
  helper_->Exit(p.id, 0);
  helper_->Exit(partly.id, 0);
  {
    auto [subscription, out] = Subscribe(partly.process);  // stdout only: not drained
    Until([&, out = out] { return out->ended; });
  }
  Advance(59 * kj::MINUTES);
  EXPECT_EQ(Released(p.id) + Released(partly.id), 0u);
  Advance(2 * kj::MINUTES);
  EXPECT_EQ(Released(p.id), 1u);
  EXPECT_EQ(Released(partly.id), 1u);
}

TEST_F(BrokerTest, MoreThan64DrainedProcessesAreReleasedOldestFirstAtOnce) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  std::vector<std::string> ids;
  for (size_t i = 0; i < ReleaseRules::kDrainedKept + 2; ++i) {
    Started p = Start(sb.sandbox);
    helper_->Exit(p.id, 0);
    ReadToEnd(p.process);
    ids.push_back(p.id);
  }
  ws().poll();
  EXPECT_EQ(Released(ids[0]), 1u);
  EXPECT_EQ(Released(ids[1]), 1u);
  EXPECT_EQ(Released(ids[2]), 0u);
  EXPECT_EQ(broker_->registry().Find(sb.id)->processes.size(), ReleaseRules::kDrainedKept);
}

TEST_F(BrokerTest, MoreThan1024EndedProcessesAreReleasedOldestFirst) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  std::vector<std::string> ids;
  for (size_t i = 0; i < ReleaseRules::kEndedKept + 1; ++i) {
    Started p = Start(sb.sandbox);
    helper_->Exit(p.id, 0);
    ids.push_back(p.id);
  }
  Until([&] { return Released(ids[0]) == 1; });
  EXPECT_EQ(Released(ids[1]), 0u);
  EXPECT_EQ(broker_->registry().Find(sb.id)->processes.size(), ReleaseRules::kEndedKept);
}

TEST_F(BrokerTest, KeysAndReleasedKeysSurviveABrokerRestart) {
  std::string sandbox_id, live_id, released_id, half_released_id;
  {
    auto sup = Connect(owner_);
    Created sb = Create(sup);
    sandbox_id = sb.id;
    Started live = StartKeyed(sb.sandbox, "live", api::OutputMode::LOSSLESS);
    Started done = StartKeyed(sb.sandbox, "done");
    live_id = live.id;
    released_id = done.id;
    helper_->Exit(done.id, 4);
    done.process.waitRequest().send().wait(ws());
    done.process.releaseRequest().send().wait(ws());
  }
  broker_ = nullptr;
  Start();
  helper_->inventory_sandboxes.push_back({sandbox_id, "work", "default"});
  helper_->AddKeptProcess(sandbox_id, live_id);
  // The predecessor released this one but died before the privhelper did.
  helper_->AddKeptProcess(sandbox_id, released_id);
  helper_->Exit(released_id, 4);
  auto inventory = helper_client_.inventoryRequest().send().wait(ws());
  broker_->Restore(inventory, ws());
  ws().poll();
  EXPECT_EQ(Released(released_id), 1u) << "the interrupted release is finished";
  EXPECT_EQ(broker_->registry().Find(sandbox_id)->processes.count(released_id), 0u);

  auto sup = Connect(owner_);
  auto get = sup.getSandboxRequest();
  get.setId(sandbox_id);
  auto sandbox = get.send().wait(ws()).getSandbox();
  auto find = sandbox.findProcessRequest();
  find.setKey("live");
  auto live = find.send().wait(ws());
  EXPECT_FALSE(live.getReleased());
  EXPECT_EQ(live.getInfo().getOutput(), api::OutputMode::LOSSLESS);
  auto find_done = sandbox.findProcessRequest();
  find_done.setKey("done");
  auto done = find_done.send().wait(ws());
  EXPECT_TRUE(done.getReleased());
  EXPECT_EQ(FromCapnp(done.getInfo().getStatus()), ProcessExit::Exited(4));
  auto reuse = kj::runCatchingExceptions([&] { StartKeyed(sandbox, "live"); });
  EXPECT_EQ(Description(reuse).rfind("already-exists: ", 0), 0u);
}

// Lossless through the broker: a process that writes more than the profile keeps, with no
// subscriber, is held back (its pipe fills) instead of losing bytes; a late subscriber gets
// every byte from offset 0 and none is announced lost.
TEST_F(BrokerTest, ALosslessProcessWaitsForItsReaderAndLosesNothing) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);  // profile "default": 1 MiB kept per stream
  Started p = StartKeyed(sb.sandbox, "json", api::OutputMode::LOSSLESS);
  int out = helper_->process(p.id).stdout_w.get();
  std::string data(4 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + i / 4093);
  std::atomic<size_t> written{0};
  std::thread writer([&] {
    while (written < data.size()) {
      ssize_t n = write(out, data.data() + written, std::min<size_t>(64 << 10, data.size() - written));
      if (n <= 0) return;
      written += static_cast<size_t>(n);
    }
  });
  ProcessRecord* record = *broker_->registry().VisibleProcess(owner_, sb.id, p.id);
  Until([&] { return record->stdout_log->end() == (1u << 20); });
  for (int i = 0; i < 20; ++i) ws().poll();
  EXPECT_EQ(record->stdout_log->end(), 1u << 20) << "nothing beyond the capacity unread";
  EXPECT_LT(written.load(), data.size()) << "the writer is held back";
  auto [subscription, collector] = Subscribe(p.process);
  Collector& got = *collector;
  Until([&] { return got.bytes.size() == data.size(); });
  writer.join();
  EXPECT_EQ(got.lost, 0u);
  EXPECT_TRUE(got.bytes == data) << "every byte, in order";
}

// ---------------------------------------------------------------- connect

// What `fd` has to read (waiting at most 2 s, the broker's loop turning meanwhile: it relays
// the connection): "" at end-of-file, "(nothing)" if nothing came.
std::string ReadSome(int fd, kj::WaitScope& ws) {
  pollfd p = {fd, POLLIN, 0};
  for (int i = 0; i < 200; ++i) {
    ws.poll();
    if (poll(&p, 1, 10) == 1) {
      char buf[64];
      ssize_t n = read(fd, buf, sizeof(buf));
      return n > 0 ? std::string(buf, n) : "";
    }
  }
  return "(nothing)";
}

// The fd a Socket capability carries, duplicated (the capability owns the original).
int SocketFd(api::Socket::Client& socket, kj::WaitScope& ws) {
  auto fd = socket.getFd().wait(ws);
  KJ_IF_MAYBE(f, fd) { return fcntl(*f, F_DUPFD_CLOEXEC, 3); }
  return -1;
}

TEST_F(BrokerTest, ConnectHandsTheClientAWorkingSocketAndLetsGoOfItsCopy) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  auto req = sb.sandbox.connectRequest();
  req.setPort(8080);
  auto socket = req.send().wait(ws()).getSocket();
  ASSERT_EQ(helper_->calls.back(), "connect " + sb.id + " 8080");
  ASSERT_EQ(helper_->connected.size(), 1u);
  kj::AutoCloseFd mine(SocketFd(socket, ws()));
  ASSERT_GE(mine.get(), 0);
  int far = helper_->connected[0].get();
  WriteAll(mine.get(), "GET /");
  EXPECT_EQ(ReadSome(far, ws()), "GET /");
  WriteAll(far, "200");
  EXPECT_EQ(ReadSome(mine.get(), ws()), "200");
  // Dropping the capability closes the broker's copy: with ours closed too, the far end ends.
  socket = nullptr;
  ws().poll();
  mine = nullptr;
  EXPECT_EQ(ReadSome(far, ws()), "");
}

// The client gets a relayed Unix socket, never the TCP socket the privhelper made in the host's
// namespace (which could be disconnected and reconnected to the host's loopback services); the
// relay ends with the sandbox.
TEST_F(BrokerTest, ConnectHandsOutAUnixSocketThatEndsWithTheSandbox) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  auto req = sb.sandbox.connectRequest();
  req.setPort(8080);
  auto socket = req.send().wait(ws()).getSocket();
  kj::AutoCloseFd mine(SocketFd(socket, ws()));
  ASSERT_GE(mine.get(), 0);
  int domain = 0;
  socklen_t len = sizeof(domain);
  ASSERT_EQ(getsockopt(mine.get(), SOL_SOCKET, SO_DOMAIN, &domain, &len), 0);
  EXPECT_EQ(domain, AF_UNIX);
  int far = helper_->connected.at(0).get();
  auto del = sb.sandbox.deleteRequest();
  del.send().wait(ws());
  EXPECT_EQ(ReadSome(mine.get(), ws()), "") << "the relay outlived its sandbox";
  EXPECT_EQ(ReadSome(far, ws()), "");
}

TEST_F(BrokerTest, ConnectRefusalsKeepTheirReasons) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  auto connect = [&](uint16_t port) {
    auto req = sb.sandbox.connectRequest();
    req.setPort(port);
    auto e = kj::runCatchingExceptions([&] { req.send().wait(ws()); });
    return Description(e);
  };
  size_t calls = helper_->calls.size();
  EXPECT_EQ(connect(0).rfind("invalid-argument: ", 0), 0u) << connect(0);
  EXPECT_EQ(helper_->calls.size(), calls) << "a bad port reaches no privhelper";

  // The privhelper's refusals arrive with their reasons.
  for (std::string error : {"permission-denied: port 81 is not in the profile's network.inboundPorts",
                            "failed-precondition: sandbox has no network",
                            "unavailable: nothing listening on port 81"}) {
    helper_->connect_error = error;
    EXPECT_EQ(connect(81), error);
  }
  helper_->connect_error = "";

  // Paused: refused before the privhelper is asked.
  sb.sandbox.pauseRequest().send().wait(ws());
  calls = helper_->calls.size();
  EXPECT_EQ(connect(8080).rfind("failed-precondition: ", 0), 0u) << connect(8080);
  EXPECT_EQ(helper_->calls.size(), calls);
  sb.sandbox.resumeRequest().send().wait(ws());

  // Someone else cannot name the sandbox at all; a deleted one is gone.
  auto stranger = Connect(other_);
  auto get = stranger.getSandboxRequest();
  get.setId(sb.id);
  auto hidden = kj::runCatchingExceptions([&] { get.send().wait(ws()); });
  EXPECT_EQ(Description(hidden).rfind("not-found: ", 0), 0u);
  sb.sandbox.deleteRequest().send().wait(ws());
  Until([&] { return broker_->registry().Find(sb.id) == nullptr; });
  EXPECT_EQ(connect(8080).rfind("not-found: ", 0), 0u) << connect(8080);
  EXPECT_TRUE(helper_->connected.empty());
}

// A held Socket keeps a socket open in the broker: it counts against the connection's calls.
TEST_F(BrokerTest, HeldSocketsAreBoundedPerConnection) {
  auto sup = Connect(owner_);
  Created sb = Create(sup);
  std::vector<api::Socket::Client> held;
  std::string error;
  for (int i = 0; i < 10 && error.empty(); ++i) {
    auto req = sb.sandbox.connectRequest();
    req.setPort(8080);
    auto e = kj::runCatchingExceptions([&] { held.push_back(req.send().wait(ws()).getSocket()); });
    error = Description(e);
    if (error == "(no error)") error.clear();
  }
  EXPECT_EQ(error.rfind("unavailable: ", 0), 0u) << error;
  EXPECT_LE(held.size(), 4u);
}

// Over a real client connection (as the broker's listener makes it): the socket's fd arrives
// with the answer for a client that accepts fds; a client that does not gets no fd (the kernel
// drops it) and the broker's copy goes when the capability does.
class BrokerWireTest : public BrokerTest {
 protected:
  ~BrokerWireTest() noexcept override {}
  struct Wire {
    kj::Own<ClientConnection> server;
    kj::Own<kj::AsyncCapabilityStream> client_stream;
    kj::Own<capnp::TwoPartyClient> client;
  };
  Wire Open(unsigned client_max_fds) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    auto& low = *io_.lowLevelProvider;
    auto metered = kj::heap<MeteredStream>(
        low.wrapUnixSocketFd(sv[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP), budget_, true,
        owner_.uid, io_.provider->getTimer());
    Wire w;
    w.server = kj::heap<ClientConnection>(kj::mv(metered), 1 << 20, Connect(owner_), 1 << 20);
    w.client_stream = low.wrapUnixSocketFd(sv[1], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    w.client = client_max_fds > 0
                   ? kj::heap<capnp::TwoPartyClient>(*w.client_stream, client_max_fds)
                   : kj::heap<capnp::TwoPartyClient>(*w.client_stream);
    return w;
  }
  api::Socket::Client ConnectOver(Wire& w) {
    auto sup = w.client->bootstrap().castAs<api::Supervisor>();
    Created sb = Create(sup);
    auto req = sb.sandbox.connectRequest();
    req.setPort(8080);
    return req.send().wait(ws()).getSocket();
  }
  ReceiveBudget budget_;
};

TEST_F(BrokerWireTest, AClientThatAcceptsFdsGetsAWorkingSocket) {
  Wire w = Open(1);
  auto socket = ConnectOver(w);
  kj::AutoCloseFd mine(SocketFd(socket, ws()));
  ASSERT_GE(mine.get(), 0) << "no fd arrived";
  int far = helper_->connected.at(0).get();
  WriteAll(mine.get(), "hello");
  EXPECT_EQ(ReadSome(far, ws()), "hello");
  // Once our drop has arrived the broker has let go of its copy: with ours closed, the far
  // end reads end-of-file.
  socket = nullptr;
  mine = nullptr;
  for (int i = 0; i < 50; ++i) io_.provider->getTimer().afterDelay(2 * kj::MILLISECONDS).wait(ws());
  EXPECT_EQ(ReadSome(far, ws()), "") << "the broker still holds the socket";
}

TEST_F(BrokerWireTest, AClientThatAcceptsNoFdsGetsNoneAndLeaksNothing) {
  Wire w = Open(0);
  auto socket = ConnectOver(w);
  EXPECT_EQ(SocketFd(socket, ws()), -1);
  socket = nullptr;
  for (int i = 0; i < 50; ++i) io_.provider->getTimer().afterDelay(2 * kj::MILLISECONDS).wait(ws());
  EXPECT_EQ(ReadSome(helper_->connected.at(0).get(), ws()), "") << "a copy of the socket is still open";
}

// More ids than the privhelper takes in one sandboxUsage call (the whole host's sandboxes, for
// metrics) are asked in parts, and every id gets its own answer.
TEST_F(BrokerTest, UsageOfMoreSandboxesThanOneCallTakesIsAskedInParts) {
  std::vector<std::string> ids;
  for (int i = 0; i < 2500; ++i) ids.push_back(absl::StrCat("sb-", i));
  Broker::UsageAnswer answer = broker_->Usage(ids).wait(ws());
  EXPECT_EQ(helper_->usage_calls, 3);
  std::map<std::string, uint64_t> cpu;
  answer.ForEachSandbox(
      [&](helper::SandboxUsage::Reader u) { cpu[u.getSandboxId().cStr()] = u.getCpuNs(); });
  ASSERT_EQ(cpu.size(), ids.size());
  EXPECT_EQ(cpu.at("sb-0"), 1u);
  EXPECT_EQ(cpu.at("sb-1023"), 1024u);
  EXPECT_EQ(cpu.at("sb-1024"), 1u);
  EXPECT_EQ(cpu.at("sb-2499"), 2500u - 2048u);
  EXPECT_EQ(answer.service().getHostTasks(), 7u);

  // None at all still asks once, for the service's figures.
  helper_->usage_calls = 0;
  Broker::UsageAnswer none = broker_->Usage({}).wait(ws());
  EXPECT_EQ(helper_->usage_calls, 1);
  EXPECT_EQ(none.service().getHostTasks(), 7u);
}

// stats answers for sandboxes the caller may see, as listSandboxes does: not for one still
// being created, nor for another deployment's.
TEST_F(BrokerTest, StatsOfASandboxStillBeingCreatedIsNotFound) {
  helper_->hold = true;
  auto sup = Connect(owner_);
  auto req = sup.createSandboxRequest();
  req.initSpec().setDeploymentId("work");
  auto call = req.send();
  Until([&] { return broker_->registry().All().size() == 1; });
  std::string id = broker_->registry().All()[0]->id;
  auto stats_of = [&](const std::string& which) {
    auto stats = sup.statsRequest();
    stats.initIds(1).set(0, which);
    return stats;
  };
  auto error = kj::runCatchingExceptions([&] { stats_of(id).send().wait(ws()); });
  EXPECT_EQ(Description(error), absl::StrCat("not-found: no sandbox \"", id, "\""));
  EXPECT_EQ(sup.statsRequest().send().wait(ws()).getStats().size(), 0u);

  helper_->Release();
  call.wait(ws());
  auto answered = stats_of(id).send().wait(ws());
  ASSERT_EQ(answered.getStats().size(), 1u);
  EXPECT_EQ(answered.getStats()[0].getSandboxId().cStr(), id);
}

}  // namespace
}  // namespace paseo
