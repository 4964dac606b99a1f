// The privhelper's re-validation of broker requests, fed the requests a compromised broker
// could send: each must be refused with a clear error, independent of the broker's checks.
#include "privhelper/request_validation.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <capnp/message.h>
#include <capnp/schema.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

class RequestValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string templ = std::string(tmp ? tmp : "/tmp") + "/rv.XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
    mkdir((dir_ + "/deployments").c_str(), 0755);
    mkdir((dir_ + "/profiles").c_str(), 0755);
    Write("helper.json", R"({"runsc": {"sha256": ")" + std::string(64, 'a') +
                             R"("}, "rootfsVersion": "v1"})");
    Write("profiles/default.json",
          R"({"name": "default",
              "credentials": [{"name": "claude", "destination": "/home/a/.claude"},
                              {"name": "over", "destination": "/workspace/x"}]})");
    Write("profiles/big.json", R"({"name": "big"})");
    Write("profiles/tooled.json",
          R"({"name": "tooled", "tools": [{"name": "helper", "destination": "/opt/paseo/bin"},
                                          {"name": "node", "destination": "/opt/node/bin"}]})");
    Write("deployments/a.json",
          R"({"id": "alpha", "allowedUids": [1000], "workspaceRoots": [{"hostPath": "/srv/a"}],
              "profiles": ["default", "tooled"],
              "toolRoots": [{"name": "node", "clientPath": "/srv/a/node"},
                            {"name": "helper", "hostPath": "/srv/tools/helper"}],
              "credentialRoots": [{"name": "claude", "hostPath": "/srv/cred/claude"},
                                  {"name": "over", "hostPath": "/srv/cred/over"},
                                  {"name": "unplaced", "hostPath": "/srv/cred/u"}]})");
    Write("deployments/b.json",
          R"({"id": "beta", "allowedUids": [2000], "workspaceRoots": [{"hostPath": "/srv/b"}],
              "profiles": ["big"]})");
    Write("deployments/t.json",
          R"({"id": "team", "allowedGids": [27], "workspaceRoots": [{"hostPath": "/srv/t"}]})");
    auto config = LoadConfig(dir_);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = std::move(*config);
  }

  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
  }

  // A valid create request, changed by `edit`.
  absl::StatusOr<ValidatedCreate> Create(
      const std::function<void(helper::CreateSandboxRequest::Builder)>& edit) {
    capnp::MallocMessageBuilder m;
    auto params = m.initRoot<helper::Helper::CreateSandboxParams>();
    auto r = params.initRequest();
    r.setSandboxId("sb-0123456789abcdef01234567");
    r.setDeploymentId("alpha");
    r.setPeerUid(1000);
    auto gids = r.initPeerGids(2);
    gids.set(0, 1000);
    gids.set(1, 27);
    auto ws = r.initWorkspaces(1);
    ws[0].setPath("/srv/a/project");
    ws[0].setDestination("/workspace");
    ws[0].setMode(api::AccessMode::READ_WRITE);
    edit(r);
    return ValidateCreate(*config_, params.asReader());
  }

  absl::StatusOr<ValidatedStart> Start(
      const std::function<void(helper::StartProcessRequest::Builder)>& edit) {
    capnp::MallocMessageBuilder m;
    auto params = m.initRoot<helper::Helper::StartProcessParams>();
    auto r = params.initRequest();
    r.setSandboxId("sb-0123456789abcdef01234567");
    r.setProcessId("p-0123456789abcdef01234567");
    auto argv = r.initArgv(2);
    argv.set(0, "echo");
    argv.set(1, "hi");
    edit(r);
    return ValidateStart(params.asReader());
  }

  std::string dir_;
  std::unique_ptr<Config> config_;
};

TEST_F(RequestValidationTest, AcceptsAWellFormedCreate) {
  auto v = Create([](auto) {});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->sandbox_id, "sb-0123456789abcdef01234567");
  EXPECT_EQ(std::string(v->deployment->getId().cStr()), "alpha");
  EXPECT_EQ(std::string(v->profile->getName().cStr()), "default");
  ASSERT_EQ(v->mounts.size(), 1u);
  EXPECT_FALSE(v->mounts[0].read_only);
  EXPECT_EQ(v->mounts[0].destination, "/workspace");
  EXPECT_EQ(v->peer.uid, 1000u);
  EXPECT_EQ(v->peer.gids, (std::vector<gid_t>{1000, 27}));
}

