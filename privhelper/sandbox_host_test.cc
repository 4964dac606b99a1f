// SandboxHost without root and without runsc: a fake RunscRunner answers every call, a fake
// ProcessWatcher stands in for the sandboxes' sentries and gofers, the state dir and the cgroup
// root are temp dirs. Covers reconcile (adopt, destroy, collect, refuse to collect on a bad
// `runsc list`), the refusals of every request, the process life (start, signal, wait, oom,
// reattach, close input), a sandbox that stops by itself, and delete. Create is covered up to
// the first mount: the fixture's state dir contains ',', which MountRootfsOverlay refuses before
// mounting, so no test here mounts anything even when run as root; the mounts and a real
// runsc create/start are covered by the root suites under testing/.
#include "privhelper/sandbox_host.h"
#include "privhelper/network/sandbox_networks.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <kj/async.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/rpc_errors.h"
#include "common/search_path.h"
#include "gmock/gmock.h"
#include "privhelper/bundle.h"
#include "gtest/gtest.h"
#include "schema/records.capnp.h"

namespace paseo {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Answers Run from a table by subcommand (default: success, no output) and hands every Start
// back to the test, which decides when and how the started runsc ends.
class FakeRunsc final : public RunscRunner {
 public:
  struct Started {
    std::vector<std::string> args;
    RunscStdio stdio;
    kj::Own<kj::PromiseFulfiller<int>> exit;
  };

  kj::Promise<RunscResult> Run(std::vector<std::string> args,
                               RunscNetwork network = RunscNetwork::kNone,
                               InitStdio = {}) override {
    calls.push_back(args);
    networks.push_back(network);
    if (on_run) on_run(args);
    if (args.at(0) == hold) {
      // Answers once the test releases it, as it would answer now.
      auto held_promise = kj::newPromiseAndFulfiller<void>();
      held = std::make_shared<kj::Own<kj::PromiseFulfiller<void>>>(kj::mv(held_promise.fulfiller));
      RunscResult result;
      if (auto it = results.find(args.at(0)); it != results.end()) result = it->second;
      return held_promise.promise.then([result] { return result; });
    }
    auto it = results.find(args.at(0));
    return it == results.end() ? RunscResult{} : it->second;
  }

  absl::StatusOr<kj::Promise<int>> Start(std::vector<std::string> args,
                                         const RunscStdio& stdio) override {
    calls.push_back(args);
    if (!start_error.ok()) return start_error;
    auto exit = kj::newPromiseAndFulfiller<int>();
    started.push_back({args, stdio, kj::mv(exit.fulfiller)});
    return kj::mv(exit.promise);
  }
  std::vector<RunscNetwork> networks;  // of each Run, in order

  // The calls whose subcommand is `sub`.
  std::vector<std::vector<std::string>> CallsOf(const std::string& sub) const {
    std::vector<std::vector<std::string>> out;
    for (const auto& c : calls)
      if (c.at(0) == sub) out.push_back(c);
    return out;
  }

  std::map<std::string, RunscResult> results;
  // Runs of this subcommand wait until `held` is fulfilled.
  std::string hold;
  std::shared_ptr<kj::Own<kj::PromiseFulfiller<void>>> held;  // (a std type: no noexcept(false))
  // Called with each Run's args before it answers (what runsc would do to the sandbox).
  std::function<void(const std::vector<std::string>&)> on_run;
  absl::Status start_error = absl::OkStatus();
  std::vector<std::vector<std::string>> calls;
  std::vector<Started> started;
};

// Watches only the pids in `running`; the test decides when each exits and is reaped.
class FakeWatcher final : public ProcessWatcher {
 public:
  struct Host {
    Host() {
      auto exit = kj::newPromiseAndFulfiller<void>();
      exited = exit.promise.fork();
      exit_fulfiller = kj::mv(exit.fulfiller);
      auto reap = kj::newPromiseAndFulfiller<std::optional<int>>();
      reaped = reap.promise.fork();
      reap_fulfiller = kj::mv(reap.fulfiller);
    }
    kj::ForkedPromise<void> exited = nullptr;
    kj::Own<kj::PromiseFulfiller<void>> exit_fulfiller;
    kj::ForkedPromise<std::optional<int>> reaped = nullptr;
    kj::Own<kj::PromiseFulfiller<std::optional<int>>> reap_fulfiller;
  };
  class Watched final : public WatchedProcess {
   public:
    explicit Watched(std::shared_ptr<Host> host) : host_(std::move(host)) {}
    kj::Promise<void> Exited() override { return host_->exited.addBranch(); }
    kj::Promise<std::optional<int>> Status(kj::Duration) override {
      return host_->reaped.addBranch();
    }

   private:
    std::shared_ptr<Host> host_;
  };

  absl::StatusOr<kj::Own<WatchedProcess>> Watch(pid_t pid, const std::string& cgroup) override {
    watched.emplace_back(pid, cgroup);
    if (!running.count(pid)) return kj::Own<WatchedProcess>();
    auto& host = hosts[pid];
    if (!host) host = std::make_shared<Host>();
    return kj::Own<WatchedProcess>(kj::heap<Watched>(host));
  }

  // The process exits; its status is known once Reap is called.
  void Exit(pid_t pid) {
    running.erase(pid);
    if (hosts.count(pid)) hosts[pid]->exit_fulfiller->fulfill();
  }
  void Reap(pid_t pid, std::optional<int> status) {
    if (hosts.count(pid)) hosts[pid]->reap_fulfiller->fulfill(kj::mv(status));
  }

