// The contract's messages: every example of examples/v1.json (Paseo's byte examples, locked
// here byte for byte) and every malformed variation we could think of.
#include "runtime/protocol.h"

#include <csignal>

#include <gtest/gtest.h>

#include "absl/strings/str_replace.h"

namespace paseo::runtime {
namespace {

// examples/v1.json "bytes", without their trailing newline.
constexpr char kInstance[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kLifecycleRequest =
    R"({"protocolVersion":1,"runtimeInstanceId":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","input":{"workspaceId":"workspace-01","project":{"projectId":"project-01","source":{"kind":"git","url":"https://example.test/acme/project.git","revision":"main","subdirectory":"packages/app"}},"placement":{"kind":"existing"},"purpose":"discovery"},"options":{}})";
const std::string kPipeSpawn =
    R"({"type":"spawn","protocolVersion":1,"runtimeInstanceId":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","argv":["/bin/sh","-c","printf hello"],"cwd":"packages/app","env":{"PATH":"/usr/bin:/bin"},"purpose":{"kind":"workspace-script"},"options":{},"execId":"exec-pipe-01","stdio":{"kind":"pipes"}})";
const std::string kPtySpawn =
    R"({"type":"spawn","protocolVersion":1,"runtimeInstanceId":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","argv":["/bin/sh","-c","printf hello"],"cwd":"packages/app","env":{"PATH":"/usr/bin:/bin"},"purpose":{"kind":"workspace-script"},"options":{},"execId":"exec-pty-01","stdio":{"kind":"pty","rows":24,"cols":80,"term":"xterm-256color"}})";
const std::string kResize = R"({"type":"resize","protocolVersion":1,"id":1,"rows":40,"cols":120})";
const std::string kSignal = R"({"type":"signal","protocolVersion":1,"signal":"SIGTERM"})";

// `text` with `from` replaced by `to` exactly once (the test's own check).
std::string Edit(const std::string& text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << from;
  std::string out = text;
  out.replace(at, from.size(), to);
  return out;
}

TEST(ProtocolOutput, MatchesTheContractExamplesByteForByte) {
  EXPECT_EQ(DescribeResponse(), "{\"protocolVersion\":1,\"modes\":[\"pipes\",\"pty\"],\"reconcile\":true}\n");
  EXPECT_EQ(StateResponse("workspace-01", Lifecycle::kReady, "/workspace", true),
            "{\"type\":\"state\",\"protocolVersion\":1,\"state\":{\"workspaceId\":\"workspace-01\",\"lifecycle\":\"ready\"},\"placement\":{\"cwd\":\"/workspace\"},\"materializedFreshContent\":true}\n");
  EXPECT_EQ(StartedEvent(), "{\"type\":\"started\",\"protocolVersion\":1}\n");
  EXPECT_EQ(EofEvent(), "{\"type\":\"eof\",\"protocolVersion\":1}\n");
  EXPECT_EQ(ResizedEvent(1), "{\"type\":\"resized\",\"protocolVersion\":1,\"id\":1}\n");
  EXPECT_EQ(ExitEvent(0, std::nullopt),
            "{\"type\":\"exit\",\"protocolVersion\":1,\"code\":0,\"signal\":null}\n");
  EXPECT_EQ(ErrorEvent("runtime control failed"),
            "{\"type\":\"error\",\"protocolVersion\":1,\"message\":\"runtime control failed\"}\n");
}

