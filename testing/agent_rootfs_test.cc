// Root suite for the agent rootfs (rootfs/build-rootfs --profile agent): what a coding agent needs
// works inside a real gVisor sandbox built from it, through the CLI as a client would. The
// version under test is the one testing/run-tests built (cached per machine), named by
// PASEO_AGENT_ROOTFS=<out>/<version>; the suite fails without it. Deployments of its own:
//   agents          client and agent uid 4545 (not 1000), a host workspace root
//   agents-docker   client and agent 1000:1000, the root seen as /workspace (Paseo's image)
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

Service* g_service = nullptr;

constexpr uid_t kAgentUid = 4545;
constexpr uid_t kDockerUid = 1000;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void LayOut(const std::string& base) {
  for (const char* d : {"/ws-agent", "/ws-agent-docker"})
    ASSERT_EQ(mkdir((base + d).c_str(), 0755), 0) << d;
  ASSERT_EQ(chown((base + "/ws-agent").c_str(), kAgentUid, kAgentUid), 0);
  ASSERT_EQ(chown((base + "/ws-agent-docker").c_str(), kDockerUid, kDockerUid), 0);
  auto write = [&base](const std::string& rel, const std::string& text) {
    std::ofstream(base + "/etc/" + rel) << text;
  };
  std::string version = getenv("PASEO_AGENT_ROOTFS");
  version = version.substr(version.rfind('/') + 1);
  write("profiles/agent.json",
        absl::StrCat(R"({"name": "agent", "rootfsVersion": ")", version, R"("})"));
  write("deployments/agents.json",
        absl::StrCat(R"({"id": "agents", "allowedUids": [4545], "profiles": ["agent"],
            "workspaceRoots": [{"hostPath": ")", base, R"(/ws-agent"}]})"));
  write("deployments/agents-docker.json",
        absl::StrCat(R"({"id": "agents-docker", "allowedUids": [1000], "profiles": ["agent"],
            "runAs": {"uid": 1000, "gid": 1000},
            "workspaceRoots": [{"hostPath": ")", base, R"(/ws-agent-docker", "clientPath": "/workspace"}]})"));
}

class AgentRootfsTest : public ::testing::Test {
 protected:
  Service& svc = *g_service;

  struct Client {
    Identity who;
    std::string deployment;
    std::string host_ws;    // the workspace root on the host
    std::string client_ws;  // the same as the client names it
  };
  Client Agent() const {
    return {{kAgentUid, kAgentUid, {kAgentUid, svc.socket_gid()}}, "agents",
            svc.base() + "/ws-agent", svc.base() + "/ws-agent"};
  }
  Client Docker() const {
    return {{kDockerUid, kDockerUid, {kDockerUid, svc.socket_gid()}}, "agents-docker",
            svc.base() + "/ws-agent-docker", "/workspace"};
  }

  // A sandbox of `c` with its workspace root read-write at /workspace; its id.
  std::string Create(const Client& c) {
    CliResult r = svc.Cli(c.who, {"create", "--deployment=" + c.deployment,
                                  "--workspace=" + c.client_ws + ":/workspace:rw"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id(absl::StripAsciiWhitespace(r.out));
    created_.push_back({c.who, id});
    return id;
  }
  // `bash -c script` in sandbox `id` as `c`; stdout and stderr together.
  CliResult Bash(const Client& c, const std::string& id, const std::string& script) {
    return svc.Cli(c.who, {"exec", id, "--", "bash", "-c", "{ " + script + "; } 2>&1"});
  }

  void TearDown() override {
    for (const auto& [who, id] : created_) svc.Cli(who, {"rm", id});
    EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  }

  std::vector<std::pair<Identity, std::string>> created_;
};

// Every entry beneath `dir` (itself included) whose owner is not uid:gid.
std::vector<std::string> NotOwnedBy(const std::string& dir, uid_t uid, gid_t gid) {
  std::vector<std::string> wrong;
  std::function<void(const std::string&)> walk = [&](const std::string& path) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return wrong.push_back(path + " (gone)");
    if (st.st_uid != uid || st.st_gid != gid)
      wrong.push_back(absl::StrCat(path, " ", st.st_uid, ":", st.st_gid));
    if (!S_ISDIR(st.st_mode)) return;
    DIR* d = opendir(path.c_str());
    if (d == nullptr) return;
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") walk(path + "/" + name);
    }
    closedir(d);
  };
  walk(dir);
  return wrong;
}