// A deployment that allows a group takes any uid holding it, and the claimed gids are the
// ones the workspace check then uses.
TEST_F(RequestValidationTest, APeerAllowedThroughAGroupIsAccepted) {
  auto v = Create([](auto r) {
    r.setDeploymentId("team");
    r.setPeerUid(5555);
    r.getWorkspaces()[0].setPath("/srv/t/x");
  });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->peer.uid, 5555u);
  EXPECT_TRUE(v->peer.InGroup(27));
}

// A project beneath the home is where many agents expect it; the home is mounted first.
TEST_F(RequestValidationTest, AWorkspaceBeneathTheHomeIsAccepted) {
  auto v = Create([](auto r) { r.getWorkspaces()[0].setDestination("/home/agent/project"); });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->mounts[0].destination, "/home/agent/project");
}

TEST_F(RequestValidationTest, EmptyDestinationMeansWorkspaceAndModeDefaultsToReadOnly) {
  auto v = Create([](auto r) {
    r.getWorkspaces()[0].setDestination("");
    r.getWorkspaces()[0].setMode(api::AccessMode::READ_ONLY);
  });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->mounts[0].destination, "/workspace");
  EXPECT_TRUE(v->mounts[0].read_only);
}

struct BadCreate {
  const char* name;
  std::function<void(helper::CreateSandboxRequest::Builder)> edit;
  absl::StatusCode code;
  const char* message_part;
};

