#include "privhelper/config.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

namespace fs = std::filesystem;

constexpr char kSha[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// The smallest helper.json that validates: everything else comes from schema defaults.
// `extra`: more fields of helper.json ("name": value, ...).
std::string MinimalHelper(const std::string& extra = "") {
  return absl::StrCat(R"({"runsc": {"sha256": ")", kSha, R"("}, "rootfsVersion": "v1")",
                      extra.empty() ? "" : ", ", extra, "}");
}

std::string MinimalDeployment(const std::string& id = "paseo-main") {
  return absl::StrCat(R"({"id": ")", id, R"(",
    "allowedUids": [1000],
    "workspaceRoots": [{"hostPath": "/srv/paseo/workspace", "clientPath": "/workspace"}],
    "runAs": {"uid": 1000, "gid": 1000}})");
}

// Writes config directories into a fresh temporary directory per test.
class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string tmpl =
        absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/config_test.XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl;
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Writes <dir>/<rel> (creating parents) and returns the full path.
  std::string Write(const std::string& rel, const std::string& content) {
    std::string path = absl::StrCat(dir_, "/", rel);
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
    out.close();
    EXPECT_TRUE(out.good()) << "writing " << path;
    return path;
  }
  std::string Path(const std::string& rel) const { return absl::StrCat(dir_, "/", rel); }

  void WriteMinimal() {
    Write("helper.json", MinimalHelper());
    Write("deployments/main.json", MinimalDeployment());
  }

  std::string dir_;
};

TEST_F(ConfigTest, MinimalConfigLoadsWithDefaults) {
  WriteMinimal();
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  const Config& c = **config;

  auto h = c.helper();
  EXPECT_EQ(std::string(h.getStateDir().cStr()), "/var/lib/paseo-sandbox");
  EXPECT_EQ(std::string(h.getRunDir().cStr()), "/run/paseo-sandbox");
  EXPECT_EQ(std::string(h.getBrokerUser().cStr()), "paseo-sandbox");
  EXPECT_EQ(std::string(h.getSocketGroup().cStr()), "paseo-sandbox");
  EXPECT_EQ(std::string(h.getRunsc().getPath().cStr()), "/usr/bin/runsc");
  EXPECT_EQ(std::string(h.getRunsc().getSha256().cStr()), kSha);
  EXPECT_EQ(std::string(h.getRunsc().getPlatform().cStr()), "auto");
  EXPECT_EQ(std::string(h.getRootfsVersion().cStr()), "v1");
  EXPECT_EQ(c.BrokerBinary("/usr/libexec/paseo-sandbox/paseo-sandbox-privhelper"),
            "/usr/libexec/paseo-sandbox/paseo-sandbox-broker");

  ASSERT_EQ(c.deployments().size(), 1u);
  const config::Deployment::Reader* d = c.FindDeployment("paseo-main");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(std::string(d->getId().cStr()), "paseo-main");
  ASSERT_EQ(d->getAllowedUids().size(), 1u);
  EXPECT_EQ(d->getAllowedUids()[0], 1000u);
  EXPECT_EQ(d->getAllowedGids().size(), 0u);
  ASSERT_EQ(d->getWorkspaceRoots().size(), 1u);
  EXPECT_EQ(std::string(d->getWorkspaceRoots()[0].getHostPath().cStr()), "/srv/paseo/workspace");
  EXPECT_EQ(std::string(d->getWorkspaceRoots()[0].getClientPath().cStr()), "/workspace");
  ASSERT_TRUE(d->hasRunAs());
  EXPECT_EQ(d->getRunAs().getUid(), 1000u);
  EXPECT_EQ(d->getRunAs().getGid(), 1000u);
  EXPECT_EQ(c.FindDeployment("paseo"), nullptr);
  EXPECT_EQ(c.FindDeployment("paseo-main2"), nullptr);
  EXPECT_EQ(c.FindDeployment(""), nullptr);

  // No profiles/ directory: an implicit "default" profile with the schema's defaults.
  EXPECT_EQ(c.ProfilesOf(*d), std::vector<std::string>{"default"});
  ASSERT_EQ(c.profiles().size(), 1u);
  const config::LaunchProfile::Reader* p = c.FindProfile("default");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(std::string(p->getName().cStr()), "default");
  EXPECT_EQ(p->getRootfsVersion().size(), 0u);
  EXPECT_EQ(p->getOutputBufferBytes(), 8388608u);
  // No bound is left off: each one the profile omits is this host's default.
  EXPECT_EQ(c.LimitsOf(*p), DefaultLimits(c.host()));
  EXPECT_GT(p->getMemoryLimitBytes(), 0u);
  EXPECT_EQ(p->getTmpfsBytes(), 67108864u);
  EXPECT_EQ(c.FindProfile("gpu"), nullptr);
  EXPECT_EQ(c.RootfsPath(*p), "/var/lib/paseo-sandbox/rootfs/v1/rootfs");
}

// A reload swaps in new deployments while readers of the old generation stay usable (a create
// in flight holds its deployment's and profile's).
TEST_F(ConfigTest, ReplaceWithSwapsDeploymentsAndKeepsOldReadersValid) {
  WriteMinimal();
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  const config::Deployment::Reader* old = (*config)->FindDeployment("paseo-main");
  ASSERT_NE(old, nullptr);
  Write("deployments/second.json", MinimalDeployment("second"));
  auto next = LoadConfig(dir_);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE((*config)->ReplaceWith(std::move(*next)).ok());
  EXPECT_NE((*config)->FindDeployment("second"), nullptr);
  EXPECT_EQ((*config)->deployments().size(), 2u);
  EXPECT_EQ(std::string(old->getId().cStr()), "paseo-main");
  EXPECT_EQ(old->getAllowedUids()[0], 1000u);

  fs::remove(Path("deployments/second.json"));
  auto third = LoadConfig(dir_);
  ASSERT_TRUE(third.ok()) << third.status();
  ASSERT_TRUE((*config)->ReplaceWith(std::move(*third)).ok());
  EXPECT_EQ((*config)->FindDeployment("second"), nullptr);
}

// `paseo-sandbox-admin gc` reloads too: an unchanged config must be recognized as such, so the
// broker is not restarted for nothing.
TEST_F(ConfigTest, SameAsTellsAnUnchangedConfigFromAChangedOne) {
  WriteMinimal();
  auto a = LoadConfig(dir_);
  auto b = LoadConfig(dir_);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)->SameAs(**b));
  Write("deployments/main.json", MinimalDeployment("paseo-main").replace(
                                     MinimalDeployment().find("1000"), 4, "1001"));
  auto c = LoadConfig(dir_);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE((*a)->SameAs(**c));
  WriteMinimal();
  Write("profiles/small.json", R"({"name": "small", "memoryLimitBytes": 167772160})");
  auto d = LoadConfig(dir_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_FALSE((*a)->SameAs(**d));
}

// helper.json decides directories, runsc and the socket, set up once: a reload that changes it
// is refused whole.
TEST_F(ConfigTest, ReplaceWithRefusesAChangedHelper) {
  WriteMinimal();
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  Write("helper.json", absl::StrCat(R"({"runsc": {"sha256": ")", kSha,
                                    R"("}, "rootfsVersion": "v1", "stateDir": "/srv/other"})"));
  Write("deployments/second.json", MinimalDeployment("second"));
  auto next = LoadConfig(dir_);
  ASSERT_TRUE(next.ok()) << next.status();
  absl::Status replaced = (*config)->ReplaceWith(std::move(*next));
  EXPECT_EQ(replaced.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(replaced.message(), "helper.json changed")) << replaced;
  EXPECT_EQ((*config)->FindDeployment("second"), nullptr);
  EXPECT_EQ(std::string((*config)->helper().getStateDir().cStr()), "/var/lib/paseo-sandbox");
}