  std::set<pid_t> running;
  std::vector<std::pair<pid_t, std::string>> watched;  // every Watch call
  std::map<pid_t, std::shared_ptr<Host>> hosts;
};

RunscResult Failed(const std::string& stderr_text) {
  RunscResult r;
  r.wait_status = 1 << 8;  // exit status 1
  r.stderr_text = stderr_text;
  return r;
}

RunscResult Listed(const std::string& json) {
  RunscResult r;
  r.stdout_text = json;
  return r;
}

// Records every connect; a test that reaches it has passed every check of ConnectPort.
class FakePortConnector final : public PortConnector {
 public:
  kj::Promise<kj::AutoCloseFd> Connect(const std::string& netns_path, uint32_t addr,
                                       uint16_t port) override {
    calls.push_back(absl::StrCat(netns_path, " ", addr, " ", port));
    return kj::AutoCloseFd();
  }
  std::vector<std::string> calls;
};

class SandboxHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string tmpl = absl::StrCat(base != nullptr && *base ? base : "/tmp", "/host.XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    // ',' keeps MountRootfsOverlay from ever mounting (see the file comment).
    state_ = dir_ + "/state,unmountable";
    cgroups_ = dir_ + "/cgroup";
    fs::create_directories(state_ + "/bundles");
    fs::create_directories(state_ + "/rootfs/v1/rootfs/var");
    fs::create_symlink("/tmp", state_ + "/rootfs/v1/rootfs/var/run");
    fs::create_directories(cgroups_ + "/memory");
    fs::create_directories(dir_ + "/ws/project");
    fs::permissions(dir_ + "/ws", fs::perms::owner_all);  // 0700: the test user's alone
    Write("etc/helper.json", absl::StrCat(R"({"runsc": {"sha256": ")", std::string(64, 'a'),
                                          R"("}, "rootfsVersion": "v1", "stateDir": ")", state_,
                                          R"(", "runDir": ")", dir_, R"(/run"})"));
    Write("etc/profiles/default.json", R"({"name": "default"})");
    Write("etc/profiles/missing.json", R"({"name": "missing", "rootfsVersion": "v2"})");
    Write("etc/profiles/networked.json",
          R"({"name": "networked", "network": {"mode": "sandbox", "inboundPorts": [8080]}})");
    Write("etc/profiles/tooled.json",
          R"({"name": "tooled", "tools": [{"name": "helper", "destination": "/opt/paseo/bin"},
                                          {"name": "node", "destination": "/opt/node/bin"}]})");
    fs::create_directories(dir_ + "/tools/helper");
    fs::create_directories(dir_ + "/ws/node/bin");
    Write("etc/deployments/alpha.json",
          absl::StrCat(R"({"id": "alpha", "allowedUids": [1000], "maxSandboxes": 2,
                          "profiles": ["default", "missing", "tooled", "networked"],
                          "toolRoots": [{"name": "helper", "hostPath": ")", dir_, R"(/tools/helper"},
                                        {"name": "node", "clientPath": ")", dir_, R"(/ws/node/bin"}],
                          "workspaceRoots": [{"hostPath": ")",
                       dir_, R"(/ws"}], "runAs": {"uid": 1000, "gid": 1000}})"));
    // No runAs, and a root everyone sees owned by root: agents would run as uid 0.
    Write("etc/deployments/rooted.json",
          R"({"id": "rooted", "allowedUids": [1000], "workspaceRoots": [{"hostPath": "/usr"}]})");
    auto config = LoadConfig(dir_ + "/etc");
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = std::move(*config);
    // Every sandbox's sentry and gofer are these pids and run, unless a test says otherwise.
    watcher_.running = {kSentry, kGofer};
    // As runsc does: SIGKILL to a sandbox's init ends its pid namespace, and its sentry exits.
    runsc_.on_run = [this](const std::vector<std::string>& args) {
      if (args.size() == 3 && args[0] == "kill" && args[2] == "KILL" && kill_ends_sentry_)
        watcher_.Exit(kSentry);
    };
    host_ = std::make_unique<SandboxHost>(*config_, runsc_, watcher_, timer_, "/shim", cgroups_,
                                          &ports_);
  }

  static constexpr pid_t kSentry = 100, kGofer = 101;
  bool kill_ends_sentry_ = true;

  std::string RunscStateFile(const std::string& id) const {
    return absl::StrCat(dir_, "/run/runsc/", id, "_sandbox:", id, ".state");
  }
  // runsc's own state file for `id`, which names the sentry and the gofer.
  void WriteRunscStateFile(const std::string& id, pid_t sentry = kSentry, pid_t gofer = kGofer) {
    Write(absl::StrCat("run/runsc/", id, "_sandbox:", id, ".state"),
          absl::StrCat(R"({"id": ")", id, R"(", "status": "running", "goferPid": )", gofer,
                       R"(, "sandbox": {"id": ")", id, R"(", "pid": )", sentry, "}}"));
  }

  // The stop a WaitStopped promise resolved to, or its error.
  absl::StatusOr<SandboxHost::Stop> Stopped(kj::Promise<SandboxHost::Stop>& waiting) {
    ws_.poll();
    if (!waiting.poll(ws_)) return absl::DeadlineExceededError("not stopped");
    absl::StatusOr<SandboxHost::Stop> out = absl::UnknownError("");
    auto error = kj::runCatchingExceptions([&] { out = waiting.wait(ws_); });
    KJ_IF_MAYBE(e, error) { return StatusFromException(*e); }
    return out;
  }

  void TearDown() override {
    host_ = nullptr;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  void Write(const std::string& rel, const std::string& text) {
    std::string path = dir_ + "/" + rel;
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
  }

  std::string Bundle(const std::string& id) const { return state_ + "/bundles/" + id; }

  // A bundle a previous privhelper left, with its record.
  void LeaveBundle(const std::string& id, const std::string& deployment = "alpha",
                   uint32_t uid = 1000, const std::string& profile = "default",
                   const std::string& default_cwd = "/workspace", bool deleting = false) {
    fs::create_directories(Bundle(id) + "/mounts");
    capnp::MallocMessageBuilder message;
    auto record = message.initRoot<records::SandboxRecord>();
    record.setId(id);
    record.setDeploymentId(deployment);
    record.setProfile(profile);
    record.setUid(uid);
    record.setGid(1000);
    record.setDefaultCwd(default_cwd);
    record.setCreatedAtUnixMs(1234);
    record.setDeleting(deleting);
    capnp::JsonCodec codec;
    std::ofstream(Bundle(id) + "/sandbox.json") << codec.encode(record.asReader()).cStr();
    std::ofstream(Bundle(id) + "/config.json") << "{}";
  }

  // Runs the loop until `promise` settles; its error as a Status.
  absl::Status Await(kj::Promise<void> promise) {
    absl::Status status = absl::OkStatus();
    promise.catch_([&](kj::Exception&& e) { status = StatusFromException(e); }).wait(ws_);
    ws_.poll();  // and whatever it queued (background teardowns)
    return status;
  }
  absl::Status Await(absl::StatusOr<kj::Promise<void>> promise) {
    if (!promise.ok()) return promise.status();
    return Await(std::move(*promise));
  }

  absl::Status Reconcile(config::RestartPolicy policy) { return Await(host_->Reconcile(policy)); }

  // A running sandbox `id`, adopted from a previous privhelper (with runsc's state file for
  // it, unless the test wrote its own).
  void Adopt(const std::string& id, const std::string& profile = "default",
             const std::string& default_cwd = "/workspace") {
    LeaveBundle(id, "alpha", 1000, profile, default_cwd);
    if (!fs::exists(RunscStateFile(id))) WriteRunscStateFile(id);
    runsc_.results["list"] =
        Listed(absl::StrCat(R"([{"id": ")", id, R"(", "status": "running"}])"));
    ASSERT_TRUE(Reconcile(config::RestartPolicy::KEEP).ok());
    runsc_.results.erase("list");
    runsc_.calls.clear();
  }

  // Destroy's footprint: the container killed and deleted, the bundle and the record gone.
  void ExpectDestroyed(const std::string& id) {
    EXPECT_EQ(runsc_.CallsOf("kill"),
              (std::vector<std::vector<std::string>>{{"kill", id, "KILL"}}));
    EXPECT_EQ(runsc_.CallsOf("delete"),
              (std::vector<std::vector<std::string>>{{"delete", "--force", id}}));
    EXPECT_FALSE(fs::exists(Bundle(id)));
    EXPECT_EQ(host_->size(), 0u);
  }

  // What the sandbox's record on disk says of a delete.
  bool RecordSaysDeleting(const std::string& id) const {
    std::ifstream record(Bundle(id) + "/sandbox.json");
    std::stringstream text;
    text << record.rdbuf();
    return absl::StrContains(text.str(), "\"deleting\":true");
  }

  // Lets every teardown retry run out: the timer moves on until nothing waits on it.
  void RunOutTeardownRetries() {
    for (int i = 0; i < 4 * SandboxHost::kTeardownTries; ++i) {
      ws_.poll();
      timer_.advanceTo(timer_.now() + 10 * kj::SECONDS);
    }
    ws_.poll();
  }

  struct Inventory {
    std::map<std::string, bool> unattached, oom_killed, stopped, paused;
    std::map<std::string, std::string> stop_reason;
    std::map<std::string, bool> tty;  // by process id
  };
  Inventory Listing() {
    capnp::MallocMessageBuilder m;
    auto out = m.initRoot<helper::Helper::InventoryResults>();
    host_->Inventory(ValidatedInventory{}, out);
    Inventory inv;
    for (auto s : out.getSandboxes()) {
      inv.unattached[s.getSandboxId().cStr()] = s.getUnattached();
      inv.oom_killed[s.getSandboxId().cStr()] = s.getOomKilled();
      inv.stopped[s.getSandboxId().cStr()] = s.getStopped();
      inv.paused[s.getSandboxId().cStr()] = s.getPaused();
      inv.stop_reason[s.getSandboxId().cStr()] = s.getStopReason().cStr();
    }
    for (auto p : out.getProcesses()) inv.tty[p.getProcessId().cStr()] = p.getTty();
    return inv;
  }

  ValidatedStart Start(const std::string& sandbox, const std::string& process, bool tty = false) {
    ValidatedStart s;
    s.process = {sandbox, process};
    s.command.argv = {"/bin/sh", "-c", "exit 3"};
    s.command.tty = tty;
    s.command.rows = tty ? 24 : 0;
    s.command.cols = tty ? 80 : 0;
    return s;
  }

  // The started `runsc exec` ends: it logged `logged` (a wait status) and exited `status`.
  void EndExec(size_t index, int status, std::optional<int> logged) {
    auto& started = runsc_.started.at(index);
    if (logged) {
      std::string line = absl::StrCat("I1 2 3 main.go:266] Exiting with status: ", *logged, "\n");
      ASSERT_EQ(write(started.stdio.log_fd, line.data(), line.size()),
                static_cast<ssize_t>(line.size()));
    }
    started.exit->fulfill(kj::mv(status));
    ws_.poll();
  }

  // Writes the pid file `runsc exec` would write for the started process.
  void WritePid(size_t index, int pid) {
    const auto& args = runsc_.started.at(index).args;
    auto at = std::find(args.begin(), args.end(), "--internal-pid-file");
    ASSERT_NE(at, args.end());
    std::ofstream(*(at + 1)) << pid << "\n";
  }

  ValidatedCreate Create(const std::string& id, const std::string& destination = "/workspace",
                         const std::string& deployment = "alpha",
                         const std::string& profile = "default") {
    ValidatedCreate c;
    c.sandbox_id = id;
    c.deployment = config_->FindDeployment(deployment);
    c.profile = config_->FindProfile(profile);
    std::string root = deployment == "alpha" ? dir_ + "/ws" : "/usr";
    // Read-write on the test user's own directory; read-only on /usr/share, which the test user
    // can read but not write.
    c.mounts.push_back({root + (deployment == "alpha" ? "/project" : "/share"), destination,
                        deployment != "alpha"});
    c.peer = PeerIdentity{getuid(), {getgid()}};
    return c;
  }

  // Behind a pointer: kj's destructors may throw, gtest's fixture destructor may not.
  struct Loop {
    kj::EventLoop loop;
    kj::WaitScope scope{loop};
    kj::TimerImpl timer{kj::origin<kj::TimePoint>()};  // advanced by hand
  };
  std::unique_ptr<Loop> loop_ = std::make_unique<Loop>();
  kj::WaitScope& ws_ = loop_->scope;
  kj::TimerImpl& timer_ = loop_->timer;
  FakeRunsc runsc_;
  FakeWatcher watcher_;
  std::string dir_, state_, cgroups_;
  std::unique_ptr<Config> config_;
  FakePortConnector ports_;
  std::unique_ptr<SandboxHost> host_;
};

// ---------------------------------------------------------------- reconcile

TEST_F(SandboxHostTest, ReconcileWithNoContainersCollectsStaleBundlesAndCgroups) {
  for (const char* none : {"null", "", "[]", " \n"}) {
    SCOPED_TRACE(none);
    LeaveBundle("sb-stale");
    fs::create_directories(Bundle("sb-stale") + "/upper/etc");
    fs::create_directories(cgroups_ + "/paseo-sandbox/sb-stale");          // cgroup v2
    fs::create_directories(cgroups_ + "/memory/paseo-sandbox/sb-stale");   // v1 hierarchy
    fs::create_directories(cgroups_ + "/paseo-sandbox/Not-An-Id");
    runsc_.results["list"] = Listed(none);
    ASSERT_TRUE(Reconcile(config::RestartPolicy::KEEP).ok());
    EXPECT_FALSE(fs::exists(Bundle("sb-stale")));
    EXPECT_FALSE(fs::exists(cgroups_ + "/paseo-sandbox/sb-stale"));
    EXPECT_FALSE(fs::exists(cgroups_ + "/memory/paseo-sandbox/sb-stale"));
    // Only what could be a sandbox's cgroup is touched.
    EXPECT_TRUE(fs::exists(cgroups_ + "/paseo-sandbox/Not-An-Id"));
    EXPECT_EQ(host_->size(), 0u);
    EXPECT_EQ(runsc_.calls, (std::vector<std::vector<std::string>>{{"list", "--format=json"}}));
    runsc_.calls.clear();
  }
}