TEST_F(RequestValidationTest, RefusesWhatACompromisedBrokerMightSend) {
  const std::vector<BadCreate> cases = {
      {"path-like sandbox id", [](auto r) { r.setSandboxId("../../etc"); },
       absl::StatusCode::kInvalidArgument, "sandboxId"},
      {"sandbox id with slash", [](auto r) { r.setSandboxId("a/b"); },
       absl::StatusCode::kInvalidArgument, "sandboxId"},
      {"empty sandbox id", [](auto r) { r.setSandboxId(""); }, absl::StatusCode::kInvalidArgument,
       "sandboxId"},
      {"unknown deployment", [](auto r) { r.setDeploymentId("gamma"); },
       absl::StatusCode::kPermissionDenied, "gamma"},
      {"profile the deployment may not use", [](auto r) { r.setProfile("big"); },
       absl::StatusCode::kPermissionDenied, "big"},
      {"nonexistent profile", [](auto r) { r.setProfile("nope"); },
       absl::StatusCode::kPermissionDenied, "nope"},
      {"relative workspace path", [](auto r) { r.getWorkspaces()[0].setPath("srv/a"); },
       absl::StatusCode::kInvalidArgument, "path"},
      // An empty workspace (a git source's) names no client path and is always read-write.
      {"empty workspace with a path", [](auto r) { r.getWorkspaces()[0].setEmpty(true); },
       absl::StatusCode::kInvalidArgument, "must be empty for an empty workspace"},
      {"read-only empty workspace",
       [](auto r) {
         r.getWorkspaces()[0].setEmpty(true);
         r.getWorkspaces()[0].setPath("");
         r.getWorkspaces()[0].setMode(api::AccessMode::READ_ONLY);
       },
       absl::StatusCode::kInvalidArgument, "an empty workspace is read-write"},
      {"workspace path longer than PATH_MAX",
       [](auto r) { r.getWorkspaces()[0].setPath("/" + std::string(5000, 'a')); },
       absl::StatusCode::kInvalidArgument, "PATH_MAX"},
      // One spelling per path (regression: "/srv/a/" was accepted and trimmed while
      // "/srv//a" was refused): the CLI normalizes, the API refuses anything else.
      {"workspace path with a trailing slash", [](auto r) { r.getWorkspaces()[0].setPath("/srv/a/"); },
       absl::StatusCode::kInvalidArgument, "normalized"},
      {"workspace path with //", [](auto r) { r.getWorkspaces()[0].setPath("/srv//a"); },
       absl::StatusCode::kInvalidArgument, "normalized"},
      {"workspace path with .", [](auto r) { r.getWorkspaces()[0].setPath("/srv/./a"); },
       absl::StatusCode::kInvalidArgument, "normalized"},
      {"workspace path with ..", [](auto r) { r.getWorkspaces()[0].setPath("/srv/a/../a"); },
       absl::StatusCode::kInvalidArgument, "normalized"},
      {"destination /", [](auto r) { r.getWorkspaces()[0].setDestination("/"); },
       absl::StatusCode::kInvalidArgument, "destination"},
      {"destination with ..", [](auto r) { r.getWorkspaces()[0].setDestination("/a/../etc"); },
       absl::StatusCode::kInvalidArgument, "destination"},
      {"destination relative", [](auto r) { r.getWorkspaces()[0].setDestination("workspace"); },
       absl::StatusCode::kInvalidArgument, "destination"},
      {"destination over /proc", [](auto r) { r.getWorkspaces()[0].setDestination("/proc/1"); },
       absl::StatusCode::kInvalidArgument, "/proc"},
      {"destination over /dev", [](auto r) { r.getWorkspaces()[0].setDestination("/dev"); },
       absl::StatusCode::kInvalidArgument, "/dev"},
      {"destination over /sys", [](auto r) { r.getWorkspaces()[0].setDestination("/sys/fs"); },
       absl::StatusCode::kInvalidArgument, "/sys"},
      {"destination over the shim", [](auto r) { r.getWorkspaces()[0].setDestination("/.paseo"); },
       absl::StatusCode::kInvalidArgument, "/.paseo"},
      {"destination beneath the shim",
       [](auto r) { r.getWorkspaces()[0].setDestination("/.paseo/shim"); },
       absl::StatusCode::kInvalidArgument, "/.paseo"},
      {"destination is the home", [](auto r) { r.getWorkspaces()[0].setDestination("/home/agent"); },
       absl::StatusCode::kInvalidArgument, "covers the sandbox's home /home/agent"},
      {"destination covers the home", [](auto r) { r.getWorkspaces()[0].setDestination("/home"); },
       absl::StatusCode::kInvalidArgument, "covers the sandbox's home"},
      {"overlapping destinations",
       [](auto r) {
         auto ws = r.initWorkspaces(2);
         ws[0].setPath("/srv/a/x");
         ws[0].setDestination("/w");
         ws[1].setPath("/srv/a/y");
         ws[1].setDestination("/w/inner");
       },
       absl::StatusCode::kInvalidArgument, "overlaps"},
      {"too many workspaces",
       [](auto r) {
         auto ws = r.initWorkspaces(kMaxMounts + 1);
         for (unsigned i = 0; i < ws.size(); ++i) {
           ws[i].setPath("/srv/a");
           ws[i].setDestination("/w" + std::to_string(i));
         }
       },
       absl::StatusCode::kInvalidArgument, "too many"},
      {"NUL in the deployment id",
       [](auto r) { r.setDeploymentId(capnp::Text::Reader("alpha\0x", 7)); },
       absl::StatusCode::kInvalidArgument, "deploymentId"},
      {"deployment id that is not UTF-8",
       [](auto r) { r.setDeploymentId("alpha\xff"); }, absl::StatusCode::kInvalidArgument,
       "UTF-8"},
      {"NUL in the profile (the part before it is allowed)",
       [](auto r) { r.setProfile(capnp::Text::Reader("default\0x", 9)); },
       absl::StatusCode::kInvalidArgument, "profile"},
      {"profile that is not UTF-8", [](auto r) { r.setProfile("def\xc3\x28"); },
       absl::StatusCode::kInvalidArgument, "UTF-8"},
      {"NUL in a credential name",
       [](auto r) { r.initCredentials(1).set(0, capnp::Text::Reader("claude\0x", 8)); },
       absl::StatusCode::kInvalidArgument, "credentials[0]"},
      {"credential name that is not UTF-8",
       [](auto r) { r.initCredentials(1).set(0, "claude\xff"); },
       absl::StatusCode::kInvalidArgument, "UTF-8"},
      {"credential name that is not an id", [](auto r) { r.initCredentials(1).set(0, "../x"); },
       absl::StatusCode::kInvalidArgument, "not a valid name"},
      {"credential the deployment does not have",
       [](auto r) { r.initCredentials(1).set(0, "ssh"); }, absl::StatusCode::kPermissionDenied,
       "has no credential"},
      {"credential the profile does not place",
       [](auto r) { r.initCredentials(1).set(0, "unplaced"); },
       absl::StatusCode::kPermissionDenied, "places no credential"},
      {"credential named twice",
       [](auto r) {
         auto c = r.initCredentials(2);
         c.set(0, "claude");
         c.set(1, "claude");
       },
       absl::StatusCode::kInvalidArgument, "named twice"},
      {"credential inside a workspace", [](auto r) { r.initCredentials(1).set(0, "over"); },
       absl::StatusCode::kInvalidArgument, "overlaps"},
      {"too many credentials",
       [](auto r) {
         auto c = r.initCredentials(kMaxCredentials + 1);
         for (unsigned i = 0; i < c.size(); ++i) c.set(i, "claude");
       },
       absl::StatusCode::kInvalidArgument, "too many"},
      // Regression (attack run item 1): the broker now names the client, so a compromised one
      // could name anybody; only an identity the deployment allows is accepted.
      {"peer uid the deployment does not allow", [](auto r) { r.setPeerUid(0); },
       absl::StatusCode::kPermissionDenied, "does not allow uid 0"},
      {"another deployment's peer uid", [](auto r) { r.setPeerUid(2000); },
       absl::StatusCode::kPermissionDenied, "does not allow uid 2000"},
      {"no peer at all (defaults)",
       [](auto r) {
         r.setPeerUid(0);
         r.initPeerGids(0);
       },
       absl::StatusCode::kPermissionDenied, "does not allow"},
      {"a group-allowed deployment, without its group",
       [](auto r) {
         r.setDeploymentId("team");
         r.setPeerUid(1000);
         r.initPeerGids(1).set(0, 1000);
         r.getWorkspaces()[0].setPath("/srv/t/x");
       },
       absl::StatusCode::kPermissionDenied, "does not allow uid 1000 (gids 1000)"},
      {"too many peer gids", [](auto r) { r.initPeerGids(kMaxPeerGids + 1); },
       absl::StatusCode::kInvalidArgument, "peerGids"},
      {"NUL in a workspace path",
       [](auto r) {
         // capnp Text may carry an embedded NUL; it must never reach a syscall.
         std::string p("/srv/a\0/etc", 11);
         r.getWorkspaces()[0].setPath(capnp::Text::Reader(p.data(), p.size()));
       },
       absl::StatusCode::kInvalidArgument, "NUL"},
  };
  for (const auto& c : cases) {
    auto v = Create(c.edit);
    ASSERT_FALSE(v.ok()) << c.name;
    EXPECT_EQ(v.status().code(), c.code) << c.name << ": " << v.status();
    EXPECT_TRUE(absl::StrContains(v.status().message(), c.message_part))
        << c.name << ": " << v.status();
  }
}