// Writing a default explicitly is no change.
TEST_F(ConfigTest, ReplaceWithAcceptsAnEquivalentHelper) {
  WriteMinimal();
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  Write("helper.json", absl::StrCat(R"({"runsc": {"sha256": ")", kSha,
                                    R"("}, "rootfsVersion": "v1", "onRestart": "kill"})"));
  auto next = LoadConfig(dir_);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_TRUE((*config)->ReplaceWith(std::move(*next)).ok());
}

TEST_F(ConfigTest, FullConfigLoadsEveryField) {
  Write("helper.json", absl::StrCat(R"({
    "stateDir": "/srv/state",
    "runDir": "/run/ps",
    "brokerUser": "broker",
    "socketGroup": "clients",
    "brokerBinary": "/opt/ps/bin/broker",
    "runsc": {"path": "/opt/gvisor/runsc", "sha256": ")", kSha, R"(", "platform": "kvm"},
    "rootfsVersion": "v1"
  })"));
  Write("profiles/big.json", R"({"name": "big", "rootfsVersion": "v2",
    "outputBufferBytes": 4096, "memoryLimitBytes": 1073741824, "tmpfsBytes": 1048576})");
  Write("profiles/default.json", R"({"name": "default", "tmpfsBytes": 2097152})");
  Write("deployments/b.json", R"({"id": "team-b", "allowedGids": [2000, 2001],
    "workspaceRoots": [{"hostPath": "/srv/b"}, {"hostPath": "/srv/b2", "clientPath": "/w"}],
    "profiles": ["big", "default"]})");
  Write("deployments/a.json", MinimalDeployment("team-a"));
  Write("deployments/README", "not a deployment");

  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  const Config& c = **config;
  auto h = c.helper();
  EXPECT_EQ(std::string(h.getStateDir().cStr()), "/srv/state");
  EXPECT_EQ(std::string(h.getRunDir().cStr()), "/run/ps");
  EXPECT_EQ(std::string(h.getBrokerUser().cStr()), "broker");
  EXPECT_EQ(std::string(h.getSocketGroup().cStr()), "clients");
  EXPECT_EQ(std::string(h.getRunsc().getPath().cStr()), "/opt/gvisor/runsc");
  EXPECT_EQ(std::string(h.getRunsc().getPlatform().cStr()), "kvm");
  EXPECT_EQ(c.BrokerBinary("/usr/libexec/paseo-sandbox/paseo-sandbox-privhelper"),
            "/opt/ps/bin/broker");

  // An explicit default profile replaces the implicit one; nothing is duplicated.
  ASSERT_EQ(c.profiles().size(), 2u);
  const config::LaunchProfile::Reader* def = c.FindProfile("default");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ(def->getTmpfsBytes(), 2097152u);
  EXPECT_EQ(std::string(def->getHomePath().cStr()), "/home/agent");
  EXPECT_EQ(def->getHomeBytes(), 256u << 20);
  EXPECT_EQ(c.RootfsPath(*def), "/srv/state/rootfs/v1/rootfs");
  const config::LaunchProfile::Reader* big = c.FindProfile("big");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->getOutputBufferBytes(), 4096u);
  EXPECT_EQ(big->getMemoryLimitBytes(), 1073741824u);
  EXPECT_EQ(big->getTmpfsBytes(), 1048576u);
  EXPECT_EQ(c.RootfsPath(*big), "/srv/state/rootfs/v2/rootfs");

  ASSERT_EQ(c.deployments().size(), 2u);  // README ignored
  const config::Deployment::Reader* a = c.FindDeployment("team-a");
  const config::Deployment::Reader* b = c.FindDeployment("team-b");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(c.ProfilesOf(*a), std::vector<std::string>{"default"});
  EXPECT_EQ(c.ProfilesOf(*b), (std::vector<std::string>{"big", "default"}));
  EXPECT_EQ(b->getAllowedUids().size(), 0u);
  ASSERT_EQ(b->getAllowedGids().size(), 2u);
  EXPECT_EQ(b->getAllowedGids()[1], 2001u);
  EXPECT_FALSE(b->hasRunAs());
  ASSERT_EQ(b->getWorkspaceRoots().size(), 2u);
  EXPECT_EQ(b->getWorkspaceRoots()[0].getClientPath().size(), 0u);
  EXPECT_EQ(std::string(b->getWorkspaceRoots()[1].getClientPath().cStr()), "/w");
}

TEST_F(ConfigTest, ToolRootsAndToolMountsLoad) {
  Write("helper.json", MinimalHelper());
  Write("profiles/default.json", R"({"name": "default", "tools": [
      {"name": "paseo-helper", "destination": "/opt/paseo/bin"},
      {"name": "node", "destination": "/opt/node/bin"}]})");
  Write("profiles/bare.json", R"({"name": "bare"})");
  // A host deployment names host paths; a Docker one names its container's path, beneath a
  // workspace root's clientPath.
  Write("deployments/host.json", R"({"id": "host", "allowedUids": [1000],
      "workspaceRoots": [{"hostPath": "/srv/w"}],
      "toolRoots": [{"name": "node", "hostPath": "/usr/lib/node/bin"},
                    {"name": "paseo-helper", "hostPath": "/usr/lib/paseo/bin"}]})");
  Write("deployments/docker.json", R"({"id": "docker", "allowedUids": [1000],
      "workspaceRoots": [{"hostPath": "/var/lib/docker/volumes/p/_data", "clientPath": "/home/paseo"}],
      "toolRoots": [{"name": "paseo-helper", "clientPath": "/home/paseo/.paseo/bin"},
                    {"name": "node", "clientPath": "/home/paseo/node/bin"}]})");
  // A deployment whose profiles place no tool needs no tool root.
  Write("deployments/plain.json", R"({"id": "plain", "allowedUids": [1000],
      "workspaceRoots": [{"hostPath": "/srv/w"}], "profiles": ["bare"]})");
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  const config::LaunchProfile::Reader* p = (*config)->FindProfile("default");
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->getTools().size(), 2u);
  EXPECT_EQ(std::string(p->getTools()[0].getName().cStr()), "paseo-helper");
  EXPECT_EQ(std::string(p->getTools()[1].getDestination().cStr()), "/opt/node/bin");
  const config::Deployment::Reader* docker = (*config)->FindDeployment("docker");
  ASSERT_NE(docker, nullptr);
  ASSERT_EQ(docker->getToolRoots().size(), 2u);
  EXPECT_EQ(std::string(docker->getToolRoots()[0].getClientPath().cStr()),
            "/home/paseo/.paseo/bin");
  EXPECT_EQ(docker->getToolRoots()[0].getHostPath().size(), 0u);
}

TEST_F(ConfigTest, SecretsLoad) {
  Write("helper.json", MinimalHelper());
  Write("profiles/default.json", R"({"name": "default",
      "network": {"mode": "sandbox", "allowNames": [{"name": "api.anthropic.com", "ports": [443]}]},
      "secrets": [{"name": "anthropic", "file": "/home/agent/.anthropic-key"}]})");
  Write("deployments/main.json", R"({"id": "main", "allowedUids": [1000],
      "workspaceRoots": [{"hostPath": "/srv/w"}],
      "secrets": [{"name": "anthropic", "path": "/etc/paseo-sandbox/secrets/anthropic",
                   "hosts": ["api.anthropic.com"], "header": "x-api-key",
                   "envVar": "ANTHROPIC_API_KEY"}]})");
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  const config::Deployment::Reader* d = (*config)->FindDeployment("main");
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->getSecrets().size(), 1u);
  EXPECT_EQ(std::string(d->getSecrets()[0].getHeader().cStr()), "x-api-key");
  EXPECT_EQ(std::string((*config)->FindProfile("default")->getSecrets()[0].getFile().cStr()),
            "/home/agent/.anthropic-key");
}

// The development machine's figures, so the expected defaults are fixed.
HostResources TestHost() {
  HostResources host;
  host.cpus = 2;
  host.memory_bytes = uint64_t{24} << 30;
  host.pid_max = 32768;
  host.threads_max = 192730;
  return host;
}

