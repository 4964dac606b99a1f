// kill -9 of the broker at each step of sandbox creation and deletion (observed from outside:
// while the privhelper runs `runsc create`, `runsc start`, `runsc kill` or `runsc delete` for
// it). Afterwards the sandbox either exists and works or is gone, and nothing leaks.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

Identity Alpha(const Service& svc) { return {4242, 4242, {4242, svc.socket_gid()}}; }

// Waits until the privhelper runs `runsc <step>`, then SIGKILLs the broker. True if caught.
bool KillBrokerDuring(const Service& svc, const std::string& step) {
  std::string needle = std::string("\0", 1) + step + std::string("\0", 1);
  for (int i = 0; i < 5000; ++i) {
    for (pid_t pid : ChildrenOf(svc.privhelper_pid())) {
      std::string cmd = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
      if (absl::StartsWith(cmd, "runsc") && absl::StrContains(cmd, needle)) {
        kill(svc.broker_pid(), SIGKILL);
        return true;
      }
    }
    usleep(1000);
  }
  return false;
}

void WaitForBroker(const Service& svc, pid_t old) {
  for (int i = 0; i < 200; ++i) {
    pid_t now = svc.broker_pid();
    if (now > 0 && now != old) {
      // Serving once a client gets an answer.
      if (svc.Cli(Alpha(svc), {"info"}).exit_code == 0) return;
    }
    usleep(100000);
  }
  ADD_FAILURE() << "no broker came back";
}

// Either the sandbox is listed and works (then it is deleted), or it is gone.
void ExpectWorkingOrGone(const Service& svc) {
  auto ps = svc.Cli(Alpha(svc), {"--json", "ps"});
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  size_t pos = 0;
  while ((pos = ps.out.find("\"id\":\"sb-", pos)) != std::string::npos) {
    std::string id = ps.out.substr(pos + 6, 27);
    pos += 6;
    auto exec = svc.Cli(Alpha(svc), {"exec", id, "--", "echo", "works"});
    EXPECT_EQ(exec.exit_code, 0) << "sandbox " << id << " exists but does not work: " << exec.err;
    EXPECT_EQ(exec.out, "works\n");
    auto rm = svc.Cli(Alpha(svc), {"rm", id});
    EXPECT_EQ(rm.exit_code, 0) << rm.err;
  }
  EXPECT_EQ(svc.LeaksAfter(5), std::vector<std::string>{});
}

class BrokerCrashTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BrokerCrashTest, DuringCreateTheSandboxEndsUpWorkingOrGone) {
  Service& svc = Service::Get();
  pid_t old = svc.broker_pid();
  std::thread client([&] { svc.Cli(Alpha(svc), {"run", "--", "true"}); });
  bool caught = KillBrokerDuring(svc, GetParam());
  client.join();
  ASSERT_TRUE(caught) << "never saw runsc " << GetParam();
  WaitForBroker(svc, old);
  ExpectWorkingOrGone(svc);
}

// The sandbox is created and started by one `runsc run --detach` (decision 40).
INSTANTIATE_TEST_SUITE_P(Steps, BrokerCrashTest, ::testing::Values("run"));

class BrokerCrashDeleteTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BrokerCrashDeleteTest, DuringDeleteTheSandboxEndsUpGone) {
  Service& svc = Service::Get();
  auto kept = svc.Cli(Alpha(svc), {"run", "--keep", "--", "true"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  std::string id = kept.err.substr(kept.err.find("sb-"), 27);
  pid_t old = svc.broker_pid();
  std::thread client([&] { svc.Cli(Alpha(svc), {"rm", id}); });
  bool caught = KillBrokerDuring(svc, GetParam());
  client.join();
  ASSERT_TRUE(caught) << "never saw runsc " << GetParam();
  WaitForBroker(svc, old);
  auto ps = svc.Cli(Alpha(svc), {"ps"});
  EXPECT_FALSE(absl::StrContains(ps.out, id)) << "the delete did not complete: " << ps.out;
  ExpectWorkingOrGone(svc);
}

// A delete stops the sandbox's init with `runsc kill`, unless the init is the spawner, which is
// told to exit instead (decision 41): then `delete` is the only runsc step of a delete.
std::vector<std::string> DeleteSteps() {
  const char* path = getenv("PASEO_TEST_PROCESS_PATH");
  if (path != nullptr && std::string(path) == "runsc-exec") return {"kill", "delete"};
  return {"delete"};
}

INSTANTIATE_TEST_SUITE_P(Steps, BrokerCrashDeleteTest, ::testing::ValuesIn(DeleteSteps()));

// Regression: `logs --stream stderr -f SB P 2>file` across a broker restart ended `file` with
// "paseo-sandbox: PromiseFulfiller was destroyed without fulfilling the promise.", so a reader
// resuming from the bytes it had resumed from corrupted data. Now logs reconnects by itself
// and resumes at the next byte: stderr holds the stream's bytes, each once, and nothing else.
// `exec`, attached when the broker died, reports the loss in words to its --messages file, and
// its stderr holds only the bytes it got.
TEST(BrokerCrashLogsTest, LogsFollowResumesAcrossABrokerRestart) {
  Service& svc = Service::Get();
  auto kept = svc.Cli(Alpha(svc), {"run", "--keep", "--", "true"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  std::string id = kept.err.substr(kept.err.find("sb-"), 27);
  std::string dir = svc.base() + "/cli-messages";
  ASSERT_EQ(mkdir(dir.c_str(), 0777), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  std::string messages = dir + "/exec";
  // 60 numbered lines on stderr, 50 ms apart: still writing when the broker dies.
  std::string script =
      "i=0; while [ $i -lt 60 ]; do echo line$i >&2; i=$((i+1)); sleep 0.05; done";
  std::string expected;
  for (int i = 0; i < 60; ++i) expected += "line" + std::to_string(i) + "\n";

  CliResult exec, logs;
  std::thread exec_thread([&] {
    exec = svc.Cli(Alpha(svc), {"--messages", messages, "exec", id, "--", "sh", "-c", script});
  });
  std::string process;
  for (int i = 0; i < 200 && process.empty(); ++i) {
    auto ps = svc.Cli(Alpha(svc), {"--json", "ps"});
    // Not the kept sandbox's first process (`true`): the one running sh.
    size_t sh = ps.out.find("\"argv\":[\"sh\"");
    size_t at = sh == std::string::npos ? sh : ps.out.rfind("\"id\":\"p-", sh);
    if (at != std::string::npos) {
      at += 6;
      process = ps.out.substr(at, ps.out.find('"', at) - at);
    } else {
      usleep(50000);
    }
  }
  ASSERT_FALSE(process.empty()) << "the exec'd process never showed up";
  std::thread logs_thread([&] {
    logs = svc.Cli(Alpha(svc), {"logs", "--stream", "stderr", "-f", id, process});
  });
  usleep(800000);  // logs is following, a dozen lines in
  pid_t old = svc.broker_pid();
  ASSERT_GT(old, 0);
  kill(old, SIGKILL);
  logs_thread.join();
  exec_thread.join();

  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_EQ(logs.err, expected) << "only the stream's bytes, each once";
  EXPECT_EQ(logs.out, "");
  EXPECT_EQ(exec.exit_code, 125);
  EXPECT_EQ(exec.err, expected.substr(0, exec.err.size())) << "only the stream's bytes";
  std::string words = ReadFile(messages);
  EXPECT_TRUE(absl::StrContains(words, "paseo-sandbox: the connection to the service was lost at "
                                       "stdout offset 0 and stderr offset " +
                                           std::to_string(exec.err.size())))
      << words;
  EXPECT_TRUE(absl::StrContains(words, "paseo-sandbox attach " + id + " " + process)) << words;
  EXPECT_FALSE(absl::StrContains(logs.err + exec.err + words, "PromiseFulfiller"));
  WaitForBroker(svc, old);
  auto rm = svc.Cli(Alpha(svc), {"rm", id});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  return paseo::testing::RunTestsWithSharedService(argc, argv);
}
