// Root suite for the agent's writable home (schema/config.capnp LaunchProfile.homePath and
// homeBytes) and the sandbox's own /etc/passwd entry for its run-as uid, on the real privhelper,
// broker and runsc, through the CLI as a client would. The service has its own deployment
// "homes" (client and agent uid 4242) with the profiles:
//   default      the shared default (256 MiB home at /home/agent)
//   home-small   a 4 MiB home with the credential "tokens" placed beneath it, read-only
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

Service* g_service = nullptr;

void LayOut(const std::string& base) {
  auto write = [&base](const std::string& rel, const std::string& text) {
    std::ofstream(base + "/etc/" + rel) << text;
  };
  write("profiles/home-small.json",
        R"({"name": "home-small", "homeBytes": 4194304, "credentials": [{"name": "tokens",
            "destination": "/home/agent/.config/tokens"}]})");
  write("deployments/homes.json",
        absl::StrCat(R"({"id": "homes", "allowedUids": [4242], "profiles": ["default", "home-small"],
            "workspaceRoots": [{"hostPath": ")", base, R"(/ws-alpha"}],
            "credentialRoots": [{"name": "tokens", "hostPath": ")", base, R"(/creds/tokens"}]})"));
}

class HomeTest : public ::testing::Test {
 protected:
  Service& svc = *g_service;
  Identity Agent() const { return {4242, 4242, {4242, svc.socket_gid()}}; }

  CliResult Cli(std::vector<std::string> args) {
    if (args[0] == "run" || args[0] == "create") args.insert(args.begin() + 1, "--deployment=homes");
    return svc.Cli(Agent(), args);
  }
  // `sh -c script` in a fresh sandbox of `profile`; its stdout and stderr together.
  CliResult Run(const std::string& script, std::vector<std::string> options = {}) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {"--", "sh", "-c", "{ " + script + "; } 2>&1"});
    return Cli(args);
  }
  std::string Create(const std::string& key) {
    CliResult r = Cli({"create", "--key=" + key});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return std::string(absl::StripAsciiWhitespace(r.out));
  }
  CliResult Exec(const std::string& id, const std::string& script) {
    return svc.Cli(Agent(), {"exec", id, "--", "sh", "-c", "{ " + script + "; } 2>&1"});
  }

  void TearDown() override { EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{}); }
};

TEST_F(HomeTest, TheHomeIsTheAgentsOwnWritableDirectoryAndTheRootIsNot) {
  CliResult r = Run(
      "echo \"home=$HOME\"; echo \"id=$(id -u):$(id -g) $(id -un):$(id -gn)\"; "
      "stat -c 'mode=%u:%g:%a' \"$HOME\"; grep '^agent:' /etc/passwd /etc/group; "
      "echo remembered > \"$HOME/.agentrc\" && cat \"$HOME/.agentrc\"; "
      "for p in /etc/x /usr/x /x /home/x; do touch $p || echo \"refused $p\"; done");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* want :
       {"home=/home/agent\n", "id=4242:4242 agent:agent\n", "mode=4242:4242:700\n",
        "/etc/passwd:agent:x:4242:4242:agent:/home/agent:/bin/sh\n", "/etc/group:agent:x:4242:\n",
        "remembered\n", "refused /etc/x", "refused /usr/x", "refused /x\n", "refused /home/x"})
    EXPECT_TRUE(absl::StrContains(r.out, want)) << want << " in\n" << r.out;
  // The shared rootfs was not changed by the sandbox's own passwd.
  std::ifstream passwd(svc.base() + "/state/rootfs/" + svc.rootfs_version() + "/rootfs/etc/passwd");
  std::string line, shared;
  while (std::getline(passwd, line)) shared += line + "\n";
  EXPECT_FALSE(absl::StrContains(shared, "4242")) << shared;
  EXPECT_TRUE(absl::StrContains(shared, "agent:x:1000:1000:")) << shared;
}

