// Root suite for tool directories (schema/config.capnp ToolRoot, LaunchProfile.tools) and
// workspace-relative working directories (api.capnp ProcessSpec.workspaceCwd), on the real
// privhelper, broker and runsc. The service has its own deployments (added before it starts):
//   tools          a host tool root at /opt/paseo/bin
//   tools-docker   the same workspace root seen as /home/paseo, its tool root a container path
//   tools-symlink  a tool root registered through a symlink       (every create refused)
//   tools-escape   a container-path tool root through a symlink  (every create refused)
// Clients are this process (uid 0, allowed by the deployments); agents run as 4242.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <capnp/message.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "testing/await.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

constexpr uid_t kAgent = 4242;
constexpr char kToolDest[] = "/opt/paseo/bin";

Service* g_service = nullptr;

void Put(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

// Writes the suite's tool dirs, workspace tree and config into the work area.
void LayOut(const std::string& base) {
  for (const char* d : {"/tools", "/tools/bin", "/ws-tools", "/ws-tools/sub",
                        "/ws-tools/sub/deeper", "/ws-tools/.tools", "/ws-tools/.tools/bin"})
    ASSERT_EQ(mkdir((base + d).c_str(), 0755), 0) << d;
  // The agent writes its findings into the workspace; the client (root) reaches it through
  // group 0, as privhelper/peer_access.h judges root like any uid.
  ASSERT_EQ(chown((base + "/ws-tools").c_str(), kAgent, 0), 0);
  ASSERT_EQ(chmod((base + "/ws-tools").c_str(), 0775), 0);
  // Runs by bare name from PATH: writes where it ran from and its PATH to the file it is given.
  // World-writable on the host, so only the read-only mount can stop an agent's write.
  ASSERT_EQ(chmod((base + "/tools/bin").c_str(), 0777), 0);
  Put(base + "/tools/bin/paseo-tool-probe",
      "#!/bin/sh\necho \"host-tool $0 $PATH\" > \"$1\"\n", 0777);
  Put(base + "/ws-tools/.tools/bin/paseo-docker-probe",
      "#!/bin/sh\necho \"docker-tool $0\" > \"$1\"\n", 0755);
  // A set-uid-root copy of busybox: the tool mount is nosuid, so it gives no privilege.
  std::ifstream busybox("/bin/busybox", std::ios::binary);
  std::ofstream(base + "/tools/bin/busybox-suid", std::ios::binary) << busybox.rdbuf();
  ASSERT_EQ(chmod((base + "/tools/bin/busybox-suid").c_str(), 04755), 0);
  ASSERT_EQ(symlink((base + "/tools/bin").c_str(), (base + "/tools-link").c_str()), 0);

  // The workspace the working-directory cases resolve in.
  std::string ws = base + "/ws-tools";
  Put(ws + "/file", "not a directory\n", 0644);
  for (const auto& [link, target] : std::vector<std::pair<std::string, std::string>>{
           {"link", "sub"},          // relative, inside: accepted
           {"esc", "/etc"},          // absolute
           {"esc2", "../../.."},     // relative, leading out
           {"chain1", "chain2"},     // a chain that ends outside
           {"chain2", "esc"},
           {"file-link", "file"}}) {
    ASSERT_EQ(symlink(target.c_str(), (ws + "/" + link).c_str()), 0) << link;
  }

  auto write = [&base](const std::string& rel, const std::string& text) {
    std::ofstream(base + "/etc/" + rel) << text;
  };
  write("profiles/tools.json", absl::StrCat(R"({"name": "tools", "tools": [{"name": "probe",
        "destination": ")", kToolDest, R"("}]})"));
  auto deployment = [&](const std::string& id, const std::string& roots,
                        const std::string& tool_root) {
    write("deployments/" + id + ".json",
          absl::StrCat(R"({"id": ")", id, R"(", "allowedUids": [0], "profiles": ["tools"],
              "runAs": {"uid": 4242, "gid": 4242}, "workspaceRoots": [)", roots,
                       R"(], "toolRoots": [{"name": "probe", )", tool_root, "}]}"));
  };
  std::string host_root = absl::StrCat(R"({"hostPath": ")", ws, R"("})");
  std::string docker_root =
      absl::StrCat(R"({"hostPath": ")", ws, R"(", "clientPath": "/home/paseo"})");
  deployment("tools", host_root, absl::StrCat(R"("hostPath": ")", base, R"(/tools/bin")"));
  deployment("tools-docker", docker_root, R"("clientPath": "/home/paseo/.tools/bin")");
  deployment("tools-symlink", host_root, absl::StrCat(R"("hostPath": ")", base, R"(/tools-link")"));
  deployment("tools-escape", docker_root, R"("clientPath": "/home/paseo/esc")");
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ToolsTest : public ::testing::Test {
 protected:
  Service& svc = *g_service;
  // Behind a pointer: kj's destructors may throw, gtest's fixture destructor may not.
  std::unique_ptr<client::Connection> conn_ =
      std::make_unique<client::Connection>(Io(), svc.socket());
  client::Connection& conn = *conn_;

  std::string Ws() const { return svc.base() + "/ws-tools"; }

  // A sandbox of `deployment` over its workspace root (as that deployment's client names it).
  api::Sandbox::Client NewSandbox(const std::string& deployment = "tools",
                                  const std::string& path = "") {
    auto req = conn.supervisor().createSandboxRequest();
    auto spec = req.initSpec();
    spec.setDeploymentId(deployment);
    auto ws = spec.initWorkspaces(1);
    ws[0].setPath(path.empty() ? Ws() : path);
    ws[0].setMode(api::AccessMode::READ_WRITE);
    return Await(req.send(), "createSandbox").getSandbox();
  }

  struct Run {
    std::vector<std::string> argv;
    std::vector<std::string> env;
    std::string workspace_cwd;
    bool tty = false;
    bool exact_env = false;
  };
  capnp::RemotePromise<api::Sandbox::StartProcessResults> Send(api::Sandbox::Client& sandbox,
                                                               const Run& run) {
    auto req = sandbox.startProcessRequest();
    auto spec = req.initSpec();
    auto a = spec.initArgv(static_cast<unsigned>(run.argv.size()));
    for (size_t i = 0; i < run.argv.size(); ++i) a.set(static_cast<unsigned>(i), run.argv[i]);
    auto e = spec.initEnv(static_cast<unsigned>(run.env.size()));
    for (size_t i = 0; i < run.env.size(); ++i) e.set(static_cast<unsigned>(i), run.env[i]);
    spec.setWorkspaceCwd(run.workspace_cwd);
    spec.setTty(run.tty);
    spec.setExactEnv(run.exact_env);
    spec.setRows(24);
    spec.setCols(80);
    return req.send();
  }

  // Runs to its end; its exit code (-1 if it did not exit normally).
  int RunToEnd(api::Sandbox::Client& sandbox, const Run& run) {
    auto process = Await(Send(sandbox, run), "startProcess").getProcess();
    auto waited = Await(process.waitRequest().send(), "the process to end");
    auto status = waited.getStatus();
    return status.isExitCode() ? status.getExitCode() : -1;
  }

  // Runs `script` in sh as the agent; what it wrote to /workspace/out (removed after).
  std::string Sh(api::Sandbox::Client& sandbox, const std::string& script,
                 const std::string& workspace_cwd = "") {
    unlink((Ws() + "/out").c_str());
    int code = RunToEnd(sandbox, {{"sh", "-c", "{ " + script + "; } > /workspace/out 2>&1"}, {},
                                  workspace_cwd});
    std::string out = Slurp(Ws() + "/out");
    unlink((Ws() + "/out").c_str());
    EXPECT_EQ(code, 0) << script << ": " << out;
    return out;
  }

  size_t ProcessCount(api::Sandbox::Client& sandbox) {
    return Await(sandbox.listProcessesRequest().send(), "listProcesses").getProcesses().size();
  }

  void Delete(api::Sandbox::Client& sandbox) {
    auto req = sandbox.deleteRequest();
    req.setForce(true);
    Await(req.send(), "delete");
  }

  void TearDown() override { EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{}); }
};