TEST_F(ConfigTest, EveryProfileGetsEveryBoundFromTheHostUnlessItSetsOne) {
  WriteMinimal();
  Write("profiles/default.json", R"({"name": "default", "tmpfsBytes": 2097152})");
  Write("profiles/mixed.json", R"({"name": "mixed", "memoryLimitBytes": 1073741824,
    "maxProcesses": 64})");
  Write("profiles/all.json", R"({"name": "all", "memoryLimitBytes": "67108864",
    "cpuMillis": 250, "maxProcesses": 16, "maxHostTasks": 256})");
  auto config = LoadConfig(dir_, TestHost());
  ASSERT_TRUE(config.ok()) << config.status();
  const Config& c = **config;
  EXPECT_EQ(c.host().pid_max, 32768u);

  const config::LaunchProfile::Reader* def = c.FindProfile("default");
  ASSERT_NE(def, nullptr);
  SandboxLimits d = c.LimitsOf(*def);
  // All sandboxes together: half of 24 GiB, 1.5 of 2 CPUs, half of 32768 host tasks.
  EXPECT_EQ(c.service().memory_bytes, uint64_t{12} << 30);
  EXPECT_EQ(c.service().cpu_millis, 1500u);
  EXPECT_EQ(c.service().max_host_tasks, 16384u);
  EXPECT_EQ(d.memory_bytes, uint64_t{2457} << 20);  // a fifth of the service's, whole MiB
  EXPECT_EQ(d.cpu_millis, 1000u);                   // half of 2 CPUs
  EXPECT_EQ(d.max_processes, 512u);                 // 32768 / 64
  EXPECT_EQ(d.max_host_tasks, 3276u);               // a fifth of the service's
  EXPECT_EQ(def->getMaxProcesses(), 512u);      // the reader itself carries the value

  const config::LaunchProfile::Reader* mixed = c.FindProfile("mixed");
  ASSERT_NE(mixed, nullptr);
  SandboxLimits m = c.LimitsOf(*mixed);
  EXPECT_EQ(m.memory_bytes, uint64_t{1} << 30);
  EXPECT_EQ(m.max_processes, 64u);
  EXPECT_EQ(m.cpu_millis, 1000u);
  EXPECT_EQ(m.max_host_tasks, 3276u);

  const config::LaunchProfile::Reader* all = c.FindProfile("all");
  ASSERT_NE(all, nullptr);
  SandboxLimits a = c.LimitsOf(*all);
  EXPECT_EQ(a.memory_bytes, uint64_t{64} << 20);
  EXPECT_EQ(a.cpu_millis, 250u);
  EXPECT_EQ(a.max_processes, 16u);
  EXPECT_EQ(a.max_host_tasks, 256u);
}

TEST_F(ConfigTest, TheImplicitDefaultProfileIsBoundedToo) {
  WriteMinimal();
  HostResources host = TestHost();
  host.cpus = 8;
  host.pid_max = 4194304;
  auto config = LoadConfig(dir_, host);
  ASSERT_TRUE(config.ok()) << config.status();
  const config::LaunchProfile::Reader* p = (*config)->FindProfile("default");
  ASSERT_NE(p, nullptr);
  SandboxLimits d = (*config)->LimitsOf(*p);
  EXPECT_EQ(d, DefaultLimits(host));
  EXPECT_EQ(d.cpu_millis, 4000u);
  EXPECT_EQ(d.max_host_tasks, 192730u / 2 / 5);  // threads-max is the smaller one here
  EXPECT_EQ(d.max_processes, 3011u);
}

TEST_F(ConfigTest, ServiceLimitsAreConfigurableAndSizeTheProfileDefaults) {
  Write("helper.json", MinimalHelper(R"("serviceLimits": {"memoryBytes": 4294967296,
    "cpuMillis": 800, "maxHostTasks": 5000})"));
  Write("deployments/main.json", MinimalDeployment());
  auto config = LoadConfig(dir_, TestHost());
  ASSERT_TRUE(config.ok()) << config.status();
  const Config& c = **config;
  ServiceBounds want;
  want.memory_bytes = uint64_t{4} << 30;
  want.cpu_millis = 800;
  want.max_host_tasks = 5000;
  EXPECT_EQ(c.service(), want);
  SandboxLimits d = c.LimitsOf(*c.FindProfile("default"));
  EXPECT_EQ(d.memory_bytes, uint64_t{819} << 20);  // a fifth, whole MiB
  EXPECT_EQ(d.cpu_millis, 800u);                   // half the host's would be above it
  EXPECT_EQ(d.max_host_tasks, 1024u);              // a fifth is below the floor
}

TEST_F(ConfigTest, AProfileBoundAboveTheServicesIsRefusedNamingBoth) {
  WriteMinimal();
  struct Case {
    const char* profile;
    const char* field;
  } cases[] = {
      {R"({"name": "big", "memoryLimitBytes": 17179869184})", "memoryLimitBytes"},  // 16 GiB
      {R"({"name": "big", "cpuMillis": 2000})", "cpuMillis"},
      {R"({"name": "big", "maxHostTasks": 20000})", "maxHostTasks"},
  };
  for (const Case& k : cases) {
    Write("profiles/big.json", k.profile);
    auto config = LoadConfig(dir_, TestHost());
    ASSERT_FALSE(config.ok()) << k.profile;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    std::string message(config.status().message());
    EXPECT_NE(message.find(k.field), std::string::npos) << message;
    EXPECT_NE(message.find("serviceLimits"), std::string::npos) << message;
  }
}

TEST_F(ConfigTest, ServiceLimitsOutOfRangeAreRefused) {
  for (const char* limits : {R"({"memoryBytes": 1048576})", R"({"cpuMillis": 50})",
                             R"({"maxHostTasks": 100})", R"({"maxHostTasks": 5000000})"}) {
    Write("helper.json", MinimalHelper(absl::StrCat(R"("serviceLimits": )", limits)));
    Write("deployments/main.json", MinimalDeployment());
    auto config = LoadConfig(dir_, TestHost());
    ASSERT_FALSE(config.ok()) << limits;
    EXPECT_NE(config.status().message().find("serviceLimits."), std::string::npos)
        << config.status();
  }
}

TEST_F(ConfigTest, OnlyAllowedGidsIsEnough) {
  Write("helper.json", MinimalHelper());
  Write("deployments/main.json", R"({"id": "g", "allowedGids": [3000],
    "workspaceRoots": [{"hostPath": "/srv/g"}]})");
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_NE((*config)->FindDeployment("g"), nullptr);
}

TEST_F(ConfigTest, MissingHelperJsonIsNotFound) {
  Write("deployments/main.json", MinimalDeployment());
  auto config = LoadConfig(dir_);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound) << config.status();
  EXPECT_TRUE(absl::StrContains(config.status().message(), Path("helper.json")))
      << config.status();
}

TEST_F(ConfigTest, MissingConfigDirectoryIsNotFound) {
  auto config = LoadConfig(Path("does-not-exist"));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound) << config.status();
}

TEST_F(ConfigTest, NoDeploymentsIsRejected) {
  for (bool with_dir : {false, true}) {
    SCOPED_TRACE(with_dir ? "empty deployments/" : "no deployments/");
    Write("helper.json", MinimalHelper());
    if (with_dir) Write("deployments/notes.txt", "{}");
    auto config = LoadConfig(dir_);
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
    EXPECT_TRUE(absl::StrContains(config.status().message(), Path("deployments")))
        << config.status();
    EXPECT_TRUE(absl::StrContains(config.status().message(), "no deployment")) << config.status();
  }
}

TEST_F(ConfigTest, OversizedFileIsRejected) {
  WriteMinimal();
  // Valid JSON (whitespace padding) but over the 1 MiB cap.
  Write("helper.json", std::string((1 << 20) + 1, ' ') + MinimalHelper());
  auto config = LoadConfig(dir_);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  EXPECT_TRUE(absl::StrContains(config.status().message(), Path("helper.json")));
}

