// Each broken setup doctor must recognize, on fakes an ordinary user can make: the problem and
// its fix are both named. The all-green run on a real service is testing/admin_test.cc.
#include "admin/doctor.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <capnp/message.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "privhelper/runsc_pin.h"

namespace paseo::admin {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kSha[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

class DoctorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string tmpl = absl::StrCat(base != nullptr && *base ? base : "/tmp", "/doctor.XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    // Give back write permission a test took away, so the tree can be removed.
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir_, ec); it != fs::end(it); it.increment(ec))
      if (it->is_directory()) chmod(it->path().c_str(), 0755);
    chmod(dir_.c_str(), 0755);
    fs::remove_all(dir_, ec);
  }
  void Write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
    std::ofstream(dir_ + "/" + rel, std::ios::binary | std::ios::trunc) << text;
  }
  // A config dir whose state dir is <dir>/state and whose profiles name rootfs v1 (default)
  // and v2 (profile "big").
  std::unique_ptr<Config> LoadTestConfig(const std::string& extra_deployment_fields = "") {
    Write("etc/helper.json", absl::StrCat(R"({"runsc": {"sha256": ")", kSha,
                                          R"("}, "rootfsVersion": "v1", "stateDir": ")", dir_,
                                          R"(/state"})"));
    Write("etc/profiles/big.json", R"({"name": "big", "rootfsVersion": "v2"})");
    Write("etc/deployments/one.json",
          absl::StrCat(R"({"id": "one", "allowedUids": [0], "workspaceRoots": [{"hostPath": "/srv/one"}])",
                       extra_deployment_fields, "}"));
    auto config = LoadConfig(dir_ + "/etc");
    EXPECT_TRUE(config.ok()) << config.status();
    return config.ok() ? std::move(*config) : nullptr;
  }
  std::string dir_;
};

TEST_F(DoctorTest, KernelVersions) {
  EXPECT_TRUE(CheckKernel("6.1.0-18-amd64").ok);
  EXPECT_TRUE(CheckKernel("5.6.0").ok);
  CheckResult old = CheckKernel("5.4.0-150-generic");
  EXPECT_FALSE(old.ok);
  EXPECT_THAT(old.detail, HasSubstr("older than 5.6"));
  EXPECT_THAT(old.fix, HasSubstr("upgrade the kernel"));
  EXPECT_FALSE(CheckKernel("garbage").ok);
}

// Broken case 1: the runsc on disk is not the pinned one.
TEST_F(DoctorTest, RunscHashMismatchNamesBothDigestsAndTheFix) {
  int fd = open("/bin/true", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::string actual = *Sha256OfFd(fd, "/bin/true");
  close(fd);
  capnp::MallocMessageBuilder message;
  auto pin = message.initRoot<config::RunscPin>();
  pin.setPath("/bin/true");  // root-owned, readable by anyone: a stand-in for runsc
  pin.setSha256(kSha);
  CheckResult r = CheckRunsc(pin.asReader());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.name, "runsc");
  EXPECT_THAT(r.detail, HasSubstr("does not match the pinned " + std::string(kSha)));
  EXPECT_THAT(r.detail, HasSubstr(actual));
  EXPECT_THAT(r.fix, HasSubstr("set runsc.sha256 in helper.json to " + actual));
  EXPECT_THAT(r.fix, HasSubstr("reinstall the pinned runsc"));

  // The digest matches, but /bin/true is no runsc: its `--version` is not runsc's.
  pin.setSha256(actual);
  CheckResult not_runsc = CheckRunsc(pin.asReader());
  EXPECT_FALSE(not_runsc.ok);
  // ("runsc --version: not ..." natively; under qemu-user, which lacks execveat, why it could
  // not run.)
  EXPECT_THAT(not_runsc.detail, HasSubstr("/bin/true matches the pinned sha256 but "));

  pin.setPath(dir_ + "/no-runsc");
  CheckResult missing = CheckRunsc(pin.asReader());
  EXPECT_FALSE(missing.ok);
  EXPECT_THAT(missing.fix, HasSubstr("install gVisor's runsc"));
  EXPECT_THAT(missing.fix, HasSubstr("installer/install-deps"));
}