// ---------------------------------------------------------------- tool directories

TEST_F(ToolsTest, AToolRunsByBareNameFromPathOnPipesAndATerminal) {
  auto sandbox = NewSandbox();
  std::string tool = absl::StrCat(kToolDest, "/paseo-tool-probe");
  // Pipes, no PATH from the client: runsc finds it through the tool dir in front of the default.
  unlink((Ws() + "/found").c_str());
  EXPECT_EQ(RunToEnd(sandbox, {{"paseo-tool-probe", "/workspace/found"}, {}, ""}), 0);
  std::string found = Slurp(Ws() + "/found");
  EXPECT_TRUE(absl::StartsWith(found, absl::StrCat("host-tool ", tool, " ", kToolDest, ":")))
      << found;
  EXPECT_TRUE(absl::StrContains(found, ":/usr/bin:")) << found;
  // The client's own PATH: the tool dir goes in front of it.
  unlink((Ws() + "/found").c_str());
  EXPECT_EQ(RunToEnd(sandbox, {{"paseo-tool-probe", "/workspace/found"}, {"PATH=/bin"}, ""}), 0);
  EXPECT_EQ(Slurp(Ws() + "/found"), absl::StrCat("host-tool ", tool, " ", kToolDest, ":/bin\n"));
  // A terminal: the relay execvp()s it with the same PATH.
  unlink((Ws() + "/found").c_str());
  EXPECT_EQ(RunToEnd(sandbox, {{"paseo-tool-probe", "/workspace/found"}, {"PATH=/bin"}, "",
                               /*tty=*/true}),
            0);
  EXPECT_EQ(Slurp(Ws() + "/found"), absl::StrCat("host-tool ", tool, " ", kToolDest, ":/bin\n"));
  unlink((Ws() + "/found").c_str());
  Delete(sandbox);
}

