// A compromised broker gets no more than an authorized client: a real privhelper serves
// testing/hostile_broker.cc in place of the broker, and every request outside policy is refused
// by the privhelper itself, with nothing left behind.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

std::map<std::string, std::string> Outcomes(const std::string& log) {
  std::map<std::string, std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("HOSTILE ", 0) != 0) continue;
    std::string rest = line.substr(8);
    auto sp = rest.find(' ');
    out[rest.substr(0, sp)] = sp == std::string::npos ? "" : rest.substr(sp + 1);
  }
  return out;
}

TEST(HostileBrokerTest, EveryRequestOutsidePolicyIsRefusedByThePrivhelper) {
  ServiceOptions options;
  options.broker_runfile = "testing/hostile_broker";
  options.wait_for_socket = false;
  options.before_start = [](const std::string& base) {
    ASSERT_EQ(symlink((base + "/outside").c_str(), (base + "/ws-alpha/escape").c_str()), 0);
    // Root's own 0700 directory inside alpha's root, with an open one beneath it.
    ASSERT_EQ(mkdir((base + "/ws-alpha/locked").c_str(), 0700), 0);
    ASSERT_EQ(mkdir((base + "/ws-alpha/locked/inner").c_str(), 0755), 0);
  };
  Service svc(options);
  // The hostile broker exits when done (and the privhelper would restart it): wait for its
  // first run to finish, then stop the service.
  for (int i = 0; i < 1200 && !absl::StrContains(svc.Log(), "HOSTILE done"); ++i) usleep(100000);
  svc.Stop();
  auto outcomes = Outcomes(svc.Log().substr(0, svc.Log().find("HOSTILE done") + 12));
  ASSERT_TRUE(outcomes.count("done")) << svc.Log();
  for (const auto& [name, outcome] : outcomes) std::printf("%s: %s\n", name.c_str(), outcome.c_str());

  const std::map<std::string, std::string> refused = {
      {"id-traversal", "invalid-argument"},
      {"id-uppercase", "invalid-argument"},
      {"host-etc", "permission-denied"},
      {"dotdot", "invalid-argument"},
      {"symlink-out", "symlink"},
      {"other-deployment-root", "not beneath any workspace root"},
      {"unknown-deployment", "permission-denied"},
      {"unknown-profile", "permission-denied"},
      {"dest-proc", "invalid-argument"},
      {"dest-rootfs-symlink", "symlink in the sandbox's rootfs"},
      {"nul-in-path", "NUL"},
      {"proc-magic-link", "permission-denied"},
      {"duplicate-id", "already-exists"},
      {"start-missing-sandbox", "not-found"},
      {"start-bad-process-id", "invalid-argument"},
      {"duplicate-process", "already-exists"},
      {"wait-missing", "not-found"},
      {"signal-out-of-range", "invalid-argument"},
      {"signal-zero", "invalid-argument"},
      {"wait-traversal", "invalid-argument"},
      {"reattach-traversal", "invalid-argument"},
      {"close-input-nul", "invalid-argument"},
      {"nul-in-deployment", "invalid-argument"},
      {"peer-root", "permission-denied: peerUid: deployment alpha does not allow uid 0"},
      {"peer-of-another-deployment", "does not allow uid 4343"},
      {"peer-not-named", "does not allow uid 0 (no gids)"},
      {"peer-allowed-but-locked-out", "uid 4242 (gids 4242) may not search"},
      {"delete-traversal", "invalid-argument"},
      {"delete-twice", "not-found"},
  };
  for (const auto& [name, reason] : refused) {
    ASSERT_TRUE(outcomes.count(name)) << name << " not attempted:\n" << svc.Log();
    EXPECT_TRUE(absl::StartsWith(outcomes[name], "refused")) << name << ": " << outcomes[name];
    EXPECT_TRUE(absl::StrContains(outcomes[name], reason)) << name << ": " << outcomes[name];
  }
  for (const char* name : {"legit-create", "legit-start", "legit-delete"}) {
    EXPECT_EQ(outcomes[name], "ok") << name << ":\n" << svc.Log();
  }
  // Nothing from outside the roots was ever mounted or bundled, and nothing is left.
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

}  // namespace
}  // namespace paseo::testing