TEST(ProtocolOutput, OtherResponsesFollowTheSchemaOrder) {
  EXPECT_EQ(StateResponse("w", Lifecycle::kPaused, "/workspace", std::nullopt),
            R"({"type":"state","protocolVersion":1,"state":{"workspaceId":"w","lifecycle":"paused"},"placement":{"cwd":"/workspace"}})" "\n");
  EXPECT_EQ(InspectionMissing(),
            R"({"type":"inspection","protocolVersion":1,"inspection":{"status":"missing"}})" "\n");
  EXPECT_EQ(InspectionState("w", Lifecycle::kReady, "/workspace"),
            R"({"type":"inspection","protocolVersion":1,"inspection":{"status":"ready","state":{"workspaceId":"w","lifecycle":"ready"},"placement":{"cwd":"/workspace"}}})" "\n");
  EXPECT_EQ(InspectionError("gone \"x\"\n"),
            R"({"type":"inspection","protocolVersion":1,"inspection":{"status":"error","message":"gone \"x\"\n"}})" "\n");
  EXPECT_EQ(OkResponse(), R"({"type":"ok","protocolVersion":1})" "\n");
  EXPECT_EQ(ExitEvent(std::nullopt, "SIGTERM"),
            R"({"type":"exit","protocolVersion":1,"code":null,"signal":"SIGTERM"})" "\n");
  // JSON.stringify's escapes.
  EXPECT_EQ(ErrorEvent(std::string("\b\f\x01\x7f", 4)),
            "{\"type\":\"error\",\"protocolVersion\":1,\"message\":\"\\b\\f\\u0001\x7f\"}\n");
}

TEST(LifecycleRequest, ParsesTheExample) {
  auto r = ParseLifecycleRequest(kLifecycleRequest);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->runtime_instance_id, kInstance);
  ASSERT_TRUE(r->input.has_value());
  EXPECT_EQ(r->input->workspace_id, "workspace-01");
  EXPECT_EQ(r->input->project_id, "project-01");
  ASSERT_TRUE(std::holds_alternative<GitSource>(r->input->source));
  EXPECT_EQ(std::get<GitSource>(r->input->source).subdirectory, "packages/app");
  EXPECT_EQ(r->input->placement_kind, "existing");
  EXPECT_TRUE(r->input->discovery);
  EXPECT_FALSE(r->workspace_ids.has_value());
}