// Issue 26: Paseo's runtime asks for an exact environment, and its daemon runs the workspace
// helper with an empty one. The tool is found all the same, and the program sees exactly the
// PATH it was given (none at all for the empty env).
TEST_F(ToolsTest, AnExactEnvironmentFindsToolsWithoutThemInItsPath) {
  auto sandbox = NewSandbox();
  std::string tool = absl::StrCat(kToolDest, "/paseo-tool-probe");
  for (bool tty : {false, true}) {
    SCOPED_TRACE(tty ? "terminal" : "pipes");
    unlink((Ws() + "/found").c_str());
    Run exact{{"paseo-tool-probe", "/workspace/found"}, {"PATH=/bin", "HOME=/h"}, "", tty, true};
    EXPECT_EQ(RunToEnd(sandbox, exact), 0);
    EXPECT_EQ(Slurp(Ws() + "/found"), absl::StrCat("host-tool ", tool, " /bin\n"));
    // The daemon's helper exec: no PATH, no HOME. Found through the tool dirs; nothing added.
    unlink((Ws() + "/found").c_str());
    Run empty{{"paseo-tool-probe", "/workspace/found"}, {}, "", tty, true};
    EXPECT_EQ(RunToEnd(sandbox, empty), 0);
    EXPECT_TRUE(absl::StartsWith(Slurp(Ws() + "/found"), absl::StrCat("host-tool ", tool, " ")))
        << Slurp(Ws() + "/found");
    EXPECT_FALSE(absl::StrContains(Slurp(Ws() + "/found"), kToolDest + std::string(":")));
  }
  unlink((Ws() + "/found").c_str());
  Delete(sandbox);
}

TEST_F(ToolsTest, TheToolMountIsReadOnlyNosuidAndNodev) {
  auto sandbox = NewSandbox();
  std::string probe = svc.base() + "/tools/bin/paseo-tool-probe";
  std::string before = Slurp(probe);
  // Writes fail inside although the host modes would allow them (the dir and the script are
  // world-writable there): the mount is read-only.
  std::string wrote = Sh(sandbox, absl::StrCat("touch ", kToolDest, "/new; echo touch=$?; echo x >> ",
                                               kToolDest, "/paseo-tool-probe; echo append=$?"));
  EXPECT_TRUE(absl::StrContains(wrote, "touch=1")) << wrote;
  EXPECT_TRUE(absl::StrContains(wrote, "append=1")) << wrote;
  EXPECT_FALSE(absl::StrContains(wrote, "Permission denied")) << wrote;
  EXPECT_TRUE(absl::StrContains(wrote, "Read-only file system")) << wrote;
  EXPECT_EQ(Slurp(probe), before);
  EXPECT_NE(access((svc.base() + "/tools/bin/new").c_str(), F_OK), 0);
  // The set-uid bit is there, and gives nothing: the agent stays itself.
  EXPECT_EQ(Sh(sandbox, absl::StrCat("stat -c %a ", kToolDest, "/busybox-suid; busybox-suid id -u; "
                                     "busybox-suid id -g")),
            "4755\n4242\n4242\n");
  // What runsc is given: the staged bind, read-only, nosuid and nodev, in the privhelper's
  // mount namespace.
  std::string mountinfo = Slurp(absl::StrCat("/proc/", svc.privhelper_pid(), "/mountinfo"));
  int staged = 0;
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n')) {
    if (!absl::StrContains(line, "/mounts/tool-probe ")) continue;
    ++staged;
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    ASSERT_GE(fields.size(), 6u) << line;
    std::vector<std::string> options = absl::StrSplit(fields[5], ',');
    for (const char* want : {"ro", "nosuid", "nodev"})
      EXPECT_NE(std::find(options.begin(), options.end(), want), options.end())
          << want << " missing: " << line;
  }
  EXPECT_EQ(staged, 1) << mountinfo;
  Delete(sandbox);
}