TEST_F(RequestValidationTest, AcceptsACredentialThePolicyAllows) {
  auto v = Create([](auto r) { r.initCredentials(1).set(0, "claude"); });
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->credentials.size(), 1u);
  EXPECT_EQ(v->credentials[0].host_path, "/srv/cred/claude");
  EXPECT_EQ(v->credentials[0].destination, "/home/a/.claude");
  EXPECT_TRUE(v->credentials[0].read_only);
}

TEST_F(RequestValidationTest, AcceptsAWellFormedStart) {
  auto v = Start([](auto r) {
    auto env = r.initEnv(1);
    env.set(0, "A=b=c");
    r.setCwd("/workspace/sub");
  });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->process.sandbox_id, "sb-0123456789abcdef01234567");
  EXPECT_EQ(v->process.process_id, "p-0123456789abcdef01234567");
  EXPECT_EQ(v->command.argv, (std::vector<std::string>{"echo", "hi"}));
  EXPECT_EQ(v->command.env, (std::vector<std::string>{"A=b=c"}));
  EXPECT_EQ(v->command.cwd, "/workspace/sub");
}

TEST_F(RequestValidationTest, AWorkspaceCwdIsNormalizedAndAnAbsentOneIsUnset) {
  auto v = Start([](auto r) { r.setWorkspaceCwd("./packages//app/"); });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->command.workspace_cwd, std::optional<std::string>("packages/app"));
  EXPECT_EQ(v->command.cwd, "");
  v = Start([](auto r) { r.setWorkspaceCwd("."); });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->command.workspace_cwd, std::optional<std::string>(""));  // the workspace itself
  v = Start([](auto) {});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->command.workspace_cwd.has_value());
}