TEST(LifecycleRequest, ParsesDirectorySourcesOptionsAndWorkspaceIds) {
  auto r = ParseLifecycleRequest(
      R"({"protocolVersion":1,"runtimeInstanceId":"i","input":{"workspaceId":"w","project":{"projectId":"p","source":{"kind":"directory","path":"/src/a"}},"placement":{"kind":"branch","branchName":"b","baseRef":"main","worktreeSlug":"s"},"markFirstAgentBranchAutoName":true,"seedPaseoConfigFrom":"x"},"options":{"socket":"/s","deployment":"d","profile":"p","credentials":["claude"],"reconnectMs":5000},"workspaceIds":["a","b"]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(std::get<DirectorySource>(r->input->source).path, "/src/a");
  EXPECT_FALSE(r->input->discovery);
  EXPECT_EQ(r->options.socket, "/s");
  EXPECT_EQ(r->options.deployment, "d");
  EXPECT_EQ(r->options.profile, "p");
  EXPECT_EQ(r->options.credentials, std::vector<std::string>{"claude"});
  EXPECT_EQ(r->options.reconnect_ms, 5000);
  EXPECT_EQ(r->workspace_ids, (std::vector<std::string>{"a", "b"}));
}

TEST(LifecycleRequest, AcceptsEveryPlacementKind) {
  for (const char* placement : {
           R"({"kind":"existing","relativeCwd":"a"})",
           R"({"kind":"checkout","ref":"r","relativeCwd":"a","worktreeSlug":"s"})",
           R"({"kind":"resolved-worktree","worktreeSlug":"s","source":{"kind":"branch-off","baseBranch":"m","branchName":"b"}})",
           R"({"kind":"resolved-worktree","worktreeSlug":"s","source":{"kind":"checkout-branch","branchName":"b"}})",
           R"({"kind":"resolved-worktree","worktreeSlug":"s","source":{"kind":"checkout-github-pr","githubPrNumber":3,"headRef":"h","baseRefName":"m","checkoutRefs":[{"remoteRef":"r","remoteName":"o"}],"trackOriginHead":false}})",
       }) {
    std::string text = Edit(kLifecycleRequest, R"("placement":{"kind":"existing"})",
                            std::string("\"placement\":") + placement);
    EXPECT_TRUE(ParseLifecycleRequest(text).ok()) << placement << ParseLifecycleRequest(text).status();
  }
}

struct Bad {
  std::string from, to, error;
};

TEST(LifecycleRequest, RefusesEveryMalformedVariation) {
  const std::vector<Bad> cases = {
      {R"("protocolVersion":1)", R"("protocolVersion":2)", "unsupported command runtime protocol version 2"},
      {R"("protocolVersion":1)", R"("protocolVersion":"1")", "unsupported command runtime protocol version \"1\""},
      {R"("protocolVersion":1,)", "", "request.protocolVersion: required"},
      {R"("options":{})", R"("options":{},"extra":1)", "request: unknown key \"extra\""},
      {R"("options":{})", R"("options":{},"options":{})", "duplicate key \"options\""},
      {R"(,"options":{})", "", "request.options: required"},
      {R"("options":{})", R"("options":{"image":"x"})", "request.options: unknown key \"image\""},
      {R"("options":{})", R"("options":{"socket":1})", "request.options.socket: expected a string"},
      {R"("options":{})", R"("options":{"credentials":"claude"})", "expected an array"},
      {R"("options":{})", R"("options":{"credentials":[1]})", "credentials[0]: expected a string"},
      {R"("options":{})", R"("options":{"reconnectMs":1.5})", "expected an integer"},
      {R"("options":{})", R"("options":[])", "request.options: expected an object"},
      {R"("runtimeInstanceId":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")", R"("runtimeInstanceId":"")", "must not be empty"},
      {R"("runtimeInstanceId":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")", R"("runtimeInstanceId":7)", "expected a string"},
      {R"("workspaceId":"workspace-01")", R"("workspaceId":"workspace-01","x":null)", "request.input: unknown key \"x\""},
      {R"("workspaceId":"workspace-01",)", "", "request.input.workspaceId: required"},
      {R"("projectId":"project-01")", R"("projectId":"project-01","name":"n")", "request.input.project: unknown key \"name\""},
      {R"("subdirectory":"packages/app")", R"("subdirectory":"packages/app","depth":1)", "request.input.project.source: unknown key \"depth\""},
      {R"("revision":"main",)", "", "request.input.project.source.revision: required"},
      {R"("kind":"git")", R"("kind":"svn")", "request.input.project.source.kind: unknown value \"svn\""},
      {R"("kind":"git",)", "", "request.input.project.source.kind: required"},
      {R"({"kind":"existing"})", R"({"kind":"existing","x":1})", "request.input.placement: unknown key \"x\""},
      {R"({"kind":"existing"})", R"({"kind":"branch","branchName":"b"})", "baseRef: required"},
      {R"({"kind":"existing"})", R"({"kind":"resolved-worktree","worktreeSlug":"s","source":{"kind":"checkout-branch","branchName":"b","x":1}})", "placement.source: unknown key \"x\""},
      {R"({"kind":"existing"})", R"({"kind":"resolved-worktree","worktreeSlug":"s","source":{"kind":"checkout-github-pr","headRef":"h","baseRefName":"m","checkoutRefs":[{"remoteRef":"r","y":1}]}})", "checkoutRefs[0]: unknown key \"y\""},
      {R"({"kind":"existing"})", R"({"kind":"resolved-worktree","worktreeSlug":"s","source":{"kind":"checkout-github-pr","headRef":"h","baseRefName":"m","githubPrNumber":"3"}})", "githubPrNumber: expected a number"},
      {R"("purpose":"discovery")", R"("purpose":"probe")", "request.input.purpose: unknown value \"probe\""},
      {R"("purpose":"discovery")", R"("purpose":"discovery","markFirstAgentBranchAutoName":"yes")", "expected a boolean"},
      {R"("options":{})", R"("options":{},"workspaceIds":"a")", "request.workspaceIds: expected an array"},
      {R"("options":{})", R"("options":{},"workspaceIds":[null])", "workspaceIds[0]: expected a string"},
      {R"("workspace-01")", R"("w\u0000x")", "contains a NUL character"},
  };
  for (const auto& c : cases) {
    auto r = ParseLifecycleRequest(Edit(kLifecycleRequest, c.from, c.to));
    ASSERT_FALSE(r.ok()) << c.to;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << c.to << " -> " << r.status().message();
  }
}

TEST(LifecycleRequest, RefusesWhatIsNotOneJsonObject) {
  for (const std::string& text : {std::string(""), std::string("[]"), std::string("null"),
                                 std::string("{"), kLifecycleRequest + "{}",
                                 kLifecycleRequest + " x", std::string("{\"a\":\xff}")}) {
    EXPECT_FALSE(ParseLifecycleRequest(text).ok()) << text;
  }
  // The version diagnostic wins over an unknown field a newer Paseo might add.
  auto r = ParseLifecycleRequest(R"({"protocolVersion":2,"runtimeInstanceId":"i","options":{},"newField":1})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("protocol version 2"), std::string::npos) << r.status();
}

TEST(SpawnEnvelope, ParsesBothExamples) {
  auto pipes = ParseSpawnEnvelope(kPipeSpawn);
  ASSERT_TRUE(pipes.ok()) << pipes.status();
  EXPECT_EQ(pipes->argv, (std::vector<std::string>{"/bin/sh", "-c", "printf hello"}));
  EXPECT_EQ(pipes->cwd, "packages/app");
  EXPECT_EQ(pipes->env, (std::vector<std::pair<std::string, std::string>>{{"PATH", "/usr/bin:/bin"}}));
  EXPECT_EQ(pipes->purpose, "workspace-script");
  EXPECT_EQ(pipes->exec_id, "exec-pipe-01");
  EXPECT_FALSE(pipes->pty.has_value());
  auto pty = ParseSpawnEnvelope(kPtySpawn);
  ASSERT_TRUE(pty.ok()) << pty.status();
  ASSERT_TRUE(pty->pty.has_value());
  EXPECT_EQ(pty->pty->rows, 24);
  EXPECT_EQ(pty->pty->cols, 80);
  EXPECT_EQ(pty->pty->term, "xterm-256color");
  // cwd is optional; 24.0 is the integer 24.
  auto no_cwd = ParseSpawnEnvelope(Edit(Edit(kPtySpawn, R"("cwd":"packages/app",)", ""),
                                        R"("rows":24)", R"("rows":24.0)"));
  ASSERT_TRUE(no_cwd.ok()) << no_cwd.status();
  EXPECT_FALSE(no_cwd->cwd.has_value());
}

TEST(SpawnEnvelope, RefusesEveryMalformedVariation) {
  const std::vector<Bad> cases = {
      {R"("type":"spawn")", R"("type":"resize")", "spawn.type: expected \"spawn\""},
      {R"("protocolVersion":1)", R"("protocolVersion":0)", "unsupported command runtime protocol version 0"},
      {R"("argv":["/bin/sh","-c","printf hello"])", R"("argv":[])", "spawn.argv: must not be empty"},
      {R"("argv":["/bin/sh","-c","printf hello"])", R"("argv":"/bin/sh")", "spawn.argv: expected an array"},
      {R"("argv":["/bin/sh","-c","printf hello"])", R"("argv":["/bin/sh",1])", "spawn.argv[1]: expected a string"},
      {R"("env":{"PATH":"/usr/bin:/bin"})", R"("env":{"PATH":"/usr/bin:/bin","PATH":"/x"})", "spawn.env: duplicate key \"PATH\""},
      {R"("env":{"PATH":"/usr/bin:/bin"})", R"("env":{"PATH":1})", "spawn.env.PATH: expected a string"},
      {R"("env":{"PATH":"/usr/bin:/bin"})", R"("env":{"A=B":"c"})", "invalid variable name"},
      {R"("env":{"PATH":"/usr/bin:/bin"})", R"("env":["PATH=/bin"])", "spawn.env: expected an object"},
      {R"("env":{"PATH":"/usr/bin:/bin"},)", "", "spawn.env: required"},
      {R"("cwd":"packages/app")", R"("cwd":null)", "spawn.cwd: expected a string"},
      {R"({"kind":"workspace-script"})", R"({"kind":"workspace-script","x":1})", "spawn.purpose: unknown key \"x\""},
      {R"({"kind":"workspace-script"})", R"({"kind":"provider-probe"})", "unknown value \"provider-probe\""},
      {R"("options":{})", R"("options":{"x":1})", "spawn.options: unknown key \"x\""},
      {R"("execId":"exec-pty-01")", R"("execId":"")", "spawn.execId: must not be empty"},
      {R"("rows":24)", R"("rows":0)", "spawn.stdio.rows: must be at least 1"},
      {R"("rows":24)", R"("rows":24.5)", "spawn.stdio.rows: expected an integer"},
      {R"("rows":24)", R"("rows":"24")", "spawn.stdio.rows: expected an integer"},
      {R"("cols":80,)", "", "spawn.stdio.cols: required"},
      {R"("term":"xterm-256color")", R"("term":"xterm","echo":true)", "spawn.stdio: unknown key \"echo\""},
      {R"("kind":"pty")", R"("kind":"tty")", "spawn.stdio.kind: unknown value \"tty\""},
      {R"("options":{})", R"("options":{},"stdin":"x")", "spawn: unknown key \"stdin\""},
  };
  for (const auto& c : cases) {
    auto r = ParseSpawnEnvelope(Edit(kPtySpawn, c.from, c.to));
    ASSERT_FALSE(r.ok()) << c.to;
    EXPECT_NE(r.status().message().find(c.error), std::string::npos)
        << c.to << " -> " << r.status().message();
  }
  auto pipes_with_rows = ParseSpawnEnvelope(Edit(kPipeSpawn, R"({"kind":"pipes"})", R"({"kind":"pipes","rows":1})"));
  EXPECT_FALSE(pipes_with_rows.ok());
}

TEST(Control, ParsesResizeAndSignal) {
  auto resize = ParseControl(kResize);
  ASSERT_TRUE(resize.ok()) << resize.status();
  auto r = std::get<ResizeControl>(*resize);
  EXPECT_EQ(r.id, 1);
  EXPECT_EQ(r.rows, 40);
  EXPECT_EQ(r.cols, 120);
  auto signal = ParseControl(kSignal);
  ASSERT_TRUE(signal.ok()) << signal.status();
  EXPECT_EQ(std::get<SignalControl>(*signal).signal, "SIGTERM");
  EXPECT_TRUE(ParseControl(Edit(kResize, R"("id":1)", R"("id":0)")).ok());
}

TEST(Control, RefusesEveryMalformedFrame) {
  const std::vector<std::string> bad = {
      Edit(kResize, R"("id":1)", R"("id":-1)"),
      Edit(kResize, R"("id":1)", R"("id":1.5)"),
      Edit(kResize, R"("rows":40)", R"("rows":0)"),
      Edit(kResize, R"("cols":120)", R"("cols":"120")"),
      Edit(kResize, R"("cols":120)", R"("cols":120,"x":1)"),
      Edit(kResize, R"("protocolVersion":1)", R"("protocolVersion":2)"),
      Edit(kResize, R"("id":1,)", ""),
      Edit(kSignal, R"("SIGTERM")", R"("TERM")"),
      Edit(kSignal, R"("SIGTERM")", R"(15)"),
      Edit(kSignal, R"("type":"signal")", R"("type":"kill")"),
      kPipeSpawn,
      "{}",
      "not json",
  };
  for (const auto& text : bad) EXPECT_FALSE(ParseControl(text).ok()) << text;
}

TEST(Signals, NamesAndNumbersRoundTrip) {
  EXPECT_EQ(SignalNumber("SIGTERM"), SIGTERM);
  EXPECT_EQ(SignalNumber("SIGKILL"), SIGKILL);
  EXPECT_EQ(SignalNumber("sigterm"), 0);
  EXPECT_EQ(SignalNumber("SIGRTMIN"), 0);
  EXPECT_EQ(SignalName(SIGINT), "SIGINT");
  EXPECT_EQ(SignalName(SIGABRT), "SIGABRT");
  EXPECT_EQ(SignalName(99), "");
}

}  // namespace
}  // namespace paseo::runtime

