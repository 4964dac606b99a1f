// The lifecycle operations against the in-process fake of the API (client/fake_service.h).
#include "runtime/lifecycle.h"

#include <cstdlib>

#include <gtest/gtest.h>

#include "client/client.h"
#include "client/fake_service.h"

namespace paseo::runtime {
namespace {

using client::Connection;
using client::FakeService;
using client::SocketDir;
using client::UnixSocketServer;

constexpr char kMine[] = "instance-mine";

class LifecycleTest : public testing::Test {
 protected:
  LifecycleTest()
      : io_(kj::setupAsyncIo()),
        server_(io_, dir_.path() + "/s.sock", service_.NewSupervisor()),
        conn_(io_, dir_.path() + "/s.sock") {}
  ~LifecycleTest() noexcept override {}

  Session Make(const std::string& instance = kMine) {
    Session s{io_.waitScope, io_.provider->getTimer(), conn_.supervisor(), "alpha", instance, {}};
    s.signal_wait_ms = 200;
    return s;
  }

  static LifecycleRequest DirectoryRequest(const std::string& workspace, const std::string& path,
                                           const std::string& instance = kMine) {
    LifecycleRequest r;
    r.runtime_instance_id = instance;
    CreateInput input;
    input.workspace_id = workspace;
    input.project_id = "p";
    input.source = DirectorySource{path};
    input.placement_kind = "existing";
    r.input = input;
    return r;
  }

  client::FakeSandbox* Sandbox(const std::string& workspace) {
    return service_.FindByKey("alpha", "paseo/" + workspace);
  }