TEST_F(RequestValidationTest, AProfilesToolsComeFromTheDeploymentsRootsInProfileOrder) {
  auto v = Create([](auto r) { r.setProfile("tooled"); });
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->tools.size(), 2u);
  EXPECT_EQ(v->tools[0].name, "helper");
  EXPECT_EQ(v->tools[0].destination, "/opt/paseo/bin");
  EXPECT_EQ(std::string(v->tools[0].root.getHostPath().cStr()), "/srv/tools/helper");
  EXPECT_EQ(v->tools[1].name, "node");
  EXPECT_EQ(v->tools[1].destination, "/opt/node/bin");
  EXPECT_EQ(std::string(v->tools[1].root.getClientPath().cStr()), "/srv/a/node");
  // A profile without tools gives none.
  v = Create([](auto) {});
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->tools.empty());
}

TEST_F(RequestValidationTest, AWorkspaceMayNotOverlapATool) {
  for (const char* destination : {"/opt/paseo/bin", "/opt/paseo", "/opt", "/opt/node/bin/x"}) {
    auto v = Create([destination](auto r) {
      r.setProfile("tooled");
      r.getWorkspaces()[0].setDestination(destination);
    });
    ASSERT_FALSE(v.ok()) << destination;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
    EXPECT_TRUE(absl::StrContains(v.status().message(), "workspaces[0].destination: overlaps"))
        << v.status();
  }
  EXPECT_TRUE(Create([](auto r) {
                r.setProfile("tooled");
                r.getWorkspaces()[0].setDestination("/opt/paseo-work");
              }).ok());
}

TEST_F(RequestValidationTest, AnEmptyWorkspaceIsAcceptedWithoutAPath) {
  auto v = Create([](auto r) {
    r.getWorkspaces()[0].setEmpty(true);
    r.getWorkspaces()[0].setPath("");
    r.getWorkspaces()[0].setMode(api::AccessMode::READ_WRITE);
  });
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->mounts.size(), 1u);
  EXPECT_TRUE(v->mounts[0].empty);
  EXPECT_FALSE(v->mounts[0].read_only);
  EXPECT_EQ(v->mounts[0].client_path, "");
}

TEST_F(RequestValidationTest, AcceptsATerminalWithItsSize) {
  auto v = Start([](auto r) {
    r.setTty(true);
    r.setRows(50);
    r.setCols(132);
  });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->command.tty);
  EXPECT_EQ(v->command.rows, 50);
  EXPECT_EQ(v->command.cols, 132);
}