TEST_F(SandboxHostTest, ReconcileCollectsNothingWithoutATrustworthyList) {
  LeaveBundle("sb-maybe-live");
  fs::create_directories(cgroups_ + "/paseo-sandbox/sb-maybe-live");
  const std::vector<std::pair<const char*, RunscResult>> cases = {
      {"garbage", Listed("runsc: something odd happened")},
      {"truncated", Listed(R"([{"id": "sb-maybe-live", "status": "runn)")},
      {"an object, not a list", Listed(R"({"id": "sb-maybe-live"})")},
      {"a number", Listed("42")},
      {"runsc list failed", Failed("cannot read root dir")},
  };
  for (const auto& [name, result] : cases) {
    runsc_.results["list"] = result;
    absl::Status st = Reconcile(config::RestartPolicy::KILL);
    EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << name << ": " << st;
    EXPECT_TRUE(fs::exists(Bundle("sb-maybe-live") + "/sandbox.json")) << name;
    EXPECT_TRUE(fs::exists(cgroups_ + "/paseo-sandbox/sb-maybe-live")) << name;
  }
  EXPECT_EQ(host_->size(), 0u);
  EXPECT_TRUE(runsc_.CallsOf("kill").empty());
}

TEST_F(SandboxHostTest, KeepAdoptsARunningSandboxWithAReadableRecord) {
  Adopt("sb-kept");
  EXPECT_EQ(host_->size(), 1u);
  EXPECT_TRUE(fs::exists(Bundle("sb-kept") + "/sandbox.json"));
  Inventory inv = Listing();
  ASSERT_EQ(inv.unattached.count("sb-kept"), 1u);
  EXPECT_TRUE(inv.unattached["sb-kept"]);
  EXPECT_FALSE(inv.oom_killed["sb-kept"]);
}

TEST_F(SandboxHostTest, KillDestroysWhatAPreviousPrivhelperLeftRunning) {
  LeaveBundle("sb-left");
  runsc_.results["list"] = Listed(R"([{"id": "sb-left", "status": "running"}])");
  ASSERT_TRUE(Reconcile(config::RestartPolicy::KILL).ok());
  ExpectDestroyed("sb-left");
}

TEST_F(SandboxHostTest, KeepFinishesADeleteAPreviousPrivhelperHadBegun) {
  LeaveBundle("sb-left", "alpha", 1000, "default", "/workspace", /*deleting=*/true);
  runsc_.results["list"] = Listed(R"([{"id": "sb-left", "status": "running"}])");
  ASSERT_TRUE(Reconcile(config::RestartPolicy::KEEP).ok());
  ExpectDestroyed("sb-left");
}

TEST_F(SandboxHostTest, KeepStillDestroysWhatItCannotVouchFor) {
  LeaveBundle("sb-stopped", "gamma");
  LeaveBundle("sb-gone-deployment", "gamma");
  LeaveBundle("sb-as-root", "alpha", /*uid=*/0);
  LeaveBundle("sb-unreadable");
  std::ofstream(Bundle("sb-unreadable") + "/sandbox.json", std::ios::trunc) << "{not json";
  runsc_.results["list"] = Listed(R"([
      {"id": "sb-stopped", "status": "stopped"},
      {"id": "sb-gone-deployment", "status": "running"},
      {"id": "sb-as-root", "status": "running"},
      {"id": "sb-unreadable", "status": "running"},
      {"id": "sb-no-bundle", "status": "running"}])");
  ASSERT_TRUE(Reconcile(config::RestartPolicy::KEEP).ok());
  EXPECT_EQ(runsc_.CallsOf("delete").size(), 5u);
  EXPECT_EQ(host_->size(), 0u);
  EXPECT_TRUE(fs::is_empty(state_ + "/bundles"));
}

TEST_F(SandboxHostTest, ReconcileIgnoresContainersWhoseIdCouldNotBeOurs) {
  runsc_.results["list"] =
      Listed(R"([{"id": "../../etc", "status": "running"}, {"id": "SB", "status": "running"},
                 {"status": "running"}, 7])");
  ASSERT_TRUE(Reconcile(config::RestartPolicy::KILL).ok());
  EXPECT_EQ(host_->size(), 0u);
  EXPECT_EQ(runsc_.calls.size(), 1u);  // only the list
}

// ---------------------------------------------------------------- tools and working directories

// What `runsc exec` was given for process `id` of sandbox `sb`: its env and cwd.
struct ExecFields {
  std::vector<std::string> env;
  std::string cwd;
  std::vector<std::string> args;
};
ExecFields ReadProcessJson(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  capnp::MallocMessageBuilder m;
  auto root = m.initRoot<capnp::JsonValue>();
  capnp::JsonCodec().decodeRaw(kj::ArrayPtr<const char>(text.data(), text.size()), root);
  ExecFields out;
  for (auto field : root.asReader().getObject()) {
    if (field.getName() == "cwd") out.cwd = field.getValue().getString().cStr();
    if (field.getName() == "args") {
      for (auto e : field.getValue().getArray()) out.args.emplace_back(e.getString().cStr());
    }
    if (field.getName() == "env") {
      for (auto e : field.getValue().getArray()) out.env.emplace_back(e.getString().cStr());
    }
  }
  return out;
}

std::vector<std::string> PathsOf(const std::vector<std::string>& env) {
  std::vector<std::string> paths;
  for (const auto& e : env)
    if (e.rfind("PATH=", 0) == 0) paths.push_back(e);
  return paths;
}

TEST_F(SandboxHostTest, AProfilesToolsGoInFrontOfPathForPipesAndTerminals) {
  Adopt("sb-1", "tooled");
  // No PATH from the client: the tools, then the default PATH.
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  auto plain = ReadProcessJson(Bundle("sb-1") + "/process-p-1.json");
  ASSERT_EQ(PathsOf(plain.env).size(), 1u);
  EXPECT_EQ(PathsOf(plain.env)[0],
            "PATH=/opt/paseo/bin:/opt/node/bin:" + ProcessEnv({})[0].substr(5));
  // The client's PATH, on a terminal: the tools, then the client's.
  ValidatedStart tty = Start("sb-1", "p-2", /*tty=*/true);
  tty.command.env = {"PATH=/usr/bin:/bin", "HOME=/h"};
  ASSERT_TRUE(host_->StartProcess(tty).ok());
  auto on_tty = ReadProcessJson(Bundle("sb-1") + "/process-p-2.json");
  EXPECT_EQ(PathsOf(on_tty.env),
            std::vector<std::string>{"PATH=/opt/paseo/bin:/opt/node/bin:/usr/bin:/bin"});
  // A profile without tools leaves PATH alone.
  Adopt("sb-2");
  ValidatedStart bare = Start("sb-2", "p-1");
  bare.command.env = {"PATH=/usr/bin"};
  ASSERT_TRUE(host_->StartProcess(bare).ok());
  EXPECT_EQ(PathsOf(ReadProcessJson(Bundle("sb-2") + "/process-p-1.json").env),
            std::vector<std::string>{"PATH=/usr/bin"});
}

// Issue 26: an exact environment (Paseo's runtime) stays exactly the client's with tools in the
// profile: the tools are found by the shim's lookup, not by a PATH the program would see.
TEST_F(SandboxHostTest, AnExactEnvironmentKeepsItsPathAndFindsToolsThroughTheShim) {
  Adopt("sb-1", "tooled");
  ValidatedStart exact = Start("sb-1", "p-1");
  exact.command.exact_env = true;
  exact.command.argv = {"paseo-workspace-helper", "describe"};
  exact.command.env = {"PATH=/usr/bin:/bin", "HOME=/h", "A=1"};
  ASSERT_TRUE(host_->StartProcess(exact).ok());
  auto with_path = ReadProcessJson(Bundle("sb-1") + "/process-p-1.json");
  // The client's env, then what the shim reads and removes before the program starts.
  std::vector<std::string> want = exact.command.env;
  want.push_back("PASEO_SHIM_SEARCH_PATH=/opt/paseo/bin:/opt/node/bin:/usr/bin:/bin");
  want.push_back("PASEO_SHIM_REPORT_UNKEPT=0");
  EXPECT_EQ(with_path.env, want);
  EXPECT_EQ(with_path.args, (std::vector<std::string>{"/.paseo/shim", "exec", "--",
                                                      "paseo-workspace-helper", "describe"}));
  // The daemon's helper exec: an empty env. Nothing is added; the default PATH is searched.
  ValidatedStart empty = Start("sb-1", "p-2");
  empty.command.exact_env = true;
  empty.command.argv = {"paseo-workspace-helper", "describe"};
  empty.command.env = {};
  ASSERT_TRUE(host_->StartProcess(empty).ok());
  auto bare = ReadProcessJson(Bundle("sb-1") + "/process-p-2.json");
  EXPECT_EQ(bare.env, (std::vector<std::string>{
                          std::string("PASEO_SHIM_SEARCH_PATH=/opt/paseo/bin:/opt/node/bin:") +
                              kDefaultSearchPath,
                          "PASEO_SHIM_REPORT_UNKEPT=0"}));
  EXPECT_EQ(bare.args, (std::vector<std::string>{"/.paseo/shim", "exec", "--unset=HOME",
                                                 "--unset=PATH", "--", "paseo-workspace-helper",
                                                 "describe"}));
}

// The first workspace's staged dir (<bundle>/mounts/0) as tools_test builds it inside a real
// sandbox: sub/deeper, a file, and symlinks that stay in or lead out.
void LayOutWorkspace(const std::string& ws) {
  fs::create_directories(ws + "/sub/deeper");
  std::ofstream(ws + "/file") << "x";
  fs::create_directory_symlink("sub", ws + "/link");
  fs::create_directory_symlink("../sub", ws + "/sub/up");
  fs::create_directory_symlink("/etc", ws + "/esc");
  fs::create_directory_symlink("../../..", ws + "/esc2");
  fs::create_directory_symlink("chain2", ws + "/chain1");
  fs::create_directory_symlink("esc", ws + "/chain2");
  fs::create_directory_symlink("/workspace/sub", ws + "/absolute-inside");
  fs::create_symlink("file", ws + "/file-link");
}