// One rejected configuration: files overlaid on the minimal config (nullopt deletes one), and
// what the error must say.
struct BadCase {
  std::string name;
  std::map<std::string, std::optional<std::string>> files;
  std::string file;                 // relative path the message must name
  std::vector<std::string> fields;  // substrings the message must contain (field names)
  // When set, the message must start with "<dir>/<file>: <prefix>" -- the documented
  // "<file>: <field>: <problem>" format for validation errors.
  std::string prefix = "";
};

std::string HelperWith(const std::string& extra) {
  return absl::StrCat(R"({"runsc": {"sha256": ")", kSha, R"("}, "rootfsVersion": "v1", )", extra,
                      "}");
}
std::string HelperWithSha(const std::string& sha) {
  return absl::StrCat(R"({"runsc": {"sha256": ")", sha, R"("}, "rootfsVersion": "v1"})");
}
std::string DeploymentWith(const std::string& body) { return absl::StrCat("{", body, "}"); }
constexpr char kRoots[] = R"("workspaceRoots": [{"hostPath": "/srv/w"}])";
constexpr char kUids[] = R"("allowedUids": [1000])";
constexpr char kSecretRest[] =
    R"("path": "/etc/k", "hosts": ["api.example.com"], "header": "x-api-key", "envVar": "K")";
constexpr char kNetwork[] =
    R"("network": {"mode": "sandbox", "allowNames": [{"name": "*.example.com", "ports": [443]}]})";

