// The privhelper's serving capability list (privhelper/capabilities.h) is minimal: with all of
// it, agents run and write their workspace; without any single entry, a named operation fails.
// Each case starts its own real privhelper with `--without-capability NAME`.
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "privhelper/capabilities.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {


Identity Alpha(const Service& svc) { return {4242, 4242, {4242, svc.socket_gid()}}; }

// The named operation: create a sandbox over a 0700 workspace and write a file into it.
CliResult WriteIntoWorkspace(const Service& svc) {
  chmod((svc.base() + "/ws-alpha").c_str(), 0700);
  return svc.Cli(Alpha(svc), {"run", "--workspace", svc.base() + "/ws-alpha:/workspace:rw", "--",
                              "sh", "-c", "echo x > /workspace/made && cat /workspace/made"});
}

uint64_t CapMask(const std::string& status, const std::string& field) {
  auto pos = status.find(field + ":\t");
  if (pos == std::string::npos) return ~0ull;
  return std::stoull(status.substr(pos + field.size() + 2, 16), nullptr, 16);
}

TEST(CapabilityTest, TheFullListSufficesAndIsAllThePrivhelperHolds) {
  Service svc(ServiceOptions{});
  auto r = WriteIntoWorkspace(svc);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "x\n");
  // With the full list, a broker that dies is restarted.
  pid_t broker = svc.broker_pid();
  ASSERT_GT(broker, 0);
  kill(broker, SIGKILL);
  pid_t next = -1;
  for (int i = 0; i < 100 && (next == -1 || next == broker); ++i) {
    usleep(100000);
    next = svc.broker_pid();
  }
  EXPECT_GT(next, 0);
  EXPECT_NE(next, broker);
  uint64_t want = 0;
  for (const auto& c : ServingCapabilities()) want |= 1ull << c.cap;
  std::string status = ReadFile("/proc/" + std::to_string(svc.privhelper_pid()) + "/status");
  EXPECT_EQ(CapMask(status, "CapEff"), want) << status;
  EXPECT_EQ(CapMask(status, "CapPrm"), want) << status;
  EXPECT_EQ(CapMask(status, "CapBnd"), want) << status;
  EXPECT_EQ(CapMask(status, "CapInh"), 0u) << status;
  EXPECT_EQ(CapMask(status, "CapAmb"), 0u) << status;
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

// The network capabilities' operation, with the full list: a sandbox with network mode
// "sandbox" runs (its link is up).
TEST(CapabilityTest, TheFullListSufficesForASandboxNetwork) {
  ServiceOptions options;
  options.before_start = [](const std::string& base) {
    WriteText(base + "/etc/profiles/default.json",
              "{\"name\": \"default\", \"network\": {\"mode\": \"sandbox\"}}");
  };
  Service svc(options);
  auto r = svc.Cli(Alpha(svc), {"run", "--", "cat", "/proc/net/dev"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "eth0")) << r.out;
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

// Regression (runsc 20240729): every create failed with "cannot create gofer process: gofer:
// fork/exec /proc/self/exe: operation not permitted: check whether
// /proc/sys/user/max_user_namespaces is set too low". That runsc defaults to --directfs=true,
// and in that mode starts its gofer in a user namespace mapping uid 0 to the host's, which
// Linux 5.12+ allows only with CAP_SETFCAP. The fix is not a capability: the privhelper turns
// directfs off (runsc_command.h), and this list, entry by entry, is again all it needs.
TEST(CapabilityTest, DroppingAnyOneMakesTheNamedOperationFail) {
  for (const auto& c : ServingCapabilities()) {
    SCOPED_TRACE(c.name);
    ServiceOptions options;
    options.privhelper_args = {"--without-capability", c.name};
    bool network =
        c.cap == CAP_NET_ADMIN || c.cap == CAP_NET_RAW || c.cap == CAP_NET_BIND_SERVICE;
    if (network) {
      // Their operation is a sandbox with network mode "sandbox": the default profile gets it,
      // with a resolver (its upstream is never asked: the profile allows no name).
      options.helper_json_extra = R"(, "network": {"dnsUpstreams": ["192.0.2.53"]})";
      options.before_start = [](const std::string& base) {
        WriteText(base + "/etc/profiles/default.json",
                  "{\"name\": \"default\", \"network\": {\"mode\": \"sandbox\"}, "
                  "\"credentials\": [{\"name\": \"tokens\", \"destination\": "
                  "\"/credentials/tokens\"}]}");
      };
    }
    Service svc(options);
    if (c.cap == CAP_SETPCAP) {
      // Its operation is restarting a broker that died: kill the broker, expect no successor.
      pid_t broker = svc.broker_pid();
      ASSERT_GT(broker, 0);
      kill(broker, SIGKILL);
      sleep(4);  // the first restart comes after 1 s
      EXPECT_EQ(svc.broker_pid(), -1) << "broker restarted without cap_setpcap";
      EXPECT_TRUE(absl::StrContains(svc.Log(), "cannot restart broker")) << svc.Log();
      std::printf("without %-16s (%s): %s\n", c.name, c.needed_for, "broker not restarted");
      svc.Stop();
      continue;
    }
    auto r = WriteIntoWorkspace(svc);
    std::printf("without %-16s (%s): exit %d: %s", c.name, c.needed_for, r.exit_code,
                r.err.c_str());
    EXPECT_NE(r.exit_code, 0) << c.name << " is not needed for: " << c.needed_for;
    EXPECT_NE(r.out, "x\n");
    svc.Stop();
    std::vector<std::string> leaks = svc.Leaks();
    // Unpinning the control netns at shutdown itself needs SYS_ADMIN (umount) and SYS_CHROOT
    // (setns back into the host mount namespace): without either, the pin stays.
    std::string pin = svc.base() + "/run/control-netns";
    if ((c.cap == CAP_SYS_ADMIN || c.cap == CAP_SYS_CHROOT) && !leaks.empty() &&
        leaks.back() == "mount " + pin) {
      leaks.pop_back();
      umount2(pin.c_str(), MNT_DETACH);
    }
    EXPECT_EQ(leaks, std::vector<std::string>{});
  }
}

}  // namespace
}  // namespace paseo::testing
