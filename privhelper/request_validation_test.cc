// The privhelper's re-validation of broker requests, fed the requests a compromised broker
// could send: each must be refused with a clear error, independent of the broker's checks.
#include "privhelper/request_validation.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>

#include <capnp/message.h>

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
    Write("profiles/default.json", R"({"name": "default"})");
    Write("profiles/big.json", R"({"name": "big"})");
    Write("deployments/a.json",
          R"({"id": "alpha", "allowedUids": [1000], "workspaceRoots": [{"hostPath": "/srv/a"}]})");
    Write("deployments/b.json",
          R"({"id": "beta", "allowedUids": [2000], "workspaceRoots": [{"hostPath": "/srv/b"}],
              "profiles": ["big"]})");
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
    auto r = m.initRoot<helper::CreateSandboxRequest>();
    r.setSandboxId("sb-0123456789abcdef01234567");
    r.setDeploymentId("alpha");
    auto ws = r.initWorkspaces(1);
    ws[0].setPath("/srv/a/project");
    ws[0].setDestination("/workspace");
    ws[0].setMode(api::AccessMode::READ_WRITE);
    edit(r);
    return ValidateCreate(*config_, r.asReader());
  }

  absl::StatusOr<ValidatedStart> Start(
      const std::function<void(helper::StartProcessRequest::Builder)>& edit) {
    capnp::MallocMessageBuilder m;
    auto r = m.initRoot<helper::StartProcessRequest>();
    r.setSandboxId("sb-0123456789abcdef01234567");
    r.setProcessId("p-0123456789abcdef01234567");
    auto argv = r.initArgv(2);
    argv.set(0, "echo");
    argv.set(1, "hi");
    edit(r);
    return ValidateStart(r.asReader());
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
      {"workspace path longer than PATH_MAX",
       [](auto r) { r.getWorkspaces()[0].setPath("/" + std::string(5000, 'a')); },
       absl::StatusCode::kInvalidArgument, "PATH_MAX"},
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

TEST_F(RequestValidationTest, AcceptsAWellFormedStart) {
  auto v = Start([](auto r) {
    auto env = r.initEnv(1);
    env.set(0, "A=b=c");
    r.setCwd("/workspace/sub");
  });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->argv, (std::vector<std::string>{"echo", "hi"}));
  EXPECT_EQ(v->env, (std::vector<std::string>{"A=b=c"}));
  EXPECT_EQ(v->cwd, "/workspace/sub");
}

TEST_F(RequestValidationTest, AcceptsATerminalWithItsSize) {
  auto v = Start([](auto r) {
    r.setTty(true);
    r.setRows(50);
    r.setCols(132);
  });
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->tty);
  EXPECT_EQ(v->rows, 50);
  EXPECT_EQ(v->cols, 132);
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

}  // namespace
}  // namespace paseo