std::vector<BadCase> BadCases() {
  auto dep = [](const std::string& body) { return DeploymentWith(body); };
  auto ok_dep_with = [](const std::string& extra) {
    return absl::StrCat(R"({"id": "x", )", kUids, ", ", kRoots, ", ", extra, "}");
  };
  std::vector<BadCase> cases = {
      // Unknown fields: capnp's JsonCodec names the field, LoadConfig names the file.
      {"UnknownHelperField", {{"helper.json", HelperWith(R"("stateDirectory": "/x")")}},
       "helper.json", {"stateDirectory"}},
      {"UnknownNestedRunscField",
       {{"helper.json",
         absl::StrCat(R"({"runsc": {"sha256": ")", kSha,
                      R"(", "checksum": "x"}, "rootfsVersion": "v1"})")}},
       "helper.json", {"checksum"}},
      {"UnknownDeploymentField", {{"deployments/main.json", ok_dep_with(R"("allowedUsers": [1])")}},
       "deployments/main.json", {"allowedUsers"}},
      {"UnknownWorkspaceRootField",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", )", kUids,
                          R"(, "workspaceRoots": [{"hostPath": "/srv/w", "readOnly": true}])"))}},
       "deployments/main.json", {"readOnly"}},
      {"UnknownProfileField",
       {{"profiles/p.json", R"({"name": "default", "cpuLimit": 2})"}},
       "profiles/p.json", {"cpuLimit"}},

      // Type mismatches and malformed JSON: the file is named.
      {"StringWhereListExpected",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", "allowedUids": "1000", )", kRoots))}},
       "deployments/main.json", {}},
      {"NumberWhereTextExpected", {{"helper.json", HelperWith(R"("stateDir": 5)")}},
       "helper.json", {}},
      {"TextWhereStructExpected",
       {{"helper.json", R"({"runsc": "/usr/bin/runsc", "rootfsVersion": "v1"})"}},
       "helper.json", {}},
      {"TextWhereNumberExpected",
       {{"profiles/p.json", R"({"name": "default", "tmpfsBytes": "lots"})"}},
       "profiles/p.json", {}},
      {"NegativeUid",
       {{"deployments/main.json", ok_dep_with(R"("runAs": {"uid": -1, "gid": 1000})")}},
       "deployments/main.json", {}},
      {"UidOutOfRange",
       {{"deployments/main.json", ok_dep_with(R"("runAs": {"uid": 4294967296, "gid": 1000})")}},
       "deployments/main.json", {}},
      {"FractionalUid",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", "allowedUids": [1000.5], )", kRoots))}},
       "deployments/main.json", {}},
      {"TruncatedJson", {{"helper.json", R"({"rootfsVersion": "v1", )"}}, "helper.json", {}},
      {"NotJson", {{"deployments/main.json", "id = x"}}, "deployments/main.json", {}},
      {"EmptyFile", {{"helper.json", ""}}, "helper.json", {}},
      {"TrailingGarbage", {{"helper.json", MinimalHelper() + " {}"}}, "helper.json", {}},
      {"TopLevelArray", {{"deployments/main.json", "[" + MinimalDeployment() + "]"}},
       "deployments/main.json", {}},

      // runsc pin.
      {"ShaMissing", {{"helper.json", R"({"rootfsVersion": "v1"})"}}, "helper.json", {},
       "runsc.sha256: "},
      {"ShaUppercase", {{"helper.json", HelperWithSha(std::string(64, 'A'))}}, "helper.json", {},
       "runsc.sha256: "},
      {"ShaTooShort", {{"helper.json", HelperWithSha(std::string(kSha).substr(1))}},
       "helper.json", {}, "runsc.sha256: "},
      {"ShaTooLong", {{"helper.json", HelperWithSha(std::string(kSha) + "0")}}, "helper.json",
       {}, "runsc.sha256: "},
      {"ShaNotHex", {{"helper.json", HelperWithSha(std::string(63, 'a') + "g")}}, "helper.json",
       {}, "runsc.sha256: "},
      {"ShaWithPrefix", {{"helper.json", HelperWithSha("sha256:" + std::string(kSha).substr(7))}},
       "helper.json", {}, "runsc.sha256: "},
      {"RunscPathRelative",
       {{"helper.json",
         absl::StrCat(R"({"runsc": {"path": "runsc", "sha256": ")", kSha,
                      R"("}, "rootfsVersion": "v1"})")}},
       "helper.json", {}, "runsc.path: "},
      {"RunscPlatformHost",
       {{"helper.json",
         absl::StrCat(R"({"runsc": {"platform": "host", "sha256": ")", kSha,
                      R"("}, "rootfsVersion": "v1"})")}},
       "helper.json", {}, "runsc.platform: "},

      // Helper paths and names.
      {"StateDirRelative", {{"helper.json", HelperWith(R"("stateDir": "var/lib/paseo")")}},
       "helper.json", {}, "stateDir: "},
      {"StateDirDotDot", {{"helper.json", HelperWith(R"("stateDir": "/var/lib/../../etc")")}},
       "helper.json", {}, "stateDir: "},
      {"StateDirEmpty", {{"helper.json", HelperWith(R"("stateDir": "")")}}, "helper.json", {},
       "stateDir: "},
      {"RunDirTrailingSlash", {{"helper.json", HelperWith(R"("runDir": "/run/paseo/")")}},
       "helper.json", {}, "runDir: "},
      {"RunDirDot", {{"helper.json", HelperWith(R"("runDir": "/run/./paseo")")}}, "helper.json",
       {}, "runDir: "},
      {"BrokerBinaryRelative", {{"helper.json", HelperWith(R"("brokerBinary": "bin/broker")")}},
       "helper.json", {}, "brokerBinary: "},
      {"BrokerUserEmpty", {{"helper.json", HelperWith(R"("brokerUser": "")")}}, "helper.json", {},
       "brokerUser: "},
      {"SocketGroupEmpty", {{"helper.json", HelperWith(R"("socketGroup": "")")}}, "helper.json",
       {}, "socketGroup: "},
      {"AuditUnknownDestination",
       {{"helper.json", HelperWith(R"("audit": {"destination": "syslog"})")}}, "helper.json", {}},
      {"AuditUnknownField", {{"helper.json", HelperWith(R"("audit": {"file": "/x"})")}},
       "helper.json", {"file"}},
      {"AuditPathRelative", {{"helper.json", HelperWith(R"("audit": {"path": "log/audit"})")}},
       "helper.json", {}, "audit.path: "},
      {"AuditPathInRoot", {{"helper.json", HelperWith(R"("audit": {"path": "/audit.log"})")}},
       "helper.json", {}, "audit.path: "},
      {"AuditPathDotDot",
       {{"helper.json", HelperWith(R"("audit": {"path": "/var/log/../etc/x"})")}}, "helper.json",
       {}, "audit.path: "},
      {"AuditPathTrailingSlash",
       {{"helper.json", HelperWith(R"("audit": {"path": "/var/log/paseo/"})")}}, "helper.json",
       {}, "audit.path: "},
      {"AuditMaxBytesTooSmall",
       {{"helper.json", HelperWith(R"("audit": {"maxBytes": 65535})")}}, "helper.json", {},
       "audit.maxBytes: "},
      {"AuditMaxFilesZero", {{"helper.json", HelperWith(R"("audit": {"maxFiles": 0})")}},
       "helper.json", {}, "audit.maxFiles: "},
      {"AuditMaxFilesTooMany", {{"helper.json", HelperWith(R"("audit": {"maxFiles": 101})")}},
       "helper.json", {}, "audit.maxFiles: "},
      {"AuditRefusalsZero",
       {{"helper.json", HelperWith(R"("audit": {"refusalsPerSecond": 0})")}}, "helper.json", {},
       "audit.refusalsPerSecond: "},
      {"RootfsVersionMissing",
       {{"helper.json", absl::StrCat(R"({"runsc": {"sha256": ")", kSha, R"("}})")}},
       "helper.json", {}, "rootfsVersion: "},
      {"RootfsVersionTraversal",
       {{"helper.json",
         absl::StrCat(R"({"runsc": {"sha256": ")", kSha, R"("}, "rootfsVersion": "../v1"})")}},
       "helper.json", {}, "rootfsVersion: "},

      // Deployments.
      {"DeploymentIdWithSlash", {{"deployments/main.json", MinimalDeployment("team/a")}},
       "deployments/main.json", {}, "id: "},
      {"DeploymentIdUppercase", {{"deployments/main.json", MinimalDeployment("Paseo")}},
       "deployments/main.json", {}, "id: "},
      {"DeploymentIdDotDot", {{"deployments/main.json", MinimalDeployment("..")}},
       "deployments/main.json", {}, "id: "},
      {"DeploymentIdEmpty", {{"deployments/main.json", MinimalDeployment("")}},
       "deployments/main.json", {}, "id: "},
      {"DeploymentIdMissing",
       {{"deployments/main.json", dep(absl::StrCat(kUids, ", ", kRoots))}},
       "deployments/main.json", {}, "id: "},
      {"DuplicateDeploymentIds",
       {{"deployments/a.json", MinimalDeployment("same")},
        {"deployments/main.json", MinimalDeployment("same")}},
       "deployments/main.json", {"same", "defined twice"}, "id: "},
      {"UnknownProfile",
       {{"deployments/main.json", ok_dep_with(R"("profiles": ["default", "gpu"])")}},
       "deployments/main.json", {"gpu"}, "profiles: "},
      {"RunAsRoot",
       {{"deployments/main.json", ok_dep_with(R"("runAs": {"uid": 0, "gid": 1000})")}},
       "deployments/main.json", {}, "runAs.uid: "},
      {"RunAsRootGidOnlyDefaulted",
       {{"deployments/main.json", ok_dep_with(R"("runAs": {"gid": 1000})")}},
       "deployments/main.json", {}, "runAs.uid: "},
      {"WorkspaceRootIsSlash",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", )", kUids, R"(, "workspaceRoots": [{"hostPath": "/"}])"))}},
       "deployments/main.json", {}, "workspaceRoots[0].hostPath: "},
      {"WorkspaceRootDotDot",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", )", kUids,
                          R"(, "workspaceRoots": [{"hostPath": "/srv/../etc"}])"))}},
       "deployments/main.json", {}, "workspaceRoots[0].hostPath: "},
      {"WorkspaceRootRelative",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", )", kUids,
                          R"(, "workspaceRoots": [{"hostPath": "srv"}])"))}},
       "deployments/main.json", {}, "workspaceRoots[0].hostPath: "},
      {"WorkspaceRootMissingHostPath",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", )", kUids,
                          R"(, "workspaceRoots": [{"clientPath": "/w"}])"))}},
       "deployments/main.json", {}, "workspaceRoots[0].hostPath: "},
      {"SecondWorkspaceRootBad",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", )", kUids,
                          R"(, "workspaceRoots": [{"hostPath": "/srv/a"}, )",
                          R"({"hostPath": "/srv/b/"}])"))}},
       "deployments/main.json", {}, "workspaceRoots[1].hostPath: "},
      {"ClientPathRelative",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", )", kUids,
                          R"(, "workspaceRoots": )",
                          R"([{"hostPath": "/srv/a", "clientPath": "w/.."}])"))}},
       "deployments/main.json", {}, "workspaceRoots[0].clientPath: "},
      {"NoWorkspaceRoots",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", )", kUids, R"(, "workspaceRoots": [])"))}},
       "deployments/main.json", {}, "workspaceRoots: "},
      {"NoAllowedUidsOrGids",
       {{"deployments/main.json", dep(absl::StrCat(R"("id": "x", )", kRoots))}},
       "deployments/main.json", {"allowedGids"}, "allowedUids: "},
      {"EmptyAllowedUidsAndGids",
       {{"deployments/main.json",
         dep(absl::StrCat(R"("id": "x", "allowedUids": [], "allowedGids": [], )", kRoots))}},
       "deployments/main.json", {}, "allowedUids: "},

      // Profiles.
      {"ProfileNameInvalid", {{"profiles/p.json", R"({"name": "Big Box"})"}}, "profiles/p.json",
       {}, "name: "},
      {"ProfileRootfsTraversal", {{"profiles/p.json", R"({"name": "p", "rootfsVersion": "a/b"})"}},
       "profiles/p.json", {}, "rootfsVersion: "},
      {"ProfileTmpfsTooSmall", {{"profiles/p.json", R"({"name": "p", "tmpfsBytes": 1048575})"}},
       "profiles/p.json", {}, "tmpfsBytes: "},
      {"ProfileHomeRelative", {{"profiles/p.json", R"({"name": "p", "homePath": "home/agent"})"}},
       "profiles/p.json", {}, "homePath: "},
      {"ProfileHomeRoot", {{"profiles/p.json", R"({"name": "p", "homePath": "/"})"}},
       "profiles/p.json", {}, "homePath: "},
      {"ProfileHomeUnderTmp", {{"profiles/p.json", R"({"name": "p", "homePath": "/tmp/h"})"}},
       "profiles/p.json", {}, "homePath: "},
      {"ProfileHomeWithColon", {{"profiles/p.json", R"({"name": "p", "homePath": "/home/a:b"})"}},
       "profiles/p.json", {}, "homePath: "},
      {"ProfileHomeWithNewline",
       {{"profiles/p.json", R"({"name": "p", "homePath": "/home/a\nroot::0:0::/:/bin/sh"})"}},
       "profiles/p.json", {}, "homePath: "},
      {"ProfileHomeInsideACredential",
       {{"profiles/p.json", R"({"name": "p", "homePath": "/creds/home", "credentials": )"
                            R"([{"name": "c", "destination": "/creds"}]})"}},
       "profiles/p.json", {}, "homePath: "},
      {"ProfileHomeIsATool",
       {{"profiles/p.json", R"({"name": "p", "homePath": "/opt/t", "tools": )"
                            R"([{"name": "t", "destination": "/opt/t"}]})"}},
       "profiles/p.json", {}, "homePath: "},
      {"ProfileHomeTooSmall", {{"profiles/p.json", R"({"name": "p", "homeBytes": 1048575})"}},
       "profiles/p.json", {}, "homeBytes: "},
      {"ProfileOutputBufferTooSmall",
       {{"profiles/p.json", R"({"name": "p", "outputBufferBytes": 4095})"}}, "profiles/p.json",
       {}, "outputBufferBytes: "},
      {"ProfileOutputBufferTooLarge",
       {{"profiles/p.json", R"({"name": "p", "outputBufferBytes": 4294967297})"}},
       "profiles/p.json", {}, "outputBufferBytes: "},
      {"ProfileMemoryTooSmall",
       {{"profiles/p.json", R"({"name": "p", "memoryLimitBytes": 67108863})"}},
       "profiles/p.json", {}, "memoryLimitBytes: "},
      {"ProfileMemoryTooLarge",
       {{"profiles/p.json", R"({"name": "p", "memoryLimitBytes": "1125899906842625"})"}},
       "profiles/p.json", {}, "memoryLimitBytes: "},
      {"ProfileCpuTooSmall", {{"profiles/p.json", R"({"name": "p", "cpuMillis": 9})"}},
       "profiles/p.json", {}, "cpuMillis: "},
      {"ProfileCpuTooLarge", {{"profiles/p.json", R"({"name": "p", "cpuMillis": 1024001})"}},
       "profiles/p.json", {}, "cpuMillis: "},
      {"ProfileCpuNegative", {{"profiles/p.json", R"({"name": "p", "cpuMillis": -1})"}},
       "profiles/p.json", {}},
      {"ProfileMaxProcessesTooSmall",
       {{"profiles/p.json", R"({"name": "p", "maxProcesses": 15})"}}, "profiles/p.json", {},
       "maxProcesses: "},
      {"ProfileMaxProcessesTooLarge",
       {{"profiles/p.json", R"({"name": "p", "maxProcesses": 4194305})"}}, "profiles/p.json",
       {}, "maxProcesses: "},
      {"ProfileMaxHostTasksTooSmall",
       {{"profiles/p.json", R"({"name": "p", "maxHostTasks": 255})"}}, "profiles/p.json", {},
       "maxHostTasks: "},
      {"ProfileMaxHostTasksTooLarge",
       {{"profiles/p.json", R"({"name": "p", "maxHostTasks": 4194305})"}}, "profiles/p.json",
       {}, "maxHostTasks: "},
      {"ProfileMaxHostTasksNotANumber",
       {{"profiles/p.json", R"({"name": "p", "maxHostTasks": "many"})"}}, "profiles/p.json",
       {"maxHostTasks"}},
      {"DuplicateProfiles",
       {{"profiles/a.json", R"({"name": "p"})"}, {"profiles/b.json", R"({"name": "p"})"}},
       "profiles/b.json", {"defined twice"}, "name: "},

      // Tool roots (deployments) and tool mounts (profiles).
      {"ToolRootNameInvalid",
       {{"deployments/main.json", ok_dep_with(R"("toolRoots": [{"name": "Tools", "hostPath": "/opt/t"}])")}},
       "deployments/main.json", {}, "toolRoots[0].name: "},
      {"ToolRootNameDuplicate",
       {{"deployments/main.json",
         ok_dep_with(R"("toolRoots": [{"name": "t", "hostPath": "/opt/t"},
                                     {"name": "t", "hostPath": "/opt/u"}])")}},
       "deployments/main.json", {}, "toolRoots[1].name: "},
      {"ToolRootWithoutPath",
       {{"deployments/main.json", ok_dep_with(R"("toolRoots": [{"name": "t"}])")}},
       "deployments/main.json", {"exactly one"}, "toolRoots[0]: "},
      {"ToolRootWithBothPaths",
       {{"deployments/main.json",
         ok_dep_with(R"("toolRoots": [{"name": "t", "hostPath": "/opt/t", "clientPath": "/srv/w/t"}])")}},
       "deployments/main.json", {"exactly one"}, "toolRoots[0]: "},
      {"ToolRootHostPathRelative",
       {{"deployments/main.json", ok_dep_with(R"("toolRoots": [{"name": "t", "hostPath": "opt/t"}])")}},
       "deployments/main.json", {}, "toolRoots[0].hostPath: "},
      {"ToolRootHostPathUnnormalized",
       {{"deployments/main.json",
         ok_dep_with(R"("toolRoots": [{"name": "t", "hostPath": "/opt/../etc"}])")}},
       "deployments/main.json", {}, "toolRoots[0].hostPath: "},
      {"ToolRootHostPathTrailingSlash",
       {{"deployments/main.json", ok_dep_with(R"("toolRoots": [{"name": "t", "hostPath": "/opt/t/"}])")}},
       "deployments/main.json", {}, "toolRoots[0].hostPath: "},
      {"ToolRootHostPathSlash",
       {{"deployments/main.json", ok_dep_with(R"("toolRoots": [{"name": "t", "hostPath": "/"}])")}},
       "deployments/main.json", {}, "toolRoots[0].hostPath: "},
      {"ToolRootClientPathUnnormalized",
       {{"deployments/main.json",
         ok_dep_with(R"("toolRoots": [{"name": "t", "clientPath": "/srv/w/./t"}])")}},
       "deployments/main.json", {}, "toolRoots[0].clientPath: "},
      {"ToolRootClientPathOutsideTheWorkspaceRoots",
       {{"deployments/main.json",
         ok_dep_with(R"("toolRoots": [{"name": "t", "clientPath": "/srv/wx/t"}])")}},
       "deployments/main.json", {"beneath"}, "toolRoots[0].clientPath: "},
      {"ToolMountNameInvalid",
       {{"profiles/p.json", R"({"name": "p", "tools": [{"name": "a/b", "destination": "/t"}]})"}},
       "profiles/p.json", {}, "tools[0].name: "},
      {"ToolMountNameDuplicate",
       {{"profiles/p.json", R"({"name": "p", "tools": [{"name": "a", "destination": "/t"},
                                                      {"name": "a", "destination": "/u"}]})"}},
       "profiles/p.json", {}, "tools[1].name: "},
      {"ToolMountDestinationRelative",
       {{"profiles/p.json", R"({"name": "p", "tools": [{"name": "a", "destination": "opt/t"}]})"}},
       "profiles/p.json", {}, "tools[0].destination: "},
      {"ToolMountDestinationUnnormalized",
       {{"profiles/p.json", R"({"name": "p", "tools": [{"name": "a", "destination": "/opt//t"}]})"}},
       "profiles/p.json", {}, "tools[0].destination: "},
      {"ToolMountDestinationSlash",
       {{"profiles/p.json", R"({"name": "p", "tools": [{"name": "a", "destination": "/"}]})"}},
       "profiles/p.json", {}, "tools[0].destination: "},
      {"ToolMountDestinationReserved",
       {{"profiles/p.json", R"({"name": "p", "tools": [{"name": "a", "destination": "/.paseo/bin"}]})"}},
       "profiles/p.json", {"/.paseo"}, "tools[0].destination: "},
      {"ToolMountDestinationWithColon",
       {{"profiles/p.json", R"({"name": "p", "tools": [{"name": "a", "destination": "/opt/a:b"}]})"}},
       "profiles/p.json", {"PATH"}, "tools[0].destination: "},
      {"ToolMountsOverlap",
       {{"profiles/p.json", R"({"name": "p", "tools": [{"name": "a", "destination": "/opt/t"},
                                                      {"name": "b", "destination": "/opt/t/b"}]})"}},
       "profiles/p.json", {"overlaps"}, "tools[1].destination: "},
      {"ToolMountOverlapsACredential",
       {{"profiles/p.json", R"({"name": "p",
          "credentials": [{"name": "c", "destination": "/home/agent"}],
          "tools": [{"name": "a", "destination": "/home/agent/bin"}]})"}},
       "profiles/p.json", {"overlaps"}, "tools[0].destination: "},
      {"ToolUnknownToTheDeployment",
       {{"profiles/p.json", R"({"name": "default", "tools": [{"name": "helper", "destination": "/opt/h"}]})"}},
       "deployments/main.json", {"\"helper\"", "does not register"}, "toolRoots: "},
      {"ToolRegisteredUnderAnotherName",
       {{"profiles/p.json", R"({"name": "default", "tools": [{"name": "helper", "destination": "/opt/h"}]})"},
        {"deployments/main.json", ok_dep_with(R"("toolRoots": [{"name": "helpr", "hostPath": "/opt/h"}])")}},
       "deployments/main.json", {"\"helper\""}, "toolRoots: "},
      {"TooManyToolMounts",
       {{"profiles/p.json", R"({"name": "p", "tools": [
          {"name": "a1", "destination": "/t1"}, {"name": "a2", "destination": "/t2"},
          {"name": "a3", "destination": "/t3"}, {"name": "a4", "destination": "/t4"},
          {"name": "a5", "destination": "/t5"}, {"name": "a6", "destination": "/t6"},
          {"name": "a7", "destination": "/t7"}, {"name": "a8", "destination": "/t8"},
          {"name": "a9", "destination": "/t9"}]})"}},
       "profiles/p.json", {}, "tools: "},

      // Secrets (decision 59): registrations (deployments) and uses (profiles).
      {"SecretNameInvalid",
       {{"deployments/main.json", ok_dep_with(absl::StrCat(R"("secrets": [{"name": "A", )", kSecretRest, "}]"))}},
       "deployments/main.json", {}, "secrets[0].name: "},
      {"SecretPathRelative",
       {{"deployments/main.json", ok_dep_with(R"("secrets": [{"name": "a", "path": "etc/k", "hosts": ["api.example.com"], "header": "x-api-key", "envVar": "K"}])")}},
       "deployments/main.json", {}, "secrets[0].path: "},
      {"SecretWithoutHosts",
       {{"deployments/main.json", ok_dep_with(R"("secrets": [{"name": "a", "path": "/etc/k", "hosts": [], "header": "x-api-key", "envVar": "K"}])")}},
       "deployments/main.json", {}, "secrets[0].hosts: "},
      {"SecretHostWildcard",
       {{"deployments/main.json", ok_dep_with(R"("secrets": [{"name": "a", "path": "/etc/k", "hosts": ["*.example.com"], "header": "x-api-key", "envVar": "K"}])")}},
       "deployments/main.json", {"no wildcard"}, "secrets[0].hosts: "},
      {"SecretHeaderFramesTheRequest",
       {{"deployments/main.json", ok_dep_with(R"("secrets": [{"name": "a", "path": "/etc/k", "hosts": ["api.example.com"], "header": "content-length", "envVar": "K"}])")}},
       "deployments/main.json", {}, "secrets[0].header: "},
      {"SecretHeaderNotLowerCase",
       {{"deployments/main.json", ok_dep_with(R"("secrets": [{"name": "a", "path": "/etc/k", "hosts": ["api.example.com"], "header": "X-Api-Key", "envVar": "K"}])")}},
       "deployments/main.json", {}, "secrets[0].header: "},
      {"SecretEnvVarReserved",
       {{"deployments/main.json", ok_dep_with(R"("secrets": [{"name": "a", "path": "/etc/k", "hosts": ["api.example.com"], "header": "x-api-key", "envVar": "PATH"}])")}},
       "deployments/main.json", {}, "secrets[0].envVar: "},
      {"SecretEnvVarNotAName",
       {{"deployments/main.json", ok_dep_with(R"("secrets": [{"name": "a", "path": "/etc/k", "hosts": ["api.example.com"], "header": "x-api-key", "envVar": "A=B"}])")}},
       "deployments/main.json", {}, "secrets[0].envVar: "},
      {"SecretsWithoutSandboxNetwork",
       {{"profiles/p.json", R"({"name": "p", "secrets": [{"name": "a"}]})"}},
       "profiles/p.json", {"sandbox"}, "secrets: "},
      {"SecretFileRelative",
       {{"profiles/p.json", absl::StrCat(R"({"name": "p", )", kNetwork, R"(, "secrets": [{"name": "a", "file": "home/k"}]})")}},
       "profiles/p.json", {}, "secrets[0].file: "},
      {"SecretUnknownToTheDeployment",
       {{"profiles/p.json", absl::StrCat(R"({"name": "default", )", kNetwork, R"(, "secrets": [{"name": "a"}]})")}},
       "deployments/main.json", {"\"a\"", "does not register"}, "secrets: "},
      {"SecretHostNotAllowedByTheProfile",
       {{"profiles/p.json", absl::StrCat(R"({"name": "default", )", kNetwork, R"(, "secrets": [{"name": "a"}]})")},
        {"deployments/main.json", ok_dep_with(R"("secrets": [{"name": "a", "path": "/etc/k", "hosts": ["api.other.com"], "header": "x-api-key", "envVar": "K"}])")}},
       "deployments/main.json", {"api.other.com", "allowNames"}, "secrets: "},
  };
  return cases;
}