  SocketDir dir_;
  kj::AsyncIoContext io_;
  FakeService service_;
  UnixSocketServer server_;
  Connection conn_;
};

TEST_F(LifecycleTest, CreateMakesAKeyedLabelledSandboxOverTheDirectory) {
  Session s = Make();
  s.options.profile = "small";
  s.options.credentials = {"claude"};
  auto r = Create(s, "ws1", DirectoryRequest("ws1", "/home/u/proj"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, StateResponse("ws1", Lifecycle::kReady, "/workspace", true));
  auto* sb = Sandbox("ws1");
  ASSERT_NE(sb, nullptr);
  EXPECT_EQ(sb->profile, "small");
  EXPECT_EQ(sb->credentials, std::vector<std::string>{"claude"});
  ASSERT_EQ(sb->workspaces.size(), 1u);
  EXPECT_EQ(std::get<0>(sb->workspaces[0]), "/home/u/proj");
  EXPECT_EQ(std::get<1>(sb->workspaces[0]), "/workspace");
  EXPECT_EQ(std::get<2>(sb->workspaces[0]), api::AccessMode::READ_WRITE);
  EXPECT_EQ(sb->labels, (std::vector<std::pair<std::string, std::string>>{
                            {"paseo.runtime-instance", kMine},
                            {"paseo.workspace", "ws1"},
                            {"paseo.source", "/home/u/proj"}}));
}

TEST_F(LifecycleTest, CreateIsIdempotentAndRefusesAnotherSourceOrOwner) {
  Session s = Make();
  ASSERT_TRUE(Create(s, "ws1", DirectoryRequest("ws1", "/src")).ok());
  auto again = Create(s, "ws1", DirectoryRequest("ws1", "/src"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, StateResponse("ws1", Lifecycle::kReady, "/workspace", false));
  EXPECT_EQ(service_.sandboxes.size(), 1u);

  auto other_source = Create(s, "ws1", DirectoryRequest("ws1", "/elsewhere"));
  EXPECT_FALSE(other_source.ok());
  EXPECT_NE(other_source.status().message().find("another source"), std::string::npos);

  Session theirs = Make("instance-theirs");
  auto foreign = Create(theirs, "ws1", DirectoryRequest("ws1", "/src", "instance-theirs"));
  EXPECT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("owned by another Paseo instance"),
            std::string::npos);

  Sandbox("ws1")->paused = true;
  EXPECT_EQ(*Create(s, "ws1", DirectoryRequest("ws1", "/src")),
            StateResponse("ws1", Lifecycle::kPaused, "/workspace", false));
}

TEST_F(LifecycleTest, CreateRefusesGitSourcesWithoutANetworkMismatchedIdsAndOverlongKeys) {
  Session s = Make();
  LifecycleRequest git = DirectoryRequest("ws1", "/src");
  git.input->source = GitSource{"https://example.test/r.git", "main", std::nullopt};
  // The fake's sandboxes have no network: refused after the create, and the sandbox deleted.
  auto r = Create(s, "ws1", git);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("has no network"), std::string::npos) << r.status();
  ASSERT_EQ(service_.sandboxes.size(), 1u);
  EXPECT_TRUE(service_.sandboxes.begin()->second.deleted) << "a refused git source leaves no sandbox";
  EXPECT_TRUE(service_.sandboxes.begin()->second.delete_force);
  // A URL that could not be reached by name is refused before anything is made.
  git.input->source = GitSource{"ssh://git@example.test/r.git", "main", std::nullopt};
  EXPECT_EQ(Create(s, "ws1", git).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Create(s, "ws2", DirectoryRequest("ws1", "/src")).ok());
  LifecycleRequest no_input = DirectoryRequest("ws1", "/src");
  no_input.input.reset();
  EXPECT_FALSE(Create(s, "ws1", no_input).ok());
  std::string long_id(251, 'a');  // "paseo/" + 251 = 257 bytes
  EXPECT_FALSE(Create(s, long_id, DirectoryRequest(long_id, "/src")).ok());
  std::string fits(250, 'a');
  EXPECT_TRUE(Create(s, fits, DirectoryRequest(fits, "/src")).ok());
  EXPECT_FALSE(Create(s, "ws3", DirectoryRequest("ws3", "/" + std::string(300, 'd'))).ok());
  size_t live = 0;
  for (const auto& [id, sb] : service_.sandboxes) live += sb.deleted ? 0 : 1;
  EXPECT_EQ(live, 1u);  // only `fits`
}

TEST_F(LifecycleTest, InspectReportsEveryState) {
  Session s = Make();
  EXPECT_EQ(*Inspect(s, "ws1"), InspectionMissing());
  ASSERT_TRUE(Create(s, "ws1", DirectoryRequest("ws1", "/src")).ok());
  EXPECT_EQ(*Inspect(s, "ws1"), InspectionState("ws1", Lifecycle::kReady, "/workspace"));
  Sandbox("ws1")->state = "running-unattached";
  EXPECT_EQ(*Inspect(s, "ws1"), InspectionState("ws1", Lifecycle::kReady, "/workspace"));
  Sandbox("ws1")->paused = true;
  EXPECT_EQ(*Inspect(s, "ws1"), InspectionState("ws1", Lifecycle::kPaused, "/workspace"));
  Sandbox("ws1")->paused = false;
  Sandbox("ws1")->state = "oom-killed";
  Sandbox("ws1")->state_reason = "it exceeded its memory limit";
  std::string oom = *Inspect(s, "ws1");
  EXPECT_NE(oom.find(R"("status":"error")"), std::string::npos) << oom;
  EXPECT_NE(oom.find("oom-killed (it exceeded its memory limit)"), std::string::npos) << oom;
  Sandbox("ws1")->state = "stopped";
  EXPECT_NE(Inspect(s, "ws1")->find(R"("status":"error")"), std::string::npos);
  Sandbox("ws1")->state = "running";
  Session theirs = Make("instance-theirs");
  std::string foreign = *Inspect(theirs, "ws1");
  EXPECT_NE(foreign.find("owned by another Paseo instance"), std::string::npos) << foreign;
}

TEST_F(LifecycleTest, PauseResumeDestroyAreIdempotentAndOwnerChecked) {
  Session s = Make();
  EXPECT_EQ(Pause(s, "ws1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(Resume(s, "ws1").ok());
  EXPECT_EQ(*Destroy(s, "ws1"), OkResponse());
  ASSERT_TRUE(Create(s, "ws1", DirectoryRequest("ws1", "/src")).ok());
  Session theirs = Make("instance-theirs");
  EXPECT_FALSE(Pause(theirs, "ws1").ok());
  EXPECT_FALSE(Resume(theirs, "ws1").ok());
  EXPECT_FALSE(Destroy(theirs, "ws1").ok());
  EXPECT_FALSE(Sandbox("ws1")->paused);

  EXPECT_EQ(*Pause(s, "ws1"), OkResponse());
  EXPECT_EQ(*Pause(s, "ws1"), OkResponse());
  EXPECT_TRUE(Sandbox("ws1")->paused);
  EXPECT_EQ(*Resume(s, "ws1"), StateResponse("ws1", Lifecycle::kReady, "/workspace", std::nullopt));
  EXPECT_EQ(*Resume(s, "ws1"), StateResponse("ws1", Lifecycle::kReady, "/workspace", std::nullopt));
  EXPECT_FALSE(Sandbox("ws1")->paused);
  client::FakeSandbox* sb = Sandbox("ws1");
  EXPECT_EQ(*Destroy(s, "ws1"), OkResponse());
  EXPECT_TRUE(sb->deleted);
  EXPECT_EQ(sb->delete_force, true);
  EXPECT_EQ(*Destroy(s, "ws1"), OkResponse());
  EXPECT_EQ(*Inspect(s, "ws1"), InspectionMissing());
}

TEST_F(LifecycleTest, ReconcileRemovesOwnOrphansAndRefusesForeignOnes) {
  Session s = Make();
  Session theirs = Make("instance-theirs");
  ASSERT_TRUE(Create(s, "keep", DirectoryRequest("keep", "/a")).ok());
  ASSERT_TRUE(Create(s, "orphan", DirectoryRequest("orphan", "/b")).ok());
  ASSERT_TRUE(Create(theirs, "theirs", DirectoryRequest("theirs", "/c", "instance-theirs")).ok());
  client::FakeSandbox* orphan = Sandbox("orphan");

  LifecycleRequest claim;
  claim.runtime_instance_id = kMine;
  claim.workspace_ids = std::vector<std::string>{"keep", "theirs"};
  auto refused = Reconcile(s, claim);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("theirs"), std::string::npos);
  EXPECT_FALSE(orphan->deleted);  // nothing changed

  LifecycleRequest request;
  request.runtime_instance_id = kMine;
  request.workspace_ids = std::vector<std::string>{"keep"};
  EXPECT_EQ(*Reconcile(s, request), OkResponse());
  EXPECT_TRUE(orphan->deleted);
  EXPECT_NE(Sandbox("keep"), nullptr);
  EXPECT_NE(Sandbox("theirs"), nullptr);  // not ours, not listed: left alone

  LifecycleRequest no_ids;
  no_ids.runtime_instance_id = kMine;
  EXPECT_FALSE(Reconcile(s, no_ids).ok());
  EXPECT_NE(Sandbox("keep"), nullptr);
}

TEST_F(LifecycleTest, DeploymentComesFromOptionsOrTheOnlyOneAllowed) {
  Options options;
  EXPECT_EQ(*ResolveDeployment(io_.waitScope, conn_.supervisor(), options), "alpha");
  service_.deployments = {"alpha", "beta"};
  auto several = ResolveDeployment(io_.waitScope, conn_.supervisor(), options);
  EXPECT_FALSE(several.ok());
  EXPECT_NE(several.status().message().find("alpha, beta"), std::string::npos);
  service_.deployments = {};
  EXPECT_FALSE(ResolveDeployment(io_.waitScope, conn_.supervisor(), options).ok());
  options.deployment = "beta";
  EXPECT_EQ(*ResolveDeployment(io_.waitScope, conn_.supervisor(), options), "beta");
}

// The Docker image's environment names the deployment; options.deployment still wins.
TEST_F(LifecycleTest, DeploymentComesFromTheEnvironmentWhenOptionsNameNone) {
  service_.deployments = {"alpha", "beta"};
  setenv("PASEO_SANDBOX_DEPLOYMENT", "beta", 1);
  Options options;
  auto from_env = ResolveDeployment(io_.waitScope, conn_.supervisor(), options);
  options.deployment = "alpha";
  auto from_options = ResolveDeployment(io_.waitScope, conn_.supervisor(), options);
  unsetenv("PASEO_SANDBOX_DEPLOYMENT");
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(*from_env, "beta");
  ASSERT_TRUE(from_options.ok()) << from_options.status();
  EXPECT_EQ(*from_options, "alpha");
}

TEST_F(LifecycleTest, SignalFindsTheExecByKey) {
  Session s = Make();
  ASSERT_TRUE(Create(s, "ws1", DirectoryRequest("ws1", "/src")).ok());
  client::FakeSandbox* sb = Sandbox("ws1");
  EXPECT_EQ(SignalExec(s, "ws1", "nope", "SIGKILL").code(), absl::StatusCode::kNotFound);

  client::FakeProcessScript ended;  // exited 0 already
  service_.AddProcess(sb->id, "p-ended", ended).key = "exec-ended";
  EXPECT_TRUE(SignalExec(s, "ws1", "exec-ended", "SIGKILL").ok());
  EXPECT_TRUE(sb->processes.at("p-ended").signals.empty());

  auto& released = service_.AddProcess(sb->id, "p-released", ended);
  released.key = "exec-released";
  released.released = true;
  EXPECT_TRUE(SignalExec(s, "ws1", "exec-released", "SIGKILL").ok());

  client::FakeProcessScript running;
  running.echo_input = true;  // runs until its input closes; ignores signals
  service_.AddProcess(sb->id, "p-running", running).key = "exec-running";
  absl::Status stuck = SignalExec(s, "ws1", "exec-running", "SIGTERM");
  EXPECT_EQ(stuck.code(), absl::StatusCode::kDeadlineExceeded) << stuck;
  EXPECT_EQ(sb->processes.at("p-running").signals, std::vector<int>{SIGTERM});

  // Just started: the service refuses signals until runsc reports the pid; they are retried.
  client::FakeProcessScript starting = running;
  starting.signals_while_starting = 3;
  service_.AddProcess(sb->id, "p-starting", starting).key = "exec-starting";
  SignalExec(s, "ws1", "exec-starting", "SIGTERM").IgnoreError();  // the fake ignores it
  EXPECT_EQ(sb->processes.at("p-starting").refused_signals, 3);
  EXPECT_EQ(sb->processes.at("p-starting").signals, std::vector<int>{SIGTERM});

  Session theirs = Make("instance-theirs");
  EXPECT_FALSE(SignalExec(theirs, "ws1", "exec-running", "SIGKILL").ok());
  EXPECT_EQ(sb->processes.at("p-running").signals.size(), 1u);
}

}  // namespace
}  // namespace paseo::runtime

namespace paseo::runtime {
namespace {

// Issue 26: the daemon merges inspect's lifecycleEnvironment over every workload's env, so
// agents it starts find the tool directories (the helper) and learn what is kept; the
// envelope's own env stays exactly what it is.
TEST(LifecycleEnvironmentTest, NamesTheToolPathAndTheKeptSetOnlyWhenThereAreAny) {
  Found none{api::Sandbox::Client(nullptr), "sb", "running", "", {}, {}, {}, {}, {}, {}, 0};
  EXPECT_TRUE(LifecycleEnvironment(none).empty());
  Found full{api::Sandbox::Client(nullptr), "sb", "running", "", {}, {"/opt/paseo/bin"},
             {"/workspace", "/home/agent/.claude"}, {}, {}, {}, 0};
  auto env = LifecycleEnvironment(full);
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0].first, "PATH");
  EXPECT_EQ(env[0].second, "/opt/paseo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  EXPECT_EQ(env[1], (std::pair<std::string, std::string>{"PASEO_SANDBOX_KEPT",
                                                          "/workspace:/home/agent/.claude"}));
}

}  // namespace
}  // namespace paseo::runtime