TEST_F(HomeTest, AHomeTheClientNamesWins) {
  CliResult r = Run("echo \"home=$HOME\"", {"--env=HOME=/tmp"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "home=/tmp\n");
}

TEST_F(HomeTest, TheProfileBoundsItsSize) {
  CliResult r = Run(
      "df -k \"$HOME\" | tail -1 | awk '{print \"size=\" $2}'; "
      "dd if=/dev/zero of=\"$HOME/fill\" bs=1M count=8; echo \"dd=$?\"; "
      "ls -l \"$HOME/fill\" | awk '{print \"kept=\" $5}'; "
      "echo still > /tmp/t && cat /tmp/t",
      {"--profile=home-small"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "size=4096\n")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "No space left on device")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "dd=1\n")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "still\n")) << r.out;
  // What fit is the bound, not more.
  size_t kept = r.out.find("kept=");
  ASSERT_NE(kept, std::string::npos) << r.out;
  EXPECT_LE(std::stoull(r.out.substr(kept + 5)), 4ull << 20);
}

TEST_F(HomeTest, KeptAcrossPauseAndResumeNotSharedAndGoneWithTheSandbox) {
  std::string first = Create("home-a");
  std::string other = Create("home-b");
  ASSERT_NE(first, other);
  ASSERT_EQ(Exec(first, "echo kept > \"$HOME/state\"").exit_code, 0);
  ASSERT_EQ(Cli({"pause", first}).exit_code, 0);
  ASSERT_EQ(Cli({"resume", first}).exit_code, 0);
  CliResult read = Exec(first, "cat \"$HOME/state\"");
  EXPECT_EQ(read.exit_code, 0);
  EXPECT_EQ(read.out, "kept\n");
  // Another sandbox of the same deployment and uid has a home of its own.
  CliResult elsewhere = Exec(other, "ls -A \"$HOME\"; echo end");
  EXPECT_EQ(elsewhere.out, "end\n");

  ASSERT_EQ(Cli({"rm", first}).exit_code, 0);
  // The same key makes a new sandbox, with an empty home.
  std::string again = Create("home-a");
  ASSERT_NE(again, first);
  CliResult fresh = Exec(again, "ls -A \"$HOME\"; echo end");
  EXPECT_EQ(fresh.out, "end\n");
  EXPECT_EQ(Cli({"rm", again, other}).exit_code, 0);
}

TEST_F(HomeTest, ACredentialBeneathTheHomeStaysReadOnlyInAWritableHome) {
  CliResult r = Run(
      "cat \"$HOME/.config/tokens/token\"; "
      "echo stolen > \"$HOME/.config/tokens/token\" || echo refused-token; "
      "touch \"$HOME/.config/tokens/new\" || echo refused-new; "
      "echo mine > \"$HOME/.config/settings\" && cat \"$HOME/.config/settings\"",
      {"--profile=home-small", "--credential=tokens"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* want : {"s3cret-token\n", "refused-token\n", "refused-new\n", "mine\n"})
    EXPECT_TRUE(absl::StrContains(r.out, want)) << want << " in\n" << r.out;
  std::ifstream token(svc.base() + "/creds/tokens/token");
  std::string text;
  std::getline(token, text);
  EXPECT_EQ(text, "s3cret-token");
}

TEST_F(HomeTest, AWorkspaceMayLieBeneathTheHomeButNotCoverIt) {
  std::string ws = svc.base() + "/ws-alpha";
  for (const char* dest : {"/home/agent", "/home"}) {
    CliResult r = Run("echo ran", {absl::StrCat("--workspace=", ws, ":", dest, ":rw")});
    EXPECT_NE(r.exit_code, 0) << dest;
    EXPECT_FALSE(absl::StrContains(r.out, "ran")) << dest;
    EXPECT_TRUE(absl::StrContains(r.err, "covers the sandbox's home /home/agent")) << r.err;
  }
  CliResult beneath = Run("pwd; echo x > \"$HOME/x\" && echo home-ok; touch proj-file && echo ws-ok",
                          {absl::StrCat("--workspace=", ws, ":/home/agent/project:rw")});
  ASSERT_EQ(beneath.exit_code, 0) << beneath.out << beneath.err;
  EXPECT_EQ(beneath.out, "/home/agent/project\nhome-ok\nws-ok\n");
  EXPECT_EQ(access((ws + "/proj-file").c_str(), F_OK), 0);
  unlink((ws + "/proj-file").c_str());
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  paseo::testing::ServiceOptions options;
  options.before_start = paseo::testing::LayOut;
  return paseo::testing::RunTestsWithOwnService(argc, argv, options, &paseo::testing::g_service);
}