namespace paseo::runtime {
namespace {

// Protocol version 2 (rkendel1/paseo-feltdb 4bb9a9b5, examples/v2.json): every message carries
// 2, describe adds requirements, and each version refuses the other's messages.
class Version2 : public ::testing::Test {
 protected:
  void SetUp() override { UseProtocolVersion(2); }
  void TearDown() override { UseProtocolVersion(1); }
  static std::string V2(const std::string& v1) {
    std::string out = v1;
    for (size_t at; (at = out.find("\"protocolVersion\":1")) != std::string::npos;)
      out.replace(at, 19, "\"protocolVersion\":2");
    return out;
  }
};

TEST_F(Version2, MatchesTheV2ExamplesByteForByte) {
  EXPECT_EQ(DescribeResponse(),
            R"({"protocolVersion":2,"modes":["pipes","pty"],"reconcile":true,"requirements":{"daemonAuthentication":false}})"
            "\n");
  EXPECT_EQ(StateResponse("workspace-01", Lifecycle::kReady, "/workspace", true),
            R"({"type":"state","protocolVersion":2,"state":{"workspaceId":"workspace-01","lifecycle":"ready"},"placement":{"cwd":"/workspace"},"materializedFreshContent":true})"
            "\n");
  EXPECT_EQ(StartedEvent(), R"({"type":"started","protocolVersion":2})" "\n");
  EXPECT_EQ(EofEvent(), R"({"type":"eof","protocolVersion":2})" "\n");
  EXPECT_EQ(ResizedEvent(1), R"({"type":"resized","protocolVersion":2,"id":1})" "\n");
  EXPECT_EQ(ExitEvent(0, std::nullopt), R"({"type":"exit","protocolVersion":2,"code":0,"signal":null})" "\n");
  EXPECT_EQ(OkResponse(), R"({"type":"ok","protocolVersion":2})" "\n");
  // Never a hostVisiblePath: the daemon would run git on that host path, outside the sandbox.
  EXPECT_EQ(InspectionState("w", Lifecycle::kReady, "/workspace"),
            R"({"type":"inspection","protocolVersion":2,"inspection":{"status":"ready","state":{"workspaceId":"w","lifecycle":"ready"},"placement":{"cwd":"/workspace"}}})"
            "\n");
}

TEST_F(Version2, ReadsV2MessagesAndRefusesV1s) {
  EXPECT_TRUE(ParseLifecycleRequest(V2(kLifecycleRequest)).ok());
  EXPECT_TRUE(ParseSpawnEnvelope(V2(kPipeSpawn)).ok());
  EXPECT_TRUE(ParseSpawnEnvelope(V2(kPtySpawn)).ok());
  EXPECT_TRUE(ParseControl(V2(kResize)).ok());
  EXPECT_TRUE(ParseControl(V2(kSignal)).ok());
  for (const std::string& v1 : {kLifecycleRequest, kPipeSpawn, kResize, kSignal}) {
    absl::Status st = v1 == kLifecycleRequest ? ParseLifecycleRequest(v1).status()
                      : v1 == kPipeSpawn      ? ParseSpawnEnvelope(v1).status()
                                              : ParseControl(v1).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << v1;
    EXPECT_NE(st.message().find("unsupported command runtime protocol version 1"),
              std::string::npos)
        << st;
  }
}

TEST(Version1, RefusesV2MessagesAndWritesNoRequirements) {
  UseProtocolVersion(1);
  std::string v2 = kLifecycleRequest;
  v2.replace(v2.find("\"protocolVersion\":1"), 19, "\"protocolVersion\":2");
  EXPECT_EQ(ParseLifecycleRequest(v2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DescribeResponse().find("requirements"), std::string::npos);
}

TEST(LifecycleEnvironment, IsWrittenInTheStateWhenThereIsOne) {
  EXPECT_EQ(InspectionState("w", Lifecycle::kReady, "/workspace", {{"PATH", "/opt/paseo/bin:/bin"}}),
            R"({"type":"inspection","protocolVersion":1,"inspection":{"status":"ready","state":{"workspaceId":"w","lifecycle":"ready","lifecycleEnvironment":{"PATH":"/opt/paseo/bin:/bin"}},"placement":{"cwd":"/workspace"}}})"
            "\n");
}

}  // namespace
}  // namespace paseo::runtime