TEST_F(RequestValidationTest, RefusesBadStarts) {
  const std::vector<std::pair<const char*, std::function<void(helper::StartProcessRequest::Builder)>>>
      cases = {
          {"empty argv", [](auto r) { r.initArgv(0); }},
          {"empty argv[0]", [](auto r) { r.getArgv().set(0, ""); }},
          {"NUL in argv",
           [](auto r) {
             std::string a("ec\0ho", 5);
             r.getArgv().set(0, capnp::Text::Reader(a.data(), a.size()));
           }},
          {"env without =", [](auto r) { r.initEnv(1).set(0, "NOEQUALS"); }},
          {"env with empty key", [](auto r) { r.initEnv(1).set(0, "=x"); }},
          {"relative cwd", [](auto r) { r.setCwd("workspace"); }},
          {"cwd with ..", [](auto r) { r.setCwd("/workspace/../etc"); }},
          // workspaceCwd: the syntax here; the privhelper resolves the rest against the
          // workspace itself (sandbox_host_test, testing/tools_test).
          {"absolute workspaceCwd", [](auto r) { r.setWorkspaceCwd("/etc"); }},
          {"workspaceCwd that climbs out", [](auto r) { r.setWorkspaceCwd("../.."); }},
          {"workspaceCwd that climbs out later", [](auto r) { r.setWorkspaceCwd("a/../../x"); }},
          {"workspaceCwd with a NUL",
           [](auto r) { r.setWorkspaceCwd(capnp::Text::Reader("sub\0/../..", 10)); }},
          {"workspaceCwd that is not UTF-8", [](auto r) { r.setWorkspaceCwd("sub\xff"); }},
          {"workspaceCwd over PATH_MAX",
           [](auto r) { r.setWorkspaceCwd(std::string(kMaxWorkspaceCwdBytes + 1, 'a')); }},
          {"workspaceCwd and cwd both",
           [](auto r) {
             r.setWorkspaceCwd("sub");
             r.setCwd("/workspace/sub");
           }},
          {"bad process id", [](auto r) { r.setProcessId("../x"); }},
          {"bad sandbox id", [](auto r) { r.setSandboxId("SB"); }},
          {"terminal with no rows", [](auto r) { r.setTty(true); r.setRows(0); r.setCols(80); }},
          {"terminal with no columns", [](auto r) { r.setTty(true); r.setRows(24); r.setCols(0); }},
          {"argv over 1 MiB",
           [](auto r) {
             auto argv = r.initArgv(3);
             argv.set(0, "x");
             argv.set(1, std::string(600 << 10, 'a'));
             argv.set(2, std::string(600 << 10, 'a'));
           }},
      };
  for (const auto& [name, edit] : cases) {
    auto v = Start(edit);
    ASSERT_FALSE(v.ok()) << name;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << name << ": " << v.status();
  }
}

// ---------------------------------------------------------------- every Helper method

// Runs `validate` on a params struct of type Params filled in by `edit`.
template <typename Params, typename Validate, typename Edit>
absl::Status Check(Validate validate, Edit edit) {
  capnp::MallocMessageBuilder m;
  auto params = m.initRoot<Params>();
  edit(params);
  return validate(params.asReader()).status();
}

// A method's validator, run on a well-formed request and on hostile ones.
struct MethodCases {
  std::function<absl::Status()> well_formed;
  std::vector<std::pair<const char*, std::function<absl::Status()>>> hostile;
};

// Fills ids into any params struct with sandboxId and processId.
template <typename Builder>
void Ids(Builder p, capnp::Text::Reader sandbox, capnp::Text::Reader process) {
  p.setSandboxId(sandbox);
  p.setProcessId(process);
}

const capnp::Text::Reader kSandbox = "sb-0123456789abcdef01234567";
const capnp::Text::Reader kProcess = "p-0123456789abcdef01234567";
const capnp::Text::Reader kNulId("sb-1\0/../x", 10);

// The (sandboxId, processId) cases every method naming a process shares.
template <typename Params, typename Validate>
MethodCases ProcessRefCases(Validate validate) {
  auto with = [validate](capnp::Text::Reader sandbox, capnp::Text::Reader process) {
    return [=] {
      return Check<Params>(validate, [&](auto p) { Ids(p, sandbox, process); });
    };
  };
  return {with(kSandbox, kProcess),
          {{"traversing sandbox id", with("../../etc", kProcess)},
           {"NUL in the sandbox id", with(kNulId, kProcess)},
           {"empty process id", with(kSandbox, "")},
           {"process id with a slash", with(kSandbox, "p/1")},
           {"uppercase process id", with(kSandbox, "P-1")}}};
}

// The sandboxId cases every method naming only a sandbox shares.
template <typename Params, typename Validate>
MethodCases SandboxRefCases(Validate validate) {
  auto with = [validate](capnp::Text::Reader sandbox) {
    return [=] { return Check<Params>(validate, [&](auto p) { p.setSandboxId(sandbox); }); };
  };
  return {with(kSandbox),
          {{"..", with("..")},
           {"empty id", with("")},
           {"NUL in the id", with(kNulId)},
           {"traversing id", with("../../etc")},
           {"id with a slash", with("sb/1")}}};
}