class BadConfigTest : public ConfigTest, public ::testing::WithParamInterface<BadCase> {};

TEST_P(BadConfigTest, IsRejectedNamingFileAndField) {
  const BadCase& c = GetParam();
  std::map<std::string, std::optional<std::string>> files = {
      {"helper.json", MinimalHelper()}, {"deployments/main.json", MinimalDeployment()}};
  for (const auto& [rel, content] : c.files) files[rel] = content;
  for (const auto& [rel, content] : files) {
    if (content.has_value()) Write(rel, *content);
  }

  auto config = LoadConfig(dir_);
  ASSERT_FALSE(config.ok()) << "accepted";
  const absl::Status& s = config.status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  std::string file = Path(c.file);
  EXPECT_TRUE(absl::StrContains(s.message(), file)) << s << "\nshould name " << file;
  for (const auto& f : c.fields) {
    EXPECT_TRUE(absl::StrContains(s.message(), f)) << s << "\nshould mention " << f;
  }
  if (!c.prefix.empty()) {
    EXPECT_TRUE(absl::StartsWith(s.message(), absl::StrCat(file, ": ", c.prefix)))
        << s << "\nshould start with " << file << ": " << c.prefix;
  }
}

INSTANTIATE_TEST_SUITE_P(All, BadConfigTest, ::testing::ValuesIn(BadCases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           return info.param.name;
                         });