TEST_F(DoctorTest, RunscNotOwnedByRootSaysToChownIt) {
  if (geteuid() == 0) GTEST_SKIP() << "needs a file root does not own";
  Write("runsc", "not really");
  capnp::MallocMessageBuilder message;
  auto pin = message.initRoot<config::RunscPin>();
  pin.setPath(dir_ + "/runsc");
  pin.setSha256(kSha);
  CheckResult r = CheckRunsc(pin.asReader());
  EXPECT_FALSE(r.ok);
  // Its digest differs too, and that is what is reported first: either way the fix is named.
  EXPECT_FALSE(r.fix.empty());
}

// Broken case 2: the user is not in the socket group.
TEST_F(DoctorTest, UserNotInTheSocketGroupIsToldToJoinIt) {
  passwd* nobody = getpwnam("nobody");
  group* root_group = getgrgid(0);
  ASSERT_NE(nobody, nullptr);
  ASSERT_NE(root_group, nullptr);
  ASSERT_NE(nobody->pw_gid, 0u) << "this host puts nobody in group 0";
  std::string group_name = root_group->gr_name;
  CheckResult r = CheckUser("nobody", group_name, nullptr);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.detail, HasSubstr("is not in group " + group_name));
  EXPECT_EQ(r.fix, absl::StrCat("usermod -aG ", group_name,
                                " nobody (then log in again, or restart the user's daemon)"));

  CheckResult unknown = CheckUser("no-such-user-here", group_name, nullptr);
  EXPECT_FALSE(unknown.ok);
  EXPECT_THAT(unknown.detail, HasSubstr("no such user"));
  CheckResult no_group = CheckUser("root", "no-such-group-here", nullptr);
  EXPECT_FALSE(no_group.ok);
  EXPECT_THAT(no_group.fix, HasSubstr("groupadd"));
}

TEST_F(DoctorTest, UserInTheGroupMustAlsoBeAllowedByADeployment) {
  std::string group_name = getgrgid(0)->gr_name;
  EXPECT_TRUE(CheckUser("root", group_name, nullptr).ok);
  auto config = LoadTestConfig();
  ASSERT_NE(config, nullptr);
  CheckResult allowed = CheckUser("root", group_name, config.get());
  EXPECT_TRUE(allowed.ok) << allowed.detail;
  EXPECT_THAT(allowed.detail, HasSubstr("allowed by one"));

  Write("etc/deployments/one.json",
        R"({"id": "one", "allowedUids": [5], "workspaceRoots": [{"hostPath": "/srv/one"}]})");
  auto other = LoadConfig(dir_ + "/etc");
  ASSERT_TRUE(other.ok()) << other.status();
  CheckResult refused = CheckUser("root", group_name, other->get());
  EXPECT_FALSE(refused.ok);
  EXPECT_THAT(refused.detail, HasSubstr("no deployment allows it"));
  EXPECT_THAT(refused.fix, HasSubstr("--allow-uid 0"));
}

// Broken case 3: the cgroup parent cannot be created or written.
TEST_F(DoctorTest, CgroupNotWritableNamesTheDirectoryAndTheFix) {
  if (geteuid() == 0) GTEST_SKIP() << "root may write anywhere; run as an ordinary user";
  std::string root = dir_ + "/cgroup";
  Write("cgroup/cgroup.controllers", "cpu memory pids\n");
  ASSERT_EQ(chmod(root.c_str(), 0555), 0);
  CheckResult r = CheckCgroups(root, "/paseo-sandbox");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.name, "cgroup");
  EXPECT_THAT(r.detail, HasSubstr("cgroup v2: " + root + " is not writable"));
  EXPECT_THAT(r.detail, HasSubstr(root + "/paseo-sandbox cannot be created"));
  EXPECT_THAT(r.fix, HasSubstr("cgroupParent"));
  EXPECT_THAT(r.fix, HasSubstr("delegate " + root));

  // An existing parent that is not writable.
  ASSERT_EQ(chmod(root.c_str(), 0755), 0);
  fs::create_directories(root + "/paseo-sandbox");
  ASSERT_EQ(chmod((root + "/paseo-sandbox").c_str(), 0555), 0);
  CheckResult parent = CheckCgroups(root, "/paseo-sandbox");
  EXPECT_FALSE(parent.ok);
  EXPECT_THAT(parent.detail, HasSubstr(root + "/paseo-sandbox cannot be written"));

  ASSERT_EQ(chmod((root + "/paseo-sandbox").c_str(), 0755), 0);
  CheckResult good = CheckCgroups(root, "/paseo-sandbox");
  EXPECT_TRUE(good.ok) << good.detail;
}