TEST_F(ToolsTest, ADockerDeploymentsToolRootIsItsContainerPathMappedLikeAWorkspace) {
  auto sandbox = NewSandbox("tools-docker", "/home/paseo");
  unlink((Ws() + "/found").c_str());
  EXPECT_EQ(RunToEnd(sandbox, {{"paseo-docker-probe", "/workspace/found"}, {}, ""}), 0);
  EXPECT_EQ(Slurp(Ws() + "/found"), absl::StrCat("docker-tool ", kToolDest, "/paseo-docker-probe\n"));
  unlink((Ws() + "/found").c_str());
  Delete(sandbox);
}

TEST_F(ToolsTest, AToolRootThatIsASymlinkOrLeadsOutRefusesEveryCreate) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"tools-symlink", "cannot be opened safely"},
      {"tools-escape", "symlink"},
  };
  for (const auto& [deployment, why] : cases) {
    auto req = conn.supervisor().createSandboxRequest();
    auto spec = req.initSpec();
    spec.setDeploymentId(deployment);
    auto ws = spec.initWorkspaces(1);
    ws[0].setPath(deployment == "tools-escape" ? "/home/paseo" : Ws());
    std::string error;
    try {
      Await(req.send(), "createSandbox");
    } catch (const kj::Exception& e) {
      error = e.getDescription().cStr();
    }
    EXPECT_TRUE(absl::StrContains(error, "failed-precondition")) << deployment << ": " << error;
    EXPECT_TRUE(absl::StrContains(error, "tool root probe")) << deployment << ": " << error;
    EXPECT_TRUE(absl::StrContains(error, why)) << deployment << ": " << error;
  }
  auto list = Await(conn.supervisor().listSandboxesRequest().send(), "listSandboxes");
  // Earlier tests' sandboxes may still be `deleting` (their teardown runs in the background).
  for (auto info : list.getSandboxes())
    EXPECT_EQ(std::string(info.getState().cStr()), "deleting") << info.getId().cStr();
}

// ---------------------------------------------------------------- workspace-relative cwd

TEST_F(ToolsTest, AWorkspaceCwdRunsThereInsideTheSandbox) {
  auto sandbox = NewSandbox();
  EXPECT_EQ(Sh(sandbox, "pwd", "sub"), "/workspace/sub\n");
  EXPECT_EQ(Sh(sandbox, "pwd", "./sub//deeper/"), "/workspace/sub/deeper\n");
  EXPECT_EQ(Sh(sandbox, "pwd", "."), "/workspace\n");
  // A relative symlink that stays inside: the sandbox follows it as the check did.
  EXPECT_EQ(Sh(sandbox, "pwd -P", "link"), "/workspace/sub\n");
  Delete(sandbox);
}

TEST_F(ToolsTest, AWorkspaceCwdThatLeavesTheWorkspaceIsRefusedAndStartsNothing) {
  auto sandbox = NewSandbox();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"../..", "leaves the workspace"},
      {"/etc", "absolute"},
      {"esc", "leaves the workspace"},     // -> /etc
      {"esc2", "leaves the workspace"},    // -> ../../..
      {"chain1", "leaves the workspace"},  // -> chain2 -> esc -> /etc
      {"link/../..", "leaves the workspace"},
      {"file", "not a directory"},
      {"file-link", "not a directory"},
      {"missing", "does not exist"},
  };
  for (const auto& [cwd, why] : cases) {
    std::string error;
    try {
      Await(Send(sandbox, {{"touch", "/tmp/started"}, {}, cwd}), "startProcess");
    } catch (const kj::Exception& e) {
      error = e.getDescription().cStr();
    }
    EXPECT_TRUE(absl::StrContains(error, "invalid-argument")) << cwd << ": " << error;
    EXPECT_TRUE(absl::StrContains(error, "workspaceCwd")) << cwd << ": " << error;
    EXPECT_TRUE(absl::StrContains(error, why)) << cwd << ": " << error;
  }
  // Nothing started: no process, and nothing ran.
  EXPECT_EQ(ProcessCount(sandbox), 0u);
  EXPECT_EQ(Sh(sandbox, "ls /tmp"), "");
  Delete(sandbox);
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  paseo::testing::ServiceOptions options;
  options.before_start = paseo::testing::LayOut;
  return paseo::testing::RunTestsWithOwnService(argc, argv, options, &paseo::testing::g_service);
}