// config.h promises that every error names the file *and the field*. JsonCodec's type errors
// ("Expected text value") do not carry the field name by themselves, so check LoadConfig adds it.
TEST_F(ConfigTest, TypeMismatchNamesTheField) {
  Write("helper.json", HelperWith(R"("stateDir": 5)"));
  Write("deployments/main.json", MinimalDeployment());
  auto config = LoadConfig(dir_);
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(absl::StrContains(config.status().message(), Path("helper.json")))
      << config.status();
  EXPECT_TRUE(absl::StrContains(config.status().message(), "stateDir")) << config.status();
}

// A \u escape must never load as a different string than the one written (capnp 0.9.2's JSON
// parser mis-decodes hex letters in \u escapes: capnproto/capnproto#1552). Decoding correctly or
// rejecting the file are both fine; silently pointing a workspace root elsewhere is not.
TEST_F(ConfigTest, UnicodeEscapesAreDecodedCorrectlyOrRejected) {
  Write("helper.json", MinimalHelper());
  Write("deployments/main.json", R"({"id": "x", "allowedUids": [1000],
    "workspaceRoots": [{"hostPath": "/srv/caf\u00e9/\u006a"}]})");
  auto config = LoadConfig(dir_);
  if (!config.ok()) {
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
    return;
  }
  const config::Deployment::Reader* d = (*config)->FindDeployment("x");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(std::string(d->getWorkspaceRoots()[0].getHostPath().cStr()), "/srv/caf\xc3\xa9/j");
}

