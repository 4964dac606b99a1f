// Adversarial suite for workspace resolution and staging (privhelper/workspace_resolver.h),
// against the real kernel as root, in a private mount namespace on a tmpfs of its own. Every
// case is refused with a clear error or shown harmless; nothing from outside the registered
// root is ever mounted.
#include <fcntl.h>
#include <linux/fs.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <capnp/message.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "privhelper/workspace_resolver.h"

namespace paseo {
namespace {

std::string g_base;  // tmpfs work area

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Put(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

class WorkspaceAttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    dir_ = g_base + "/case" + std::to_string(n++);
    root_ = dir_ + "/root";
    outside_ = dir_ + "/outside";
    staging_ = dir_ + "/staging";
    for (const auto& d : {dir_, root_, outside_, staging_, root_ + "/dir"}) {
      ASSERT_EQ(mkdir(d.c_str(), 0755), 0) << d;
    }
    Put(root_ + "/dir/marker", "INSIDE");
    Put(root_ + "/marker", "ROOT");
    Put(outside_ + "/marker", "SECRET");
    deployment_ = Deployment("alpha", root_, "");
  }

  config::Deployment::Reader Deployment(const std::string& id, const std::string& host,
                                        const std::string& client) {
    auto& m = messages_.emplace_back(std::make_unique<capnp::MallocMessageBuilder>());
    auto d = m->initRoot<config::Deployment>();
    d.setId(id);
    d.initAllowedUids(1).set(0, 4242);
    auto roots = d.initWorkspaceRoots(1);
    roots[0].setHostPath(host);
    roots[0].setClientPath(client);
    return d.asReader();
  }

  // Resolves and expects a refusal whose message contains `part`.
  void ExpectRefused(const std::string& path, const std::string& part) {
    auto ws = ResolveWorkspace(deployment_, path);
    ASSERT_FALSE(ws.ok()) << path << " resolved (to " << (ws.ok() ? ws->relative : "") << ")";
    EXPECT_TRUE(absl::StrContains(ws.status().message(), part))
        << path << ": " << ws.status();
  }

  // Resolves, stages and returns the marker seen through the staged mount.
  std::string StageAndReadMarker(const std::string& path, const std::string& name = "s") {
    auto ws = ResolveWorkspace(deployment_, path);
    if (!ws.ok()) return "refused: " + std::string(ws.status().message());
    std::string staging = staging_ + "/" + name;
    absl::Status st = StageBind(*ws, staging, /*read_only=*/true);
    if (!st.ok()) return "stage failed: " + std::string(st.message());
    std::string marker = Slurp(staging + "/marker");
    EXPECT_TRUE(UnstageBind(staging).ok());
    return marker;
  }