TEST_F(AgentRootfsTest, NodeIsThePinnedVersion) {
  std::string manifest = Slurp(std::string(getenv("PASEO_AGENT_ROOTFS")) + "/manifest.json");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(manifest, m, std::regex(R"re("node"\s*:\s*"v(22\.[0-9.]+)")re")))
      << manifest.substr(0, 2000);
  std::string id = Create(Agent());
  CliResult r = Bash(Agent(), id, "node -e 'console.log(process.version, process.arch)'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, absl::StrCat("v", m[1].str(), " x64\n"));
  CliResult npm = Bash(Agent(), id, "npm --version && which node npm npx");
  EXPECT_EQ(npm.exit_code, 0) << npm.out;
}

// git in a read-write workspace, as a uid other than 1000 and as Paseo's container user
// 1000:1000 (through the clientPath mapping): the repository's every file belongs on the host to
// the sandbox's run-as uid and gid.
TEST_F(AgentRootfsTest, GitCommitsInTheWorkspaceAndTheFilesAreTheRunAsUsers) {
  for (const Client& c : {Agent(), Docker()}) {
    SCOPED_TRACE(c.deployment);
    std::string id = Create(c);
    CliResult r = Bash(c, id,
                       "cd /workspace && git config --global user.name Agent && "
                       "git config --global user.email agent@example.invalid && "
                       "git init -q repo && cd repo && echo hello > README && git add README && "
                       "git commit -qm 'first commit' && echo more >> README && "
                       "git commit -qam second && git log --format=%s && git status --porcelain");
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.out, "second\nfirst commit\n");
    std::string repo = c.host_ws + "/repo";
    EXPECT_EQ(Slurp(repo + "/README"), "hello\nmore\n");
    EXPECT_EQ(NotOwnedBy(repo, c.who.uid, c.who.gid), std::vector<std::string>{});
    // The global config went to the sandbox's home, not to the workspace or the host.
    EXPECT_NE(access((c.host_ws + "/.gitconfig").c_str(), F_OK), 0);
    EXPECT_EQ(system(("rm -rf " + repo).c_str()), 0);
  }
}

TEST_F(AgentRootfsTest, TheAgentClisReportTheirVersions) {
  std::string id = Create(Agent());
  for (const char* cli : {"claude", "codex", "opencode"}) {
    CliResult r = Bash(Agent(), id, absl::StrCat("command -v ", cli, " && timeout 120 ", cli,
                                                 " --version"));
    EXPECT_EQ(r.exit_code, 0) << cli << ": " << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.out, "/usr/local/bin/")) << r.out;
  }
}

TEST_F(AgentRootfsTest, NpmInstallsALocalPackageIntoTheWorkspaceWithoutANetwork) {
  std::string id = Create(Agent());
  CliResult r = Bash(
      Agent(), id,
      "set -e; cd /workspace && mkdir -p npmcase/greet npmcase/app && cd npmcase && "
      "printf '{\"name\":\"greet\",\"version\":\"1.2.3\",\"main\":\"index.js\"}' > greet/package.json && "
      "echo 'exports.hello = () => \"hello from greet\";' > greet/index.js && "
      "npm pack --silent ./greet > /dev/null && cd app && npm init -y > /dev/null && "
      "npm install --offline --no-audit --no-fund --loglevel=error ../greet-1.2.3.tgz && "
      "node -e 'console.log(require(\"greet\").hello())' && "
      "node -e 'console.log(require(\"./package.json\").dependencies.greet)'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "hello from greet\n")) << r.out;
  std::string installed = Agent().host_ws + "/npmcase/app/node_modules/greet/index.js";
  EXPECT_TRUE(absl::StrContains(Slurp(installed), "hello from greet")) << installed;
  EXPECT_EQ(NotOwnedBy(Agent().host_ws + "/npmcase", kAgentUid, kAgentUid),
            std::vector<std::string>{});
  EXPECT_EQ(system(("rm -rf " + Agent().host_ws + "/npmcase").c_str()), 0);
}

TEST_F(AgentRootfsTest, ThePackagesAnAgentCallsAreThere) {
  std::string id = Create(Agent());
  CliResult r = Bash(Agent(), id,
                     "python3 -c 'import sys, os; print(\"py\", sys.version_info[0], "
                     "os.getuid())' && rg --version | head -1 && ssh -V && curl --version | "
                     "head -1 && ps -o pid= -p $$ && less --version | head -1 && "
                     "xz --version | head -1 && tar --version | head -1 && find --version | head -1");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "py 3 4545\n")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "ripgrep")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "OpenSSH")) << r.out;
}