// Network: the pool, upstreams and uplink of helper.json, and a profile's policy.
TEST_F(ConfigTest, NetworkPolicyLoads) {
  Write("helper.json", absl::StrCat(R"({"runsc": {"sha256": ")", kSha, R"("}, "rootfsVersion": "v1",
    "network": {"pool": "10.77.0.0/20", "dnsUpstreams": ["192.0.2.53", "192.0.2.54:5353"]}})"));
  Write("deployments/main.json", MinimalDeployment());
  Write("profiles/default.json", R"({"name": "default"})");
  Write("profiles/net.json", R"({"name": "net", "network": {"mode": "sandbox",
    "allowCidrs": [{"cidr": "203.0.113.10", "ports": [80, 443]}, {"cidr": "198.51.100.0/24"}],
    "allowNames": [{"name": "api.example.com", "ports": [443]}, {"name": "*.example.org"}],
    "inboundPorts": [4096]}})");
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE((*config)->UsesSandboxNetwork());
  EXPECT_EQ(std::string((*config)->helper().getNetwork().getPool().cStr()), "10.77.0.0/20");
  auto p = (*config)->FindProfile("net");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->getNetwork().getMode(), config::NetworkMode::SANDBOX);
  EXPECT_EQ(p->getNetwork().getAllowCidrs().size(), 2u);
  EXPECT_EQ((*config)->FindProfile("default")->getNetwork().getMode(), config::NetworkMode::NONE);
}

TEST_F(ConfigTest, DefaultNetworkIsNoneAndThePoolDefaults) {
  WriteMinimal();
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE((*config)->UsesSandboxNetwork());
  EXPECT_EQ(std::string((*config)->helper().getNetwork().getPool().cStr()), "10.88.0.0/16");
}

TEST_F(ConfigTest, BadHelperNetworkIsRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("pool": "10.88.0.0/8")", "network.pool"},
      {R"("pool": "10.88.0.0/25")", "network.pool"},
      {R"("pool": "10.88.0.1/16")", "network.pool"},
      {R"("pool": "10.88.0/16")", "network.pool"},
      {R"("pool": "169.254.0.0/16")", "network.pool"},
      {R"("pool": "127.0.0.0/16")", "network.pool"},
      {R"("dnsUpstreams": ["dns.example.com"])", "network.dnsUpstreams[0]"},
      {R"("dnsUpstreams": ["192.0.2.53:0"])", "network.dnsUpstreams[0]"},
      {R"("dnsUpstreams": ["192.0.2.53", "192.0.2.53:70000"])", "network.dnsUpstreams[1]"},
      {R"("uplink": "psb-0123456789")", "network.uplink"},
      {R"("uplink": "eth0 ")", "network.uplink"},
      {R"("uplink": "a-very-long-interface")", "network.uplink"},
  };
  for (const auto& [json, field] : cases) {
    SCOPED_TRACE(json);
    Write("helper.json", absl::StrCat(R"({"runsc": {"sha256": ")", kSha,
                                      R"("}, "rootfsVersion": "v1", "network": {)", json, "}}"));
    Write("deployments/main.json", MinimalDeployment());
    auto config = LoadConfig(dir_);
    ASSERT_FALSE(config.ok());
    EXPECT_TRUE(absl::StrContains(config.status().message(), "helper.json: " + field + ":"))
        << config.status();
  }
}

TEST_F(ConfigTest, BadNetworkPolicyIsRefused) {
  std::string many;
  for (int i = 0; i < 257; ++i) absl::StrAppend(&many, i ? ", " : "", R"({"cidr": "10.)", i / 250, ".", i % 250, R"(.0/24"})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("mode": "sandbox", "allowCidrs": [{"cidr": "203.0.113.1/24"}])", "network.allowCidrs[0].cidr"},
      {R"("mode": "sandbox", "allowCidrs": [{"cidr": "203.0.113.0/33"}])", "network.allowCidrs[0].cidr"},
      {R"("mode": "sandbox", "allowCidrs": [{"cidr": "2001:db8::/32"}])", "network.allowCidrs[0].cidr"},
      {R"("mode": "sandbox", "allowCidrs": [{"cidr": "203.0.113.0/24"}, {"cidr": "203.0.113.0/24"}])", "network.allowCidrs[1].cidr"},
      {R"("mode": "sandbox", "allowCidrs": [{"cidr": "203.0.113.7", "ports": [0]}])", "network.allowCidrs[0].ports"},
      {R"("mode": "sandbox", "allowCidrs": [{"cidr": "203.0.113.7", "ports": [80, 80]}])", "network.allowCidrs[0].ports"},
      {R"("mode": "sandbox", "allowCidrs": [)" + many + "]", "network.allowCidrs"},
      {R"("mode": "sandbox", "allowNames": [{"name": "API.example.com"}])", "network.allowNames[0].name"},
      {R"("mode": "sandbox", "allowNames": [{"name": "*.com"}])", "network.allowNames[0].name"},
      {R"("mode": "sandbox", "allowNames": [{"name": "a_b.example.com"}])", "network.allowNames[0].name"},
      {R"("mode": "sandbox", "allowNames": [{"name": "x.io"}, {"name": "x.io"}])", "network.allowNames[1].name"},
      {R"("mode": "sandbox", "inboundPorts": [0])", "network.inboundPorts"},
      {R"("mode": "sandbox", "inboundPorts": [22, 22])", "network.inboundPorts"},
      {R"("allowCidrs": [{"cidr": "203.0.113.0/24"}])", "network.mode"},
      {R"("inboundPorts": [8080])", "network.mode"},
  };
  for (const auto& [json, field] : cases) {
    SCOPED_TRACE(json);
    WriteMinimal();
    Write("profiles/p.json", absl::StrCat(R"({"name": "p", "network": {)", json, "}}"));
    auto config = LoadConfig(dir_);
    ASSERT_FALSE(config.ok());
    EXPECT_TRUE(absl::StrContains(config.status().message(), "profiles/p.json: " + field + ":"))
        << config.status();
  }
}

TEST_F(ConfigTest, AuditDefaultsToTheJournalAndAFileUnderTheStateDir) {
  WriteMinimal();
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  auto audit = (*config)->helper().getAudit();
  EXPECT_EQ(audit.getDestination(), config::AuditDestination::JOURNAL);
  EXPECT_EQ(audit.getMaxBytes(), 16u << 20);
  EXPECT_EQ(audit.getMaxFiles(), 4u);
  EXPECT_EQ(audit.getRefusalsPerSecond(), 20u);
  EXPECT_EQ((*config)->AuditPath(), "/var/lib/paseo-sandbox/audit/audit.log");
}

TEST_F(ConfigTest, AuditToAFileLoads) {
  WriteMinimal();
  Write("helper.json", HelperWith(R"("audit": {"destination": "file",
      "path": "/var/log/paseo-sandbox/audit.log", "maxBytes": 1048576, "maxFiles": 8,
      "refusalsPerSecond": 5})"));
  auto config = LoadConfig(dir_);
  ASSERT_TRUE(config.ok()) << config.status();
  auto audit = (*config)->helper().getAudit();
  EXPECT_EQ(audit.getDestination(), config::AuditDestination::FILE);
  EXPECT_EQ(audit.getMaxBytes(), 1u << 20);
  EXPECT_EQ(audit.getMaxFiles(), 8u);
  EXPECT_EQ(audit.getRefusalsPerSecond(), 5u);
  EXPECT_EQ((*config)->AuditPath(), "/var/log/paseo-sandbox/audit.log");
}

TEST(IsNormalizedAbsolutePathTest, Accepts) {
  std::vector<std::string> good = {"/", "/a", "/a/b", "/srv/paseo/workspace", "/.hidden",
                                   "/a/...", "/a.b/..c/c..", "/with space/x",
                                   std::string("/") + std::string(4094, 'a')};
  for (const std::string& p : good) {
    EXPECT_TRUE(IsNormalizedAbsolutePath(p)) << p;
  }
}

TEST(IsNormalizedAbsolutePathTest, Rejects) {
  std::vector<std::string> bad = {"", "a", "a/b", "./a", "../a", "~/a", "/a/", "/a/b/", "//",
                                  "//a", "/a//b", "/.", "/..", "/./a", "/../a", "/a/.", "/a/..",
                                  "/a/./b", "/a/../b", std::string("/a\0b", 4),
                                  std::string("\0/a", 3), std::string("/") + std::string(4095, 'a')};
  for (const std::string& p : bad) {
    EXPECT_FALSE(IsNormalizedAbsolutePath(p)) << "accepted: " << p;
  }
}

}  // namespace
}  // namespace paseo