  std::string dir_, root_, outside_, staging_;
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> messages_;
  config::Deployment::Reader deployment_;
};

TEST_F(WorkspaceAttackTest, TheRootAndASubdirectoryResolveAndStage) {
  EXPECT_EQ(StageAndReadMarker(root_), "ROOT");
  EXPECT_EQ(StageAndReadMarker(root_ + "/dir"), "INSIDE");
}

TEST_F(WorkspaceAttackTest, DotDotAndDotAndEmptyComponentsAreRefused) {
  ExpectRefused(root_ + "/../outside", "\"..\" are not allowed");
  ExpectRefused(root_ + "/../../../..", "\"..\" are not allowed");
  ExpectRefused(root_ + "/dir/../../outside", "\"..\" are not allowed");
  ExpectRefused(root_ + "/./dir", "\"..\" are not allowed");
  ExpectRefused(root_ + "//dir", "empty path component");
  ExpectRefused(root_ + "/dir//", "trailing");
  // Regression: one trailing slash was trimmed (accepted) while "//" was refused; a path has
  // one spelling, normalized by the CLI, and the privhelper refuses every other.
  ExpectRefused(root_ + "/dir/", "trailing \"/\"");
  ExpectRefused(root_ + "/", "trailing \"/\"");
  ExpectRefused("relative/path", "must be absolute");
  ExpectRefused("", "must be absolute");
}

TEST_F(WorkspaceAttackTest, EverySymlinkIsRefused) {
  ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/abs").c_str()), 0);
  ASSERT_EQ(symlink("../outside", (root_ + "/rel").c_str()), 0);
  ASSERT_EQ(symlink("c2", (root_ + "/c1").c_str()), 0);
  ASSERT_EQ(symlink("dir", (root_ + "/c2").c_str()), 0);
  ASSERT_EQ(symlink("l2", (root_ + "/l1").c_str()), 0);
  ASSERT_EQ(symlink("l1", (root_ + "/l2").c_str()), 0);
  ASSERT_EQ(symlink("nowhere", (root_ + "/dangling").c_str()), 0);
  ASSERT_EQ(symlink("dir", (root_ + "/inside").c_str()), 0);
  for (const char* p : {"/abs", "/rel", "/c1", "/l1", "/dangling", "/dangling/x",
                        "/rel/marker", "/inside", "/c1/x"}) {
    ExpectRefused(root_ + p, "symlink");
  }
  // With a trailing slash the kernel would follow the link; such a path is refused before any
  // lookup.
  for (const char* p : {"/abs/", "/inside/"}) ExpectRefused(root_ + p, "trailing");
}

TEST_F(WorkspaceAttackTest, NonDirectoriesAreRefusedWithoutBlocking) {
  ASSERT_EQ(mkfifo((root_ + "/fifo").c_str(), 0644), 0);
  ASSERT_EQ(mknod((root_ + "/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/sock", root_.c_str());
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  Put(root_ + "/file", "x");
  auto start = std::chrono::steady_clock::now();
  for (const char* p : {"/fifo", "/null", "/sock", "/file", "/file/x"}) {
    ExpectRefused(root_ + p, "not a directory");
  }
  ExpectRefused(root_ + "/fifo/", "trailing");
  close(s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2))
      << "a fifo must not block the privhelper";
}

TEST_F(WorkspaceAttackTest, OverlongPathsAndNulAreRefused) {
  ExpectRefused(root_ + "/" + std::string(5000, 'a'), "too long");
  ExpectRefused(root_ + "/" + std::string(300, 'a'), "");  // NAME_MAX: refused, any message
  ExpectRefused(root_ + std::string("/dir\0/../../outside", 20), "NUL");
}

TEST_F(WorkspaceAttackTest, NonUtf8NamesAreJustNames) {
  std::string odd = root_ + "/\xff\xfe-not-utf8";
  ASSERT_EQ(mkdir(odd.c_str(), 0755), 0);
  Put(odd + "/marker", "ODD");
  EXPECT_EQ(StageAndReadMarker(odd), "ODD");
}

TEST_F(WorkspaceAttackTest, ProcMagicLinksAreNotBeneathAnyRoot) {
  for (const char* p : {"/proc/self/root", "/proc/self/cwd", "/proc/self/fd/0",
                        "/proc/self/root/etc", "/proc/1/root"}) {
    ExpectRefused(p, "not beneath any workspace root");
  }
  // Registered under a root, a magic link inside it is still a symlink to the resolver.
  ASSERT_EQ(symlink("/proc/self/root", (root_ + "/magic").c_str()), 0);
  ExpectRefused(root_ + "/magic", "symlink");
}

TEST_F(WorkspaceAttackTest, AnotherDeploymentsRootIsRefused) {
  auto other = Deployment("beta", outside_, "");
  auto ws = ResolveWorkspace(other, root_);
  ASSERT_FALSE(ws.ok());
  EXPECT_EQ(ws.status().code(), absl::StatusCode::kPermissionDenied);
  ExpectRefused(outside_, "not beneath any workspace root of deployment alpha");
  // A sibling whose name merely starts with the root's is not beneath it.
  ASSERT_EQ(mkdir((root_ + "-evil").c_str(), 0755), 0);
  ExpectRefused(root_ + "-evil", "not beneath");
}

TEST_F(WorkspaceAttackTest, DockerMappingResolvesOnlyThroughTheClientPath) {
  deployment_ = Deployment("docker", root_, "/workspace");
  auto ws = ResolveWorkspace(deployment_, "/workspace/dir");
  ASSERT_TRUE(ws.ok()) << ws.status();
  EXPECT_EQ(ws->relative, "dir");
  ExpectRefused(root_ + "/dir", "not beneath") ;
  ExpectRefused("/workspace/../etc", "\"..\" are not allowed");
}

TEST_F(WorkspaceAttackTest, BindMountsInsideTheWorkspaceAreNotFollowed) {
  ASSERT_EQ(mkdir((root_ + "/mnt").c_str(), 0755), 0);
  ASSERT_EQ(mount(outside_.c_str(), (root_ + "/mnt").c_str(), nullptr, MS_BIND, nullptr), 0);
  ExpectRefused(root_ + "/mnt", "mount point");
  // Staging the root itself is non-recursive: the sandbox sees an empty mount point.
  auto ws = ResolveWorkspace(deployment_, root_);
  ASSERT_TRUE(ws.ok());
  ASSERT_TRUE(StageBind(*ws, staging_ + "/r", true).ok());
  struct stat st;
  EXPECT_NE(stat((staging_ + "/r/mnt/marker").c_str(), &st), 0) << "submount leaked through";
  EXPECT_TRUE(UnstageBind(staging_ + "/r").ok());
  umount2((root_ + "/mnt").c_str(), MNT_DETACH);
}

// Regression (security review): a bind-remount replaces every per-mount flag, so a read-write
// request on a workspace whose root is a read-only mount would have made it writable.
TEST_F(WorkspaceAttackTest, AReadWriteRequestCannotMakeAReadOnlyMountWritable) {
  ASSERT_EQ(mount(root_.c_str(), root_.c_str(), nullptr, MS_BIND, nullptr), 0);
  ASSERT_EQ(mount(nullptr, root_.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr), 0);
  auto ws = ResolveWorkspace(deployment_, root_ + "/dir");
  ASSERT_TRUE(ws.ok()) << ws.status();
  absl::Status rw = StageBind(*ws, staging_ + "/rw", /*read_only=*/false);
  EXPECT_EQ(rw.code(), absl::StatusCode::kFailedPrecondition) << rw;
  EXPECT_TRUE(absl::StrContains(rw.message(), "read-only mount")) << rw;
  struct stat st;
  EXPECT_NE(stat((staging_ + "/rw").c_str(), &st), 0) << "a refused stage left its directory";
  ASSERT_TRUE(StageBind(*ws, staging_ + "/ro", /*read_only=*/true).ok());
  EXPECT_EQ(open((staging_ + "/ro/new").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_TRUE(UnstageBind(staging_ + "/ro").ok());
  umount2(root_.c_str(), MNT_DETACH);
}

TEST_F(WorkspaceAttackTest, HardlinksToOutsideFilesCannotBeMadeByAgents) {
  // A hardlink is the same inode: harmless only because a user cannot link a file it could
  // not already open. The kernel enforces that with fs.protected_hardlinks, which must be on.
  EXPECT_EQ(Slurp("/proc/sys/fs/protected_hardlinks"), "1\n");
  std::string secret = outside_ + "/root-only";
  Put(secret, "SECRET");
  ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
  ASSERT_EQ(chown(root_.c_str(), 4242, 4242), 0);
  pid_t pid = fork();
  if (pid == 0) {
    if (setresgid(4242, 4242, 4242) != 0 || setresuid(4242, 4242, 4242) != 0) _exit(2);
    _exit(link(secret.c_str(), (root_ + "/hl").c_str()) == 0 ? 0 : (errno == EPERM ? 1 : 3));
  }
  int status;
  waitpid(pid, &status, 0);
  EXPECT_EQ(WEXITSTATUS(status), 1) << "an agent uid could hardlink a root-only file";
}

TEST_F(WorkspaceAttackTest, ARootReplacedByASymlinkOrRemovedIsRefused) {
  ASSERT_EQ(rename(root_.c_str(), (root_ + ".real").c_str()), 0);
  ExpectRefused(root_, "cannot be opened safely");  // stale: gone
  ASSERT_EQ(symlink(outside_.c_str(), root_.c_str()), 0);
  ExpectRefused(root_, "cannot be opened safely");  // swapped for a symlink
  ExpectRefused(root_ + "/dir", "cannot be opened safely");
  ASSERT_EQ(unlink(root_.c_str()), 0);
  ASSERT_EQ(rename((root_ + ".real").c_str(), root_.c_str()), 0);
  EXPECT_EQ(StageAndReadMarker(root_), "ROOT");
}

TEST_F(WorkspaceAttackTest, DestinationsThroughRootfsSymlinksAreRefused) {
  std::string rootfs = dir_ + "/rootfs";
  for (const char* d : {"", "/run", "/var", "/etc", "/workspace"}) {
    ASSERT_EQ(mkdir((rootfs + d).c_str(), 0755), 0);
  }
  ASSERT_EQ(symlink("../run", (rootfs + "/var/run").c_str()), 0);
  ASSERT_EQ(symlink("/", (rootfs + "/up").c_str()), 0);
  Put(rootfs + "/etc/passwd", "root:x:0:0::/:/bin/sh\n");
  EXPECT_TRUE(CheckDestination(rootfs, "/workspace").ok());
  EXPECT_TRUE(CheckDestination(rootfs, "/new/dir").ok()) << "missing mount points are created";
  EXPECT_TRUE(CheckDestination(rootfs, "/run/x").ok());
  for (const char* bad : {"/var/run", "/var/run/x", "/up/etc", "/etc/passwd/x"}) {
    EXPECT_FALSE(CheckDestination(rootfs, bad).ok()) << bad;
  }
}

// The classic race: a directory and a symlink to outside swapped atomically
// (RENAME_EXCHANGE) in a tight loop while the privhelper resolves and stages. No iteration may
// ever mount the outside.
TEST_F(WorkspaceAttackTest, RenameExchangeRaceNeverEscapes) {
  ASSERT_EQ(mkdir((root_ + "/a").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((root_ + "/a/swap").c_str(), 0755), 0);
  Put(root_ + "/a/swap/marker", "INSIDE");
  ASSERT_EQ(symlink(outside_.c_str(), (root_ + "/a/link").c_str()), 0);
  std::atomic<bool> stop{false};
  std::atomic<long> swaps{0};
  std::thread racer([&] {
    std::string a = root_ + "/a/swap", b = root_ + "/a/link";
    while (!stop.load()) {
      if (syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0)
        ++swaps;
    }
  });
  int staged = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    // Both names, and paths through them, in turn.
    for (const char* p : {"/a/swap", "/a/link", "/a/swap/", "/a/link/"}) {
      std::string marker = StageAndReadMarker(root_ + p);
      if (marker == "INSIDE") {
        ++staged;
      } else {
        ASSERT_NE(marker, "SECRET") << "escaped through " << p << " at iteration " << i;
        ASSERT_TRUE(absl::StartsWith(marker, "refused")) << marker;
        ++refused;
      }
    }
  }
  stop = true;
  racer.join();
  std::printf("rename-exchange race: %ld swaps, %d staged inside, %d refused, 0 escapes\n",
              swaps.load(), staged, refused);
  EXPECT_GT(swaps.load(), 1000);
  EXPECT_GT(staged, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace paseo

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (geteuid() != 0) {
    std::fprintf(stderr, "workspace_attack_test needs root\n");
    return 1;
  }
  // Private mount namespace and a tmpfs of our own: nothing staged here is visible outside.
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    std::perror("unshare/mount");
    return 1;
  }
  char templ[] = "/tmp/paseo-attack.XXXXXX";
  if (mkdtemp(templ) == nullptr || mount("tmpfs", templ, "tmpfs", 0, "mode=0755") != 0) {
    std::perror("tmpfs");
    return 1;
  }
  paseo::g_base = templ;
  int rc = RUN_ALL_TESTS();
  umount2(templ, MNT_DETACH);
  rmdir(templ);
  return rc;
}