TEST_F(SandboxHostTest, AWorkspaceCwdRunsThereIfItStaysInsideTheFirstWorkspace) {
  Adopt("sb-1");
  LayOutWorkspace(Bundle("sb-1") + "/mounts/0");
  const std::vector<std::pair<std::string, std::string>> accepted = {
      {"", "/workspace"},  // "." normalized by CheckWorkspaceCwd
      {"sub", "/workspace/sub"},
      {"sub/deeper", "/workspace/sub/deeper"},
      {"link", "/workspace/link"},  // a relative symlink inside: followed the same way inside
      {"sub/up/deeper", "/workspace/sub/up/deeper"},
      {"sub/..", "/workspace/sub/.."},
  };
  int n = 0;
  for (const auto& [relative, cwd] : accepted) {
    std::string id = absl::StrCat("p-", n++);
    ValidatedStart start = Start("sb-1", id);
    start.command.workspace_cwd = relative;
    auto stdio = host_->StartProcess(start);
    ASSERT_TRUE(stdio.ok()) << relative << ": " << stdio.status();
    EXPECT_EQ(ReadProcessJson(Bundle("sb-1") + "/process-" + id + ".json").cwd, cwd) << relative;
  }
}

TEST_F(SandboxHostTest, AWorkspaceCwdThatLeavesTheWorkspaceOrIsNoDirectoryStartsNothing) {
  Adopt("sb-1");
  LayOutWorkspace(Bundle("sb-1") + "/mounts/0");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"esc", "leaves the workspace"},             // an absolute target
      {"absolute-inside", "leaves the workspace"}, // absolute, even if it would land inside
      {"esc2", "leaves the workspace"},            // a relative one leading out
      {"esc2/etc", "leaves the workspace"},
      {"chain1", "leaves the workspace"},          // a chain ending outside
      {"sub/../..", "leaves the workspace"},       // (CheckWorkspaceCwd refuses it earlier too)
      {"link/../..", "leaves the workspace"},
      {"file", "not a directory"},
      {"file-link", "not a directory"},
      {"missing", "does not exist"},
      {"sub/missing", "does not exist"},
  };
  int n = 0;
  for (const auto& [relative, why] : refused) {
    ValidatedStart start = Start("sb-1", absl::StrCat("p-", n++));
    start.command.workspace_cwd = relative;
    auto stdio = host_->StartProcess(start);
    ASSERT_FALSE(stdio.ok()) << relative;
    EXPECT_EQ(stdio.status().code(), absl::StatusCode::kInvalidArgument) << stdio.status();
    EXPECT_THAT(std::string(stdio.status().message()), HasSubstr(why)) << relative;
    EXPECT_THAT(std::string(stdio.status().message()), HasSubstr("workspaceCwd")) << relative;
  }
  EXPECT_TRUE(runsc_.started.empty());
  EXPECT_TRUE(Listing().tty.empty());
  EXPECT_FALSE(fs::exists(Bundle("sb-1") + "/process-p-0.json"));

  // A sandbox without workspaces has nowhere for it.
  Adopt("sb-2", "default", "/");
  ValidatedStart start = Start("sb-2", "p-1");
  start.command.workspace_cwd = "";
  auto stdio = host_->StartProcess(start);
  EXPECT_EQ(stdio.status().code(), absl::StatusCode::kInvalidArgument) << stdio.status();
  EXPECT_THAT(std::string(stdio.status().message()), HasSubstr("no workspace"));
  EXPECT_TRUE(runsc_.started.empty());
}

// A create resolves every tool root before it writes anything; one that is not as registered
// refuses the create and leaves nothing.
TEST_F(SandboxHostTest, ToolRootsAreResolvedAtCreateAndABadOneRefusesIt) {
  fs::create_directory_symlink(dir_ + "/tools/helper", dir_ + "/tools/link");
  fs::create_directory_symlink("/etc", dir_ + "/ws/esc");
  fs::create_directories(dir_ + "/ws/bin-real");
  fs::create_directory_symlink("bin-real", dir_ + "/ws/bin-link");
  struct Case {
    const char* name;
    std::string host_path, client_path, destination;
    absl::StatusCode code;
    const char* message_part;
  };
  const std::vector<Case> cases = {
      {"a host path that is a symlink", dir_ + "/tools/link", "", "/opt/t",
       absl::StatusCode::kFailedPrecondition, "cannot be opened safely"},
      {"a host path that does not exist", dir_ + "/tools/none", "", "/opt/t",
       absl::StatusCode::kFailedPrecondition, "cannot be opened safely"},
      {"a client path through a symlink leading out", "", dir_ + "/ws/esc", "/opt/t",
       absl::StatusCode::kFailedPrecondition, "symlink"},
      {"a client path through a symlink staying inside", "", dir_ + "/ws/bin-link", "/opt/t",
       absl::StatusCode::kFailedPrecondition, "symlink"},
      {"a client path beneath no workspace root", "", "/etc", "/opt/t",
       absl::StatusCode::kFailedPrecondition, "not beneath any workspace root"},
      {"a destination through a rootfs symlink", dir_ + "/tools/helper", "", "/var/run/t",
       absl::StatusCode::kInvalidArgument, "symlink"},
  };
  for (const auto& c : cases) {
    capnp::MallocMessageBuilder m;
    auto root = m.initRoot<config::ToolRoot>();
    root.setName("t");
    root.setHostPath(c.host_path);
    root.setClientPath(c.client_path);
    ValidatedCreate request = Create("sb-2", "/workspace", "alpha", "tooled");
    request.tools = {{"t", root.asReader(), c.destination}};
    auto created = host_->Create(std::move(request));
    ASSERT_FALSE(created.ok()) << c.name;
    EXPECT_EQ(created.status().code(), c.code) << c.name << ": " << created.status();
    EXPECT_THAT(std::string(created.status().message()), HasSubstr(c.message_part))
        << c.name << ": " << created.status();
    EXPECT_FALSE(fs::exists(Bundle("sb-2"))) << c.name;
    EXPECT_EQ(host_->size(), 0u);
  }
  // The registered ones resolve: the create gets as far as the first mount (which the fixture's
  // state dir refuses; see the file comment).
  ValidatedCreate good = Create("sb-2", "/workspace", "alpha", "tooled");
  const auto& roots = config_->FindDeployment("alpha")->getToolRoots();
  good.tools = {{"helper", roots[0], "/opt/paseo/bin"}, {"node", roots[1], "/opt/node/bin"}};
  auto created = host_->Create(std::move(good));
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("rootfs path may not contain"));
  EXPECT_TRUE(runsc_.calls.empty());
}

// ---------------------------------------------------------------- refusals