// connectPort: the sandbox id as for every sandbox, and the port.
MethodCases ConnectCases() {
  using Params = helper::Helper::ConnectPortParams;
  auto with = [](capnp::Text::Reader sandbox, uint16_t port) {
    return [=] {
      return Check<Params>(ValidateConnectPort, [&](auto p) {
        p.setSandboxId(sandbox);
        p.setPort(port);
      });
    };
  };
  return {with(kSandbox, 8080),
          {{"port 0", with(kSandbox, 0)},
           {"traversing id", with("../../etc", 8080)},
           {"NUL in the id", with(kNulId, 8080)},
           {"empty id", with("", 8080)}}};
}

// sandboxUsage: a list of sandbox ids, each checked, and at most kMaxUsageIds of them.
MethodCases UsageCases() {
  using Params = helper::Helper::SandboxUsageParams;
  auto with = [](std::vector<capnp::Text::Reader> ids) {
    return [=] {
      return Check<Params>(ValidateSandboxUsage, [&](auto p) {
        auto list = p.initSandboxIds(static_cast<unsigned>(ids.size()));
        for (unsigned i = 0; i < list.size(); ++i) list.set(i, ids[i]);
      });
    };
  };
  return {with({kSandbox, kSandbox}),
          {{"traversing id", with({kSandbox, "../../etc"})},
           {"NUL in an id", with({kNulId})},
           {"empty id", with({""})},
           {"too many ids", with(std::vector<capnp::Text::Reader>(kMaxUsageIds + 1, kSandbox))}}};
}

// Parameterless methods: their params struct must stay empty (HelperMethodsTest checks it),
// so there is nothing a broker could send them.
const std::set<std::string> kParameterless = {"policy", "inventory"};

std::map<std::string, MethodCases> HostileRequestsByMethod(const Config& config) {
  using H = helper::Helper;
  std::map<std::string, MethodCases> cases;
  auto create = [&config](std::function<void(helper::CreateSandboxRequest::Builder)> edit) {
    return [&config, edit] {
      return Check<H::CreateSandboxParams>(
          [&config](auto p) { return ValidateCreate(config, p); },
          [&](auto p) {
            auto r = p.initRequest();
            r.setSandboxId(kSandbox);
            r.setDeploymentId("alpha");
            r.setPeerUid(1000);
            auto ws = r.initWorkspaces(1);
            ws[0].setPath("/srv/a/project");
            edit(r);
          });
    };
  };
  cases["createSandbox"] = {
      create([](auto) {}),
      {{"traversing sandbox id", create([](auto r) { r.setSandboxId("../../etc"); })},
       {"NUL in the deployment id",
        create([](auto r) { r.setDeploymentId(capnp::Text::Reader("alpha\0x", 7)); })},
       {"another deployment's profile", create([](auto r) { r.setProfile("big"); })},
       {"destination over /proc",
        create([](auto r) { r.getWorkspaces()[0].setDestination("/proc"); })},
       {"a peer the deployment does not allow", create([](auto r) { r.setPeerUid(4343); })}}};
  auto start = [](std::function<void(helper::StartProcessRequest::Builder)> edit) {
    return [edit] {
      return Check<H::StartProcessParams>(ValidateStart, [&](auto p) {
        auto r = p.initRequest();
        Ids(r, kSandbox, kProcess);
        r.initArgv(1).set(0, "/bin/true");
        edit(r);
      });
    };
  };
  cases["startProcess"] = {
      start([](auto) {}),
      {{"traversing process id", start([](auto r) { r.setProcessId("../p"); })},
       {"empty argv", start([](auto r) { r.initArgv(0); })},
       {"NUL in argv",
        start([](auto r) { r.getArgv().set(0, capnp::Text::Reader("/bin/sh\0-c", 10)); })},
       {"terminal without a size", start([](auto r) { r.setTty(true); })}}};
  cases["waitProcess"] = ProcessRefCases<H::WaitProcessParams>(ValidateWait);
  cases["reattach"] = ProcessRefCases<H::ReattachParams>(ValidateReattach);
  cases["closeInput"] = ProcessRefCases<H::CloseInputParams>(ValidateCloseInput);
  cases["releaseProcess"] = ProcessRefCases<H::ReleaseProcessParams>(ValidateReleaseProcess);
  auto signal = [](capnp::Text::Reader sandbox, int sig) {
    return [=] {
      return Check<H::SignalProcessParams>(ValidateSignal, [&](auto p) {
        Ids(p, sandbox, kProcess);
        p.setSignal(sig);
      });
    };
  };
  // Regression: the privhelper took any int32 as a signal number and passed it to runsc.
  cases["signalProcess"] = {signal(kSandbox, 15),
                            {{"signal 0", signal(kSandbox, 0)},
                             {"signal 65", signal(kSandbox, 65)},
                             {"signal 99", signal(kSandbox, 99)},
                             {"negative signal", signal(kSandbox, -9)},
                             {"traversing sandbox id", signal("..", 9)}}};
  cases["waitSandbox"] = SandboxRefCases<H::WaitSandboxParams>(ValidateWaitSandbox);
  cases["deleteSandbox"] = SandboxRefCases<H::DeleteSandboxParams>(ValidateDelete);
  cases["pauseSandbox"] = SandboxRefCases<H::PauseSandboxParams>(ValidatePauseSandbox);
  cases["resumeSandbox"] = SandboxRefCases<H::ResumeSandboxParams>(ValidateResumeSandbox);
  cases["awaitGone"] = SandboxRefCases<H::AwaitGoneParams>(ValidateAwaitGone);
  cases["connectPort"] = ConnectCases();
  cases["spawnerState"] = SandboxRefCases<H::SpawnerStateParams>(ValidateSpawnerState);
  cases["sandboxUsage"] = UsageCases();
  return cases;
}