TEST_F(DoctorTest, CgroupV1NeedsEveryControllerHierarchy) {
  std::string root = dir_ + "/cgroup1";
  fs::create_directories(root + "/memory");
  fs::create_directories(root + "/pids");
  CheckResult r = CheckCgroups(root, "/paseo-sandbox");
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.detail, HasSubstr("without the cpu hierarchy"));
  EXPECT_FALSE(r.fix.empty());
  fs::create_directories(root + "/cpu");
  EXPECT_TRUE(CheckCgroups(root, "/paseo-sandbox").ok);
  CheckResult none = CheckCgroups(dir_ + "/empty", "/paseo-sandbox");
  EXPECT_FALSE(none.ok);
  EXPECT_THAT(none.fix, HasSubstr("mount -t cgroup2"));
}

// Broken case 4: a rootfs version a profile names is not there.
TEST_F(DoctorTest, MissingRootfsNamesTheVersionAndHowToBuildIt) {
  auto config = LoadTestConfig();
  ASSERT_NE(config, nullptr);
  std::string state = dir_ + "/state";
  fs::create_directories(state + "/rootfs/v1/rootfs");
  CheckResult r = CheckRootfs(*config, state);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.name, "rootfs");
  EXPECT_THAT(r.detail, HasSubstr("missing: " + state + "/rootfs/v2/rootfs"));
  EXPECT_THAT(r.detail, ::testing::Not(HasSubstr("v1")));
  EXPECT_THAT(r.fix, HasSubstr("rootfs/build-rootfs --out " + state + "/rootfs"));

  fs::create_directories(state + "/rootfs/v2/rootfs");
  CheckResult good = CheckRootfs(*config, state);
  EXPECT_TRUE(good.ok) << good.detail;
  EXPECT_THAT(good.detail, HasSubstr("v1, v2"));
}

TEST_F(DoctorTest, SocketMissingOrNotASocket) {
  CheckResult missing = CheckSocket(dir_, "root");
  EXPECT_FALSE(missing.ok);
  EXPECT_THAT(missing.fix, HasSubstr("start the service"));
  Write("supervisor.sock", "");
  CheckResult file = CheckSocket(dir_, "root");
  EXPECT_FALSE(file.ok);
  EXPECT_THAT(file.detail, HasSubstr("is not a socket"));
}

TEST_F(DoctorTest, SocketWithTheWrongModeOrGroup) {
  std::string path = dir_ + "/supervisor.sock";
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::strcpy(addr.sun_path, path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  CheckResult r = CheckSocket(dir_, "no-such-group-here");
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.detail, HasSubstr("mode 666 is not 660"));
  EXPECT_THAT(r.detail, HasSubstr("is not no-such-group-here"));
  EXPECT_THAT(r.fix, HasSubstr("restart the service"));
}

TEST_F(DoctorTest, FreeSpace) {
  EXPECT_TRUE(CheckFreeSpace(dir_, 0).ok);
  CheckResult r = CheckFreeSpace(dir_ + "/not-yet/state", ~0ull);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.fix, HasSubstr("/broker"));
}

TEST_F(DoctorTest, ServiceNotRunning) {
  CheckResult r = CheckService(dir_);
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.fix, HasSubstr("systemctl start paseo-sandbox"));
}

// A config the privhelper would refuse fails doctor naming the file; nothing else is checked
// on a config that does not load.
TEST_F(DoctorTest, BrokenConfigIsNamed) {
  LoadTestConfig();
  Write("etc/deployments/two.json", R"({"id": "two", "allowedUids": [1]})");
  DoctorOptions options;
  options.config_dir = dir_ + "/etc";
  options.probe = false;
  auto results = RunDoctor(options);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1].name, "config");
  EXPECT_FALSE(results[1].ok);
  EXPECT_THAT(results[1].detail, HasSubstr("deployments/two.json"));
  EXPECT_THAT(results[1].fix, HasSubstr("--check-config"));
}

TEST_F(DoctorTest, PrintResultsShowsAFixUnderEachFailure) {
  std::vector<CheckResult> results = {{"kernel", true, "Linux 6.1", ""},
                                      {"rootfs", false, "missing: /x", "build it"}};
  char* buf = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&buf, &size);
  EXPECT_EQ(PrintResults(results, out), 1);
  std::fclose(out);
  EXPECT_EQ(std::string(buf, size),
            "ok   kernel: Linux 6.1\nFAIL rootfs: missing: /x\n     fix: build it\n");
  free(buf);
}

}  // namespace
}  // namespace paseo::admin