// Regression: runsc 20221219 refuses statx(2) with AT_NO_AUTOMOUNT (EINVAL), which coreutils 9
// passes on every stat, so `ls -l` and `stat` failed on every path; the agent rootfs preloads a
// statx that retries without the flag (gVisor has no automounts).
TEST_F(AgentRootfsTest, CoreutilsListAndStatFiles) {
  std::string id = Create(Agent());
  CliResult r = Bash(Agent(), id,
                     "ls -ld / /home/agent | awk '{print $1, $3}' && stat -c '%a %U %n' "
                     "/usr/local/bin/node && cd /workspace && touch f && ls -l f | awk '{print $3}' "
                     "&& cp -a f g && mv g h && du -s h > /dev/null && rm f h && echo done");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "drwxr-xr-x root\ndrwx------ agent\n755 root /usr/local/bin/node\nagent\ndone\n");
}

// Regression (runsc 20240729): lgetxattr(2) of a symlink answers EBADF, so `ls -l` of any
// symlink printed "ls: /bin: Bad file descriptor" and exited 1 (libselinux asks for
// security.selinux); the preload turns that EBADF into EOPNOTSUPP, as Linux answers.
TEST_F(AgentRootfsTest, ListingSymlinksLongSucceedsQuietly) {
  std::string id = Create(Agent());
  CliResult r = Bash(Agent(), id,
                     "ls -l /bin /usr/bin/sh | awk '{print $1, $NF}'; echo \"ls=${PIPESTATUS[0]}\"; "
                     "cd /workspace && ln -s target link && ls -l link | awk '{print $NF}'; rm link");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, "lrwxrwxrwx usr/bin\nlrwxrwxrwx dash\nls=0\ntarget\n");
}

TEST_F(AgentRootfsTest, TheHomeIsWritableAndTheRootfsIsNot) {
  std::string id = Create(Agent());
  CliResult r = Bash(Agent(), id,
                     "echo \"home=$HOME user=$(whoami)\"; mkdir -p ~/.cache/x && echo ok > "
                     "~/.cache/x/f && cat ~/.cache/x/f; awk '$2==\"/\"{print \"root=\" $4}' "
                     "/proc/mounts | cut -d, -f1; for p in /usr/local/bin /opt/paseo-agents /etc; "
                     "do touch $p/x 2>/dev/null && echo \"wrote $p\"; done; echo end");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "home=/home/agent user=agent\nok\nroot=ro\nend\n");
}

// The host's /etc and /home are not the sandbox's: files put there now are not visible inside.
TEST_F(AgentRootfsTest, NothingFromTheHostsEtcOrHomeIsVisible) {
  std::string marker = absl::StrCat("paseo-it-marker-", getpid());
  std::string etc_marker = "/etc/" + marker;
  std::string home_marker = "/home/" + marker;
  std::ofstream(etc_marker) << "host secret\n";
  ASSERT_EQ(mkdir(home_marker.c_str(), 0755), 0);
  std::string id = Create(Agent());
  CliResult r = Bash(Agent(), id,
                     absl::StrCat("ls -A /home; cat /etc/", marker, " 2>/dev/null; ls /home/",
                                  marker, " 2>/dev/null; echo end"));
  unlink(etc_marker.c_str());
  rmdir(home_marker.c_str());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(absl::StrContains(r.out, "host secret")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, marker)) << r.out;
  EXPECT_EQ(r.out, "agent\nend\n");
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  std::string rootfs = paseo::testing::AgentRootfsFromEnv("agent_rootfs_test");
  if (rootfs.empty()) return 1;
  paseo::testing::ServiceOptions options;
  options.extra_rootfs = rootfs;
  options.before_start = paseo::testing::LayOut;
  return paseo::testing::RunTestsWithOwnService(argc, argv, options, &paseo::testing::g_service);
}