TEST_F(RequestValidationTest, EveryHelperMethodRefusesItsHostileRequests) {
  for (const auto& [method, c] : HostileRequestsByMethod(*config_)) {
    absl::Status ok = c.well_formed();
    EXPECT_TRUE(ok.ok()) << method << ": a well-formed request is refused: " << ok;
    for (const auto& [name, run] : c.hostile) {
      absl::Status refused = run();
      EXPECT_TRUE(refused.code() == absl::StatusCode::kInvalidArgument ||
                  refused.code() == absl::StatusCode::kPermissionDenied)
          << method << " / " << name << ": " << refused;
    }
  }
}

TEST_F(RequestValidationTest, ConnectKeepsTheSandboxAndPort) {
  capnp::MallocMessageBuilder m;
  auto p = m.initRoot<helper::Helper::ConnectPortParams>();
  p.setSandboxId(kSandbox);
  p.setPort(65535);
  auto v = ValidateConnectPort(p.asReader());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->sandbox_id, kSandbox.cStr());
  EXPECT_EQ(v->port, 65535);
}

TEST_F(RequestValidationTest, ParameterlessMethodsAreAccepted) {
  capnp::MallocMessageBuilder m;
  EXPECT_TRUE(ValidatePolicy(m.initRoot<helper::Helper::PolicyParams>().asReader()).ok());
  capnp::MallocMessageBuilder n;
  EXPECT_TRUE(ValidateInventory(n.initRoot<helper::Helper::InventoryParams>().asReader()).ok());
}

// Walks the Helper interface as the schema defines it: a method added to helper.capnp without
// a validator and hostile cases above (or, with no parameters, a place in kParameterless)
// fails here, so no request reaches the privhelper unvalidated.
TEST_F(RequestValidationTest, EveryHelperMethodInTheSchemaHasRefusalCases) {
  auto cases = HostileRequestsByMethod(*config_);
  std::set<std::string> in_schema;
  for (auto method : capnp::Schema::from<helper::Helper>().getMethods()) {
    std::string name = method.getProto().getName();
    in_schema.insert(name);
    if (kParameterless.count(name)) {
      EXPECT_EQ(method.getParamType().getFields().size(), 0u)
          << name << " has parameters now: give it a validator and hostile cases";
      EXPECT_EQ(cases.count(name), 0u) << name;
      continue;
    }
    ASSERT_EQ(cases.count(name), 1u)
        << "Helper." << name << " has no hostile requests in HostileRequestsByMethod";
    EXPECT_FALSE(cases[name].hostile.empty()) << name;
  }
  for (const auto& [name, c] : cases) EXPECT_EQ(in_schema.count(name), 1u) << "stale: " << name;
  for (const auto& name : kParameterless) EXPECT_EQ(in_schema.count(name), 1u) << name;
}

}  // namespace
}  // namespace paseo