TEST_F(SandboxHostTest, RequestsNamingNothingAreNotFound) {
  Adopt("sb-1");
  ValidatedProcessRef no_sandbox = {"sb-none", "p-1"};
  ValidatedProcessRef no_process = {"sb-1", "p-none"};
  for (const auto& ref : {no_sandbox, no_process}) {
    SCOPED_TRACE(ref.sandbox_id);
    EXPECT_EQ(host_->Wait(ref).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(host_->Signal({ref, 15}).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(host_->Reattach({ref, 0, 0}).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(host_->CloseInput(ref).code(), absl::StatusCode::kNotFound);
  }
  EXPECT_THAT(std::string(host_->Wait(no_process).status().message()), HasSubstr("no process"));
  EXPECT_EQ(host_->StartProcess(Start("sb-none", "p-1")).status().code(),
            absl::StatusCode::kNotFound);
  auto deleted = host_->Delete({"sb-none"});
  EXPECT_EQ(deleted.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(deleted.status().message()), HasSubstr("no sandbox sb-none"));
  EXPECT_TRUE(runsc_.calls.empty());
}

// ---------------------------------------------------------------- processes

TEST_F(SandboxHostTest, AProcessRunsIsSignalledAndEnds) {
  Adopt("sb-1");
  auto stdio = host_->StartProcess(Start("sb-1", "p-1"));
  ASSERT_TRUE(stdio.ok()) << stdio.status();
  ASSERT_EQ(runsc_.started.size(), 1u);
  const auto& exec = runsc_.started[0];
  EXPECT_EQ(exec.args, (std::vector<std::string>{
                           "exec", "--process", Bundle("sb-1") + "/process-p-1.json",
                           "--internal-pid-file", Bundle("sb-1") + "/process-p-1.pid", "sb-1"}));
  EXPECT_GE(exec.stdio.log_fd, 0);
  std::ifstream process_json(Bundle("sb-1") + "/process-p-1.json");
  std::string spec((std::istreambuf_iterator<char>(process_json)), {});
  EXPECT_THAT(spec, HasSubstr("exit 3"));
  EXPECT_THAT(spec, HasSubstr("/workspace"));  // the adopted record's default cwd
  EXPECT_EQ(host_->StartProcess(Start("sb-1", "p-1")).status().code(),
            absl::StatusCode::kAlreadyExists);

  // Before runsc wrote the pid, a signal waits for it (startProcess answers as soon as runsc
  // runs, and a client may signal at once): it is sent once the pid is there.
  auto early = host_->Signal({{"sb-1", "p-1"}, 15});
  ASSERT_TRUE(early.ok()) << early.status();
  auto early_sent = early->then([] { return absl::OkStatus(); },
                                [](kj::Exception&& e) { return StatusFromException(e); })
                        .eagerlyEvaluate(nullptr);
  timer_.advanceTo(timer_.now() + 3 * SandboxHost::kPidPoll);
  ws_.poll();
  EXPECT_TRUE(runsc_.CallsOf("kill").empty()) << "no pid yet, no kill";
  WritePid(0, 42);
  timer_.advanceTo(timer_.now() + SandboxHost::kPidPoll);
  ASSERT_TRUE(early_sent.wait(ws_).ok());
  EXPECT_EQ(runsc_.CallsOf("kill"),
            (std::vector<std::vector<std::string>>{{"kill", "--pid=42", "sb-1", "15"}}));
  runsc_.results["kill"] = Failed("no such process");
  EXPECT_EQ(Await(host_->Signal({{"sb-1", "p-1"}, 9})).code(),
            absl::StatusCode::kFailedPrecondition);

  auto waited = host_->Wait({"sb-1", "p-1"});
  ASSERT_TRUE(waited.ok());
  EndExec(0, 3 << 8, 3 << 8);  // exit 3, as runsc logged it
  ProcessExit end = waited->wait(ws_);
  EXPECT_EQ(end, ProcessExit::Exited(3));
  // After the exit, a signal could reach a recycled pid: refused.
  EXPECT_EQ(host_->Signal({{"sb-1", "p-1"}, 15}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The record stays for a late wait and for a restarted broker's inventory.
  EXPECT_EQ(host_->Wait({"sb-1", "p-1"})->wait(ws_), ProcessExit::Exited(3));
  EXPECT_EQ(Listing().tty.count("p-1"), 1u);
}

TEST_F(SandboxHostTest, ASignalWaitingForAPidEndsWithTheProcessOrAtItsPatience) {
  Adopt("sb-1");
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-2")).ok());
  auto outcome = [](absl::StatusOr<kj::Promise<void>> signal) {
    return kj::mv(*signal)
        .then([] { return absl::OkStatus(); },
              [](kj::Exception&& e) { return StatusFromException(e); })
        .eagerlyEvaluate(nullptr);
  };
  // p-1 never writes its pid: unavailable once the patience is over, and no kill.
  auto never = outcome(host_->Signal({{"sb-1", "p-1"}, 15}));
  // p-2 ends before its pid is read: failed-precondition (nothing to signal any more).
  auto ended = outcome(host_->Signal({{"sb-1", "p-2"}, 15}));
  EndExec(1, 0, 0);
  timer_.advanceTo(timer_.now() + SandboxHost::kPidPoll);
  EXPECT_EQ(ended.wait(ws_).code(), absl::StatusCode::kFailedPrecondition);
  for (int i = 0; i < 3; ++i) {
    timer_.advanceTo(timer_.now() + SandboxHost::kPidPatience / 2);
    ws_.poll();
  }
  EXPECT_EQ(never.wait(ws_).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(runsc_.CallsOf("kill").empty());
}

TEST_F(SandboxHostTest, ReleasingAnEndedProcessFreesItsFilesAndRecord) {
  Adopt("sb-1");
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  WritePid(0, 42);
  const std::string json = Bundle("sb-1") + "/process-p-1.json";
  const std::string pid = Bundle("sb-1") + "/process-p-1.pid";
  struct stat st;
  ASSERT_EQ(stat(json.c_str(), &st), 0);
  EXPECT_EQ(host_->ReleaseProcess({"sb-1", "p-1"}).code(), absl::StatusCode::kFailedPrecondition)
      << "a running process is not released";
  EXPECT_EQ(stat(pid.c_str(), &st), 0);

  EndExec(0, 0, 0);
  ASSERT_TRUE(host_->ReleaseProcess({"sb-1", "p-1"}).ok());
  EXPECT_NE(stat(json.c_str(), &st), 0);
  EXPECT_NE(stat(pid.c_str(), &st), 0);
  EXPECT_EQ(Listing().tty.count("p-1"), 0u) << "gone from the inventory";
  EXPECT_EQ(host_->Wait({"sb-1", "p-1"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(host_->Reattach({{"sb-1", "p-1"}}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(host_->ReleaseProcess({"sb-1", "p-1"}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(host_->ReleaseProcess({"sb-none", "p-1"}).code(), absl::StatusCode::kNotFound);
  // The id is free again in the privhelper (the broker never reuses one), and delete still
  // removes the bundle without tripping over the released files.
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  ASSERT_TRUE(Await(host_->Delete({"sb-1"})).ok());
}

TEST_F(SandboxHostTest, TheProcessCapCountsOnlyRunningProcesses) {
  Adopt("sb-1");
  host_->SetMaxProcessesPerSandbox(2);
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-2")).ok());
  EXPECT_EQ(host_->StartProcess(Start("sb-1", "p-3")).status().code(),
            absl::StatusCode::kResourceExhausted);
  EndExec(0, 0, 0);
  EXPECT_TRUE(host_->StartProcess(Start("sb-1", "p-3")).ok()) << "p-1 ended: it counts no more";
  EXPECT_EQ(host_->StartProcess(Start("sb-1", "p-4")).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(SandboxHostTest, KeptStdioIsHandedToARestartedBroker) {
  Adopt("sb-1");
  auto stdio = host_->StartProcess(Start("sb-1", "p-1", /*tty=*/true));
  ASSERT_TRUE(stdio.ok()) << stdio.status();
  // A tty process has one output stream: runsc's stderr is its stdout.
  EXPECT_EQ(runsc_.started[0].stdio.stderr_fd, runsc_.started[0].stdio.stdout_fd);
  EXPECT_TRUE(Listing().tty["p-1"]);

  auto reattached = host_->Reattach({{"sb-1", "p-1"}, 5, 7});
  ASSERT_TRUE(reattached.ok()) << reattached.status();
  SandboxHost::Reattached got = reattached->wait(ws_);
  // Kept copies go on where the pipes are: the starts are the offsets the broker said.
  EXPECT_EQ(got.stdout_start, 5u);
  EXPECT_EQ(got.stderr_start, 7u);
  SandboxHost::Stdio* again = &got.stdio;
  // The copies are the very pipes the first broker got.
  auto same_pipe = [](int a, int b) {
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_ino == sb.st_ino &&
           sa.st_dev == sb.st_dev;
  };
  EXPECT_TRUE(same_pipe(again->stdin_w.get(), stdio->stdin_w.get()));
  EXPECT_TRUE(same_pipe(again->stdout_r.get(), stdio->stdout_r.get()));
  EXPECT_TRUE(same_pipe(again->stderr_r.get(), stdio->stderr_r.get()));

  ASSERT_TRUE(host_->CloseInput({"sb-1", "p-1"}).ok());
  auto closed = host_->Reattach({{"sb-1", "p-1"}, 0, 0});
  ASSERT_TRUE(closed.ok());
  SandboxHost::Reattached after = closed->wait(ws_);
  SandboxHost::Stdio* after_close = &after.stdio;
  EXPECT_LT(after_close->stdin_w.get(), 0) << "stdin was closed: no copy to hand out";
  EXPECT_GE(after_close->stdout_r.get(), 0);
}

TEST_F(SandboxHostTest, AnOomKillIsReportedAndRemembered) {
  Adopt("sb-1");
  std::string events = cgroups_ + "/paseo-sandbox/sb-1/memory.events";
  fs::create_directories(fs::path(events).parent_path());
  std::ofstream(events) << "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n";  // an earlier kill
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  auto waited = host_->Wait({"sb-1", "p-1"});
  ASSERT_TRUE(waited.ok());
  std::ofstream(events, std::ios::trunc) << "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\n";
  EndExec(0, SIGKILL, std::nullopt);  // the sentry died: runsc logged no status
  EXPECT_EQ(waited->wait(ws_), ProcessExit::OomKilled());
  EXPECT_TRUE(Listing().oom_killed["sb-1"]);
  EXPECT_TRUE(Listing().stopped["sb-1"]);
  EXPECT_EQ(host_->StartProcess(Start("sb-1", "p-2")).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(SandboxHostTest, AnEarlierOomKillIsNotThisProcesssEnd) {
  Adopt("sb-1");
  std::string events = cgroups_ + "/paseo-sandbox/sb-1/memory.events";
  fs::create_directories(fs::path(events).parent_path());
  std::ofstream(events) << "oom_kill 1\n";
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  auto waited = host_->Wait({"sb-1", "p-1"});
  EndExec(0, SIGKILL, std::nullopt);
  EXPECT_EQ(waited->wait(ws_), ProcessExit::Unknown());
  EXPECT_FALSE(Listing().oom_killed["sb-1"]);
}

TEST_F(SandboxHostTest, ARunscThatCannotStartLeavesNoProcess) {
  Adopt("sb-1");
  runsc_.start_error = absl::InternalError("fork: out of memory");
  auto stdio = host_->StartProcess(Start("sb-1", "p-1"));
  EXPECT_EQ(stdio.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(host_->Wait({"sb-1", "p-1"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Listing().tty.count("p-1"), 0u);
}

// ---------------------------------------------------------------- a sandbox that stops by itself

// Regression (attack run, item 5): a sandbox whose sentry was SIGKILLed stayed `running`, and
// exec into it failed inside runsc instead of being refused.
TEST_F(SandboxHostTest, ASandboxWhoseSentryDiesIsStoppedWithWhy) {
  Adopt("sb-1");
  const std::string cgroup = "/paseo-sandbox/sb-1";
  EXPECT_EQ(watcher_.watched,
            (std::vector<std::pair<pid_t, std::string>>{{kSentry, cgroup}, {kGofer, cgroup}}));
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  auto waiting = host_->WaitStopped({"sb-1"});
  ASSERT_TRUE(waiting.ok());
  EXPECT_EQ(Stopped(*waiting).status().code(), absl::StatusCode::kDeadlineExceeded);

  watcher_.Exit(kSentry);
  watcher_.Exit(kGofer);
  ws_.poll();
  // Refused at once, while the reason still waits for the sentry's status.
  auto refused = host_->StartProcess(Start("sb-1", "p-2"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "sandbox sb-1 is stopped: its gVisor kernel (runsc-sandbox) exited");
  EXPECT_EQ(Stopped(*waiting).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Listing().stopped["sb-1"]);

  watcher_.Reap(kSentry, SIGKILL);
  watcher_.Reap(kGofer, 0);
  auto stop = Stopped(*waiting);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_EQ(stop->reason, "its gVisor kernel (runsc-sandbox) exited (killed by signal 9)");
  EXPECT_FALSE(stop->oom_killed);
  // A late waiter is answered at once; a restarted broker learns it from the inventory.
  auto late = host_->WaitStopped({"sb-1"});
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(Stopped(*late)->reason, stop->reason);
  Inventory inv = Listing();
  EXPECT_TRUE(inv.stopped["sb-1"]);
  EXPECT_EQ(inv.stop_reason["sb-1"], stop->reason);
  EXPECT_FALSE(inv.oom_killed["sb-1"]);
  EXPECT_EQ(host_->Signal({{"sb-1", "p-1"}, 15}).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // Its runsc exec ends (runsc could not wait), and delete removes everything.
  EndExec(0, 128 << 8, std::nullopt);
  EXPECT_EQ(host_->Wait({"sb-1", "p-1"})->wait(ws_), ProcessExit::Unknown());
  ASSERT_TRUE(Await(host_->Delete({"sb-1"})).ok());
  ExpectDestroyed("sb-1");
}

TEST_F(SandboxHostTest, AKilledGoferIsNamedEvenIfTheSentryIsSeenFirst) {
  Adopt("sb-1");
  auto waiting = host_->WaitStopped({"sb-1"});
  ASSERT_TRUE(waiting.ok());
  // Both gone by the time the loop runs; the sentry, which exits 137 when its gofer dies
  // (measured), happens to be seen first.
  watcher_.Exit(kSentry);
  watcher_.Exit(kGofer);
  watcher_.Reap(kSentry, 137 << 8);
  watcher_.Reap(kGofer, SIGKILL);
  auto stop = Stopped(*waiting);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_EQ(stop->reason, "its gVisor file server (runsc-gofer) exited (killed by signal 9)");
}

TEST_F(SandboxHostTest, AGoferSeenExitingFirstIsTheCauseAndAnUnknownStatusIsLeftOut) {
  Adopt("sb-1");
  auto waiting = host_->WaitStopped({"sb-1"});
  watcher_.Exit(kGofer);
  ws_.poll();
  watcher_.Exit(kSentry);
  watcher_.Reap(kSentry, std::nullopt);  // not reaped within the patience
  watcher_.Reap(kGofer, std::nullopt);
  auto stop = Stopped(*waiting);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_EQ(stop->reason, "its gVisor file server (runsc-gofer) exited");
}

TEST_F(SandboxHostTest, ASentryKilledOverTheMemoryLimitIsOomKilled) {
  std::string events = cgroups_ + "/paseo-sandbox/sb-1/memory.events";
  fs::create_directories(fs::path(events).parent_path());
  std::ofstream(events) << "oom_kill 0\n";
  WriteRunscStateFile("sb-1", kSentry, /*gofer=*/0);  // only the sentry can be watched
  Adopt("sb-1");
  EXPECT_EQ(watcher_.watched.size(), 2u);
  auto waiting = host_->WaitStopped({"sb-1"});
  std::ofstream(events, std::ios::trunc) << "oom_kill 1\n";
  watcher_.Exit(kSentry);
  watcher_.Reap(kSentry, SIGKILL);
  auto stop = Stopped(*waiting);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_TRUE(stop->oom_killed);
  EXPECT_EQ(stop->reason, kOomKilledSandboxReason);
  EXPECT_TRUE(Listing().oom_killed["sb-1"]);
}

TEST_F(SandboxHostTest, ASandboxWhoseSentryIsGoneWhenWatchedIsStopped) {
  // Its pid runs no more, or names a process outside its cgroup (the fake says "not running").
  WriteRunscStateFile("sb-1", /*sentry=*/7);
  Adopt("sb-1");
  auto waiting = host_->WaitStopped({"sb-1"});
  ASSERT_TRUE(waiting.ok());
  auto stop = Stopped(*waiting);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_EQ(stop->reason, "its gVisor kernel (runsc-sandbox) exited");
  EXPECT_TRUE(Listing().stopped["sb-1"]);
  ASSERT_TRUE(Await(host_->Delete({"sb-1"})).ok());
}

TEST_F(SandboxHostTest, NotKnowingIsNotStopping) {
  for (const char* file : {"", "garbage", R"({"id": "sb-1", "goferPid": 101})"}) {
    SCOPED_TRACE(file);
    Write("run/runsc/sb-1_sandbox:sb-1.state", file);
    Adopt("sb-1");
    EXPECT_TRUE(watcher_.watched.empty());
    auto waiting = host_->WaitStopped({"sb-1"});
    ASSERT_TRUE(waiting.ok());
    EXPECT_EQ(Stopped(*waiting).status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_FALSE(Listing().stopped["sb-1"]);
    EXPECT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
    // Deleting it answers the waiter.
    ASSERT_TRUE(Await(host_->Delete({"sb-1"})).ok());
    EXPECT_EQ(Stopped(*waiting).status().code(), absl::StatusCode::kNotFound);
    EndExec(runsc_.started.size() - 1, 0, 0);
  }
  EXPECT_EQ(host_->WaitStopped({"sb-1"}).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SandboxHostTest, KeepAdoptsAStoppedSandboxAsStopped) {
  LeaveBundle("sb-dead");
  runsc_.results["list"] = Listed(R"([{"id": "sb-dead", "status": "stopped"}])");
  ASSERT_TRUE(Reconcile(config::RestartPolicy::KEEP).ok());
  EXPECT_TRUE(watcher_.watched.empty()) << "nothing to watch";
  Inventory inv = Listing();
  EXPECT_TRUE(inv.unattached["sb-dead"]);
  EXPECT_TRUE(inv.stopped["sb-dead"]);
  EXPECT_EQ(inv.stop_reason["sb-dead"], "it had stopped when the privhelper restarted");
  auto refused = host_->StartProcess(Start("sb-dead", "p-1"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Await(host_->Delete({"sb-dead"})).ok());
  ExpectDestroyed("sb-dead");
}

// ---------------------------------------------------------------- pause and resume

using Calls = std::vector<std::vector<std::string>>;

TEST_F(SandboxHostTest, APausedSandboxStartsNothingAndGetsItsSignalsOnResume) {
  Adopt("sb-1");
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  WritePid(0, 42);
  ASSERT_TRUE(Await(host_->Pause({"sb-1"})).ok());
  EXPECT_EQ(runsc_.CallsOf("pause"), (Calls{{"pause", "sb-1"}}));
  EXPECT_TRUE(Listing().paused["sb-1"]);
  // Idempotent: runsc would refuse a second pause ("in state paused").
  ASSERT_TRUE(Await(host_->Pause({"sb-1"})).ok());
  EXPECT_EQ(runsc_.CallsOf("pause").size(), 1u);

  auto refused = host_->StartProcess(Start("sb-1", "p-2"));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("paused"));
  EXPECT_EQ(runsc_.started.size(), 1u) << "no runsc exec while paused";
  // runsc cannot signal into a frozen container: queued, sent in order on resume.
  ASSERT_TRUE(Await(host_->Signal({{"sb-1", "p-1"}, 15})).ok());
  ASSERT_TRUE(Await(host_->Signal({{"sb-1", "p-1"}, 2})).ok());
  EXPECT_TRUE(runsc_.CallsOf("kill").empty());

  ASSERT_TRUE(Await(host_->Resume({"sb-1"})).ok());
  EXPECT_EQ(runsc_.CallsOf("resume"), (Calls{{"resume", "sb-1"}}));
  EXPECT_EQ(runsc_.CallsOf("kill"),
            (Calls{{"kill", "--pid=42", "sb-1", "15"}, {"kill", "--pid=42", "sb-1", "2"}}));
  EXPECT_FALSE(Listing().paused["sb-1"]);
  ASSERT_TRUE(Await(host_->Resume({"sb-1"})).ok());
  EXPECT_EQ(runsc_.CallsOf("resume").size(), 1u) << "resuming a running sandbox does nothing";
  EXPECT_TRUE(host_->StartProcess(Start("sb-1", "p-2")).ok());
}

TEST_F(SandboxHostTest, QueuedSignalsAreBounded) {
  Adopt("sb-1");
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  WritePid(0, 42);
  ASSERT_TRUE(Await(host_->Pause({"sb-1"})).ok());
  for (size_t i = 0; i < SandboxHost::kMaxQueuedSignals; ++i)
    ASSERT_TRUE(Await(host_->Signal({{"sb-1", "p-1"}, 10})).ok());
  EXPECT_EQ(Await(host_->Signal({{"sb-1", "p-1"}, 10})).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(SandboxHostTest, AFailedPauseLeavesTheSandboxRunning) {
  Adopt("sb-1");
  runsc_.results["pause"] = Failed("cannot pause");
  EXPECT_EQ(Await(host_->Pause({"sb-1"})).code(), absl::StatusCode::kInternal);
  EXPECT_FALSE(Listing().paused["sb-1"]);
  EXPECT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
}

TEST_F(SandboxHostTest, DeletingAPausedSandboxResumesItFirst) {
  Adopt("sb-1");
  ASSERT_TRUE(Await(host_->Pause({"sb-1"})).ok());
  // Asked together: the delete runs after the pause, and resumes before it kills, since runsc
  // refuses `kill` on a frozen container and its `delete --force` panics on one.
  auto paused = host_->Pause({"sb-1"});
  auto deleted = host_->Delete({"sb-1"});
  ASSERT_TRUE(paused.ok() && deleted.ok());
  EXPECT_TRUE(Await(std::move(*paused)).ok());
  ASSERT_TRUE(Await(std::move(*deleted)).ok());
  std::vector<std::string> order;
  for (const auto& c : runsc_.calls) order.push_back(c.at(0));
  EXPECT_EQ(order, (std::vector<std::string>{"pause", "resume", "kill", "delete"}));
  ExpectDestroyed("sb-1");
}

TEST_F(SandboxHostTest, KeepAdoptsAPausedSandboxAsPaused) {
  LeaveBundle("sb-1");
  WriteRunscStateFile("sb-1");
  runsc_.results["list"] = Listed(R"([{"id": "sb-1", "status": "paused"}])");
  ASSERT_TRUE(Reconcile(config::RestartPolicy::KEEP).ok());
  Inventory inv = Listing();
  EXPECT_TRUE(inv.unattached["sb-1"]);
  EXPECT_TRUE(inv.paused["sb-1"]);
  EXPECT_FALSE(inv.stopped["sb-1"]);
  EXPECT_EQ(host_->StartProcess(Start("sb-1", "p-1")).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Await(host_->Resume({"sb-1"})).ok());
  EXPECT_EQ(runsc_.CallsOf("resume"), (Calls{{"resume", "sb-1"}}));
  EXPECT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
}

TEST_F(SandboxHostTest, KillResumesAPausedLeftoverBeforeDestroyingIt) {
  LeaveBundle("sb-1");
  runsc_.results["list"] = Listed(R"([{"id": "sb-1", "status": "paused"}])");
  ASSERT_TRUE(Reconcile(config::RestartPolicy::KILL).ok());
  EXPECT_EQ(runsc_.CallsOf("resume"), (Calls{{"resume", "sb-1"}}));
  ExpectDestroyed("sb-1");
}

TEST_F(SandboxHostTest, PauseAndResumeRefuseAStoppedOrMissingSandbox) {
  LeaveBundle("sb-dead");
  runsc_.results["list"] = Listed(R"([{"id": "sb-dead", "status": "stopped"}])");
  ASSERT_TRUE(Reconcile(config::RestartPolicy::KEEP).ok());
  runsc_.calls.clear();
  EXPECT_EQ(host_->Pause({"sb-dead"}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(host_->Resume({"sb-dead"}).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(host_->Pause({"sb-none"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(host_->Resume({"sb-none"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(runsc_.calls.empty());
}

// ---------------------------------------------------------------- delete

TEST_F(SandboxHostTest, DeleteKillsRemovesTheBundleAndForgets) {
  Adopt("sb-1");
  ASSERT_TRUE(host_->StartProcess(Start("sb-1", "p-1")).ok());
  ASSERT_TRUE(Await(host_->Delete({"sb-1"})).ok());
  ExpectDestroyed("sb-1");
  EXPECT_EQ(host_->Delete({"sb-1"}).status().code(), absl::StatusCode::kNotFound);
  // The exec still running is reaped in the background; its late end harms nothing.
  EndExec(0, 0, 0);
}

TEST_F(SandboxHostTest, DeleteAnswersOnceNothingRunsAndTearsDownInTheBackground) {
  Adopt("sb-1");
  runsc_.hold = "delete";
  auto deleted = host_->Delete({"sb-1"});
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  ws_.poll();
  // Answered while `runsc delete` still runs: its init was killed and its sentry exited.
  ASSERT_TRUE(deleted->poll(ws_)) << "delete waited for the teardown";
  EXPECT_TRUE(Await(std::move(*deleted)).ok());
  EXPECT_EQ(runsc_.CallsOf("kill"), (std::vector<std::vector<std::string>>{{"kill", "sb-1", "KILL"}}));
  // Deleting: marked on disk, out of the inventory, nothing starts, a second delete answers.
  EXPECT_TRUE(RecordSaysDeleting("sb-1"));
  EXPECT_EQ(host_->size(), 1u);
  EXPECT_EQ(Listing().unattached.count("sb-1"), 0u);
  EXPECT_EQ(host_->StartProcess(Start("sb-1", "p-1")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Await(host_->Delete({"sb-1"})).ok());
  auto gone = host_->AwaitGone({"sb-1"});
  ASSERT_TRUE(gone.ok()) << gone.status();
  ws_.poll();
  EXPECT_FALSE(gone->poll(ws_));
  EXPECT_EQ(runsc_.CallsOf("delete").size(), 1u) << "one teardown, however many deletes";

  (*runsc_.held)->fulfill();
  EXPECT_TRUE(Await(std::move(*gone)).ok());
  EXPECT_FALSE(fs::exists(Bundle("sb-1")));
  EXPECT_EQ(host_->size(), 0u);
  EXPECT_TRUE(Await(host_->AwaitGone({"sb-1"})).ok()) << "an unknown sandbox is gone";
}

// Regression (teardown review, finding 1): a failed teardown used to put the sandbox back as
// running while its record on disk said deleting.
TEST_F(SandboxHostTest, ABackgroundTeardownThatFailsIsRetriedThenStaysDeletingForTheNextDelete) {
  Adopt("sb-1");
  runsc_.results["delete"] = Failed("permission denied on the cgroup");
  EXPECT_TRUE(Await(host_->Delete({"sb-1"})).ok()) << "nothing runs in it any more";
  auto gone = host_->AwaitGone({"sb-1"});
  ASSERT_TRUE(gone.ok()) << gone.status();
  ws_.poll();
  EXPECT_FALSE(gone->poll(ws_)) << "reported failed without a retry";
  EXPECT_EQ(runsc_.CallsOf("delete").size(), 1u);
  RunOutTeardownRetries();
  EXPECT_EQ(runsc_.CallsOf("delete").size(), size_t{SandboxHost::kTeardownTries});
  EXPECT_EQ(Await(std::move(*gone)).code(), absl::StatusCode::kInternal);
  // Still deleting, here as on disk: out of the inventory, nothing starts in it.
  EXPECT_EQ(host_->size(), 1u);
  EXPECT_TRUE(RecordSaysDeleting("sb-1"));
  EXPECT_EQ(Listing().unattached.count("sb-1"), 0u);
  EXPECT_EQ(host_->StartProcess(Start("sb-1", "p-1")).status().code(), absl::StatusCode::kNotFound);

  // The next delete starts it again; a container that is already gone is what it wants.
  runsc_.results["delete"] = Failed("container \"sb-1\" does not exist");
  EXPECT_TRUE(Await(host_->Delete({"sb-1"})).ok());
  EXPECT_EQ(runsc_.CallsOf("delete").size(), size_t{SandboxHost::kTeardownTries} + 1);
  EXPECT_EQ(host_->size(), 0u);
  EXPECT_FALSE(fs::exists(Bundle("sb-1")));
}

TEST_F(SandboxHostTest, ATeardownRefusedOnceSucceedsOnItsRetry) {
  Adopt("sb-1");
  runsc_.results["delete"] = Failed("permission denied on the cgroup");
  EXPECT_TRUE(Await(host_->Delete({"sb-1"})).ok());
  auto gone = host_->AwaitGone({"sb-1"});
  ASSERT_TRUE(gone.ok()) << gone.status();
  runsc_.results.erase("delete");
  timer_.advanceTo(timer_.now() + SandboxHost::kTeardownRetryDelay);
  EXPECT_TRUE(Await(std::move(*gone)).ok());
  EXPECT_EQ(runsc_.CallsOf("delete").size(), 2u);
  EXPECT_EQ(host_->size(), 0u);
  EXPECT_FALSE(fs::exists(Bundle("sb-1")));
}

TEST_F(SandboxHostTest, ARunscThatCannotStopItKeepsTheSandboxDeletingForARetry) {
  Adopt("sb-1");
  kill_ends_sentry_ = false;  // its init's death did not end it
  runsc_.results["delete"] = Failed("permission denied on the cgroup");
  auto deleted = host_->Delete({"sb-1"});
  ASSERT_TRUE(deleted.ok());
  ws_.poll();
  EXPECT_FALSE(deleted->poll(ws_)) << "answered while its sentry still runs";
  // `runsc delete --force` gets its chance after kHaltPatience, each time, and fails: so does
  // the delete, once the retries have run out.
  RunOutTeardownRetries();
  absl::Status st = Await(std::move(*deleted));
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_EQ(runsc_.CallsOf("delete").size(), size_t{SandboxHost::kTeardownTries});
  EXPECT_EQ(host_->size(), 1u);
  EXPECT_TRUE(RecordSaysDeleting("sb-1"));
  EXPECT_EQ(Listing().unattached.count("sb-1"), 0u) << "listed as running again";
  EXPECT_EQ(host_->StartProcess(Start("sb-1", "p-1")).status().code(), absl::StatusCode::kNotFound);
  runsc_.results.erase("delete");
  watcher_.Exit(kSentry);
  EXPECT_TRUE(Await(host_->Delete({"sb-1"})).ok());
  EXPECT_EQ(host_->size(), 0u);
}

// A leftover that a restart destroys, or a failed create, has no Delete to start it again: it
// stays deleting (on disk too) and the next gc finishes it.
TEST_F(SandboxHostTest, AFailedTeardownOfALeftoverIsFinishedByTheNextGc) {
  LeaveBundle("sb-1");
  WriteRunscStateFile("sb-1");
  runsc_.results["list"] = Listed(R"([{"id": "sb-1", "status": "running"}])");
  runsc_.results["delete"] = Failed("permission denied on the cgroup");
  ASSERT_TRUE(Reconcile(config::RestartPolicy::KILL).ok());
  RunOutTeardownRetries();
  EXPECT_EQ(runsc_.CallsOf("delete").size(), size_t{SandboxHost::kTeardownTries});
  EXPECT_EQ(host_->size(), 1u);
  EXPECT_TRUE(RecordSaysDeleting("sb-1")) << "a restart under policy keep would adopt it";
  EXPECT_EQ(Listing().unattached.count("sb-1"), 0u);

  runsc_.results.erase("delete");
  runsc_.results["list"] = Listed("null");
  ASSERT_TRUE(Reconcile(config::RestartPolicy::KILL).ok());
  EXPECT_EQ(runsc_.CallsOf("delete").size(), size_t{SandboxHost::kTeardownTries} + 1);
  EXPECT_EQ(host_->size(), 0u);
  EXPECT_FALSE(fs::exists(Bundle("sb-1")));
}

TEST_F(SandboxHostTest, DeleteAllDestroysEverySandbox) {
  Adopt("sb-1");
  Adopt("sb-2");
  ASSERT_TRUE(Await(host_->DeleteAll()).ok());
  EXPECT_EQ(host_->size(), 0u);
  EXPECT_TRUE(fs::is_empty(state_ + "/bundles"));
}

// ---------------------------------------------------------------- create, up to the mounts

TEST_F(SandboxHostTest, CreateRefusalsChangeNothing) {
  Adopt("sb-1");
  struct Case {
    const char* name;
    ValidatedCreate request;
    absl::StatusCode code;
    const char* message_part;
  };
  std::vector<Case> cases;
  cases.push_back({"existing id", Create("sb-1"), absl::StatusCode::kAlreadyExists, "exists"});
  cases.push_back({"rootfs version not installed", Create("sb-2", "/workspace", "alpha", "missing"),
                   absl::StatusCode::kFailedPrecondition, "not installed"});
  cases.push_back({"destination through a rootfs symlink", Create("sb-2", "/var/run/x"),
                   absl::StatusCode::kInvalidArgument, "symlink"});
  ValidatedCreate outside = Create("sb-2");
  outside.mounts[0].client_path = "/etc";
  cases.push_back({"workspace outside the roots", std::move(outside),
                   absl::StatusCode::kPermissionDenied, ""});
  ValidatedCreate escape = Create("sb-2");
  escape.mounts[0].client_path = dir_ + "/ws/../etc";
  cases.push_back({"workspace with ..", std::move(escape), absl::StatusCode::kInvalidArgument, ""});
  cases.push_back({"agents would run as root", Create("sb-2", "/workspace", "rooted"),
                   absl::StatusCode::kFailedPrecondition, "uid or gid 0"});
  // Regression (attack run item 1): a workspace the client could not open itself.
  ValidatedCreate locked = Create("sb-2");
  locked.peer = PeerIdentity{getuid() + 1000, {getgid() + 1000}};
  cases.push_back({"workspace in a directory the client may not search", std::move(locked),
                   absl::StatusCode::kPermissionDenied, "may not search"});
  for (auto& c : cases) {
    auto created = host_->Create(std::move(c.request));
    ASSERT_FALSE(created.ok()) << c.name;
    EXPECT_EQ(created.status().code(), c.code) << c.name << ": " << created.status();
    EXPECT_THAT(std::string(created.status().message()), HasSubstr(c.message_part)) << c.name;
    EXPECT_EQ(host_->size(), 1u) << c.name;
    EXPECT_FALSE(fs::exists(Bundle("sb-2"))) << c.name;
  }
  EXPECT_TRUE(runsc_.calls.empty());
}

// Network mode "sandbox" needs networking set up and the privhelper's resolver: without either
// the create is refused before anything exists (no port 53 opened to an unknown host service).
TEST_F(SandboxHostTest, ANetworkedCreateNeedsNetworkingAndAResolver) {
  auto created = host_->Create(Create("sb-2", "/workspace", "alpha", "networked"));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kFailedPrecondition) << created.status();
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("not set up"));
  // Networking (never started: Create would fail loudly if it got that far) but no resolver.
  network::SandboxNetworks networks(-1, dir_ + "/net", *network::ParseCidr("10.88.0.0/24"), "");
  host_->SetNetworks(&networks);
  created = host_->Create(Create("sb-2", "/workspace", "alpha", "networked"));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kFailedPrecondition) << created.status();
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("dnsUpstreams"));
  host_->SetNetworks(nullptr);
  EXPECT_EQ(host_->size(), 0u);
  EXPECT_FALSE(fs::exists(Bundle("sb-2")));
  EXPECT_TRUE(runsc_.calls.empty());
}

TEST_F(SandboxHostTest, CreateRefusesPastTheDeploymentsMaxSandboxes) {
  Adopt("sb-1");
  Adopt("sb-2");
  auto created = host_->Create(Create("sb-3"));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kResourceExhausted) << created.status();
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("maxSandboxes"));
  EXPECT_FALSE(fs::exists(Bundle("sb-3")));
}

// Regression (teardown review, finding 2): sandboxes being deleted hold a /30, a namespace,
// mounts and a cgroup; maxSandboxes of them are free, each one beyond counts.
TEST_F(SandboxHostTest, SandboxesBeingDeletedCountBeyondMaxSandboxesOfThem) {
  for (const char* id : {"sb-1", "sb-2", "sb-3", "sb-4"}) Adopt(id);
  runsc_.results["delete"] = Failed("permission denied on the cgroup");
  for (const char* id : {"sb-1", "sb-2", "sb-3"}) ASSERT_TRUE(Await(host_->Delete({id})).ok());
  // One live and three deleting (maxSandboxes 2): the third deleting one counts.
  auto created = host_->Create(Create("sb-5"));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kResourceExhausted) << created.status();
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("still being deleted"));
  EXPECT_THAT(std::string(created.status().message()), HasSubstr("maxSandboxes"));
  RunOutTeardownRetries();  // failed for good: they still hold what they held
  EXPECT_EQ(host_->Create(Create("sb-5")).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(fs::exists(Bundle("sb-5")));

  // One of them gone: one live and two deleting fit. (The create passes the count and fails
  // further on, at the fixture's unmountable rootfs.)
  runsc_.results.erase("delete");
  ASSERT_TRUE(Await(host_->Delete({"sb-1"})).ok());
  EXPECT_EQ(host_->size(), 3u);
  created = host_->Create(Create("sb-5"));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument) << created.status();
}

// With the service's cgroup set (main.cc), a create is refused when the sandboxes together
// leave less than a sandbox's start-up cost of the service's memory or host tasks; the reason
// names the bound and nothing is made. (A fake v1 tree: the kernel would make its files.)
TEST_F(SandboxHostTest, CreateIsRefusedWhenTheSandboxesTogetherLeaveNoRoom) {
  std::string memory = cgroups_ + "/memory/paseo-sandbox/memory.usage_in_bytes";
  std::string tasks = cgroups_ + "/pids/paseo-sandbox/pids.current";
  for (const std::string& f : {memory, tasks}) {
    fs::create_directories(fs::path(f).parent_path());
    Write(f.substr(dir_.size() + 1), "0\n");
  }
  fs::create_directories(cgroups_ + "/cpu/paseo-sandbox");
  Write("cgroup/memory/paseo-sandbox/memory.stat", "total_inactive_file 0\n");
  auto service = ServiceCgroup::Open(cgroups_, "/paseo-sandbox");
  ASSERT_TRUE(service.ok()) << service.status();
  host_->SetServiceCgroup(&*service);
  const ServiceBounds& bound = config_->service();

  struct Case {
    uint64_t memory, tasks;
    const char* says;
  } cases[] = {
      {bound.memory_bytes - SandboxHost::kSandboxStartBytes + 1, 0,
       "serviceLimits.memoryBytes"},
      {0, bound.max_host_tasks - SandboxHost::kSandboxStartHostTasks + 1,
       "serviceLimits.maxHostTasks"},
  };
  for (const Case& k : cases) {
    Write(memory.substr(dir_.size() + 1), absl::StrCat(k.memory, "\n"));
    Write(tasks.substr(dir_.size() + 1), absl::StrCat(k.tasks, "\n"));
    auto created = host_->Create(Create("sb-1"));
    EXPECT_EQ(created.status().code(), absl::StatusCode::kResourceExhausted) << created.status();
    EXPECT_THAT(std::string(created.status().message()), HasSubstr(k.says));
    EXPECT_THAT(std::string(created.status().message()), HasSubstr("bound is reached"));
    EXPECT_FALSE(fs::exists(Bundle("sb-1")));
    EXPECT_EQ(host_->size(), 0u);
  }
  // Room for exactly one more: the create passes the check (and fails further on, at the
  // fixture's unmountable rootfs).
  Write(memory.substr(dir_.size() + 1),
        absl::StrCat(bound.memory_bytes - SandboxHost::kSandboxStartBytes, "\n"));
  Write(tasks.substr(dir_.size() + 1),
        absl::StrCat(bound.max_host_tasks - SandboxHost::kSandboxStartHostTasks, "\n"));
  EXPECT_EQ(host_->Create(Create("sb-1")).status().code(), absl::StatusCode::kInvalidArgument);
  // Unreadable use is not room: refused, not assumed empty.
  Write(tasks.substr(dir_.size() + 1), "garbage\n");
  EXPECT_FALSE(host_->Create(Create("sb-1")).ok());
  EXPECT_FALSE(fs::exists(Bundle("sb-1")));
}

TEST_F(SandboxHostTest, ABundleLeftUnderTheSameIdIsNotTakenOverNorRemoved) {
  fs::create_directories(Bundle("sb-2"));
  std::ofstream(Bundle("sb-2") + "/evidence") << "left by a crash";
  auto created = host_->Create(Create("sb-2"));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kAlreadyExists) << created.status();
  EXPECT_TRUE(fs::exists(Bundle("sb-2") + "/evidence"));
  EXPECT_EQ(host_->size(), 0u);
}

// Everything Create wrote before the failing step (bundle dir, mounts dir, record) is undone,
// and the id is free again.
TEST_F(SandboxHostTest, AFailureAfterTheBundleExistsUndoesItAll) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto created = host_->Create(Create("sb-2"));
    ASSERT_FALSE(created.ok());
    EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument) << created.status();
    EXPECT_THAT(std::string(created.status().message()), HasSubstr("rootfs path may not contain"));
    EXPECT_FALSE(fs::exists(Bundle("sb-2"))) << attempt;
    EXPECT_EQ(host_->size(), 0u);
  }
  EXPECT_TRUE(runsc_.calls.empty());
}

// ---------------------------------------------------------------- connect

// Every refusal comes before anything is connected, decided from the root-owned profile.
TEST_F(SandboxHostTest, ConnectIsRefusedUnlessTheProfileHasANetworkAndListsThePort) {
  auto code = [&](const std::string& id, uint16_t port) {
    return host_->ConnectPort({id, port}).status().code();
  };
  EXPECT_EQ(code("sb-9", 8080), absl::StatusCode::kNotFound);
  Adopt("sb-1");  // profile default: network none
  auto none = host_->ConnectPort({"sb-1", 8080});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("sandbox has no network"));

  Adopt("sb-2", "networked");
  auto unlisted = host_->ConnectPort({"sb-2", 8081});
  EXPECT_EQ(unlisted.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(unlisted.status().message()), HasSubstr("inboundPorts"));
  // Listed, but no network was set up for it (none is recorded for an adopted sandbox here).
  EXPECT_EQ(code("sb-2", 8080), absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(Await(host_->Pause({"sb-2"})).ok());
  auto paused = host_->ConnectPort({"sb-2", 8080});
  EXPECT_EQ(paused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(paused.status().message()), HasSubstr("paused"));
  EXPECT_TRUE(ports_.calls.empty());
}

TEST_F(SandboxHostTest, AStoppedSandboxIsRefusedAConnection) {
  Adopt("sb-2", "networked");
  watcher_.Exit(kSentry);
  watcher_.Reap(kSentry, 9);
  ws_.poll();
  EXPECT_EQ(host_->ConnectPort({"sb-2", 8080}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ports_.calls.empty());
}

}  // namespace
}  // namespace paseo
