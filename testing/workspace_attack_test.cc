// Adversarial suite for workspace resolution and staging (privhelper/workspace_resolver.h),
// against the real kernel as root, in a private mount namespace on a tmpfs of its own. Every
// case is refused with a clear error or shown harmless; nothing from outside the registered
// root is ever mounted, and nothing the requesting client could not open itself.
#include <fcntl.h>
#include <grp.h>
#include <linux/fs.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <capnp/message.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "privhelper/peer_access.h"
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
    auto ws = ResolveWorkspace(deployment_, path, operator_, /*read_only=*/true);
    ASSERT_FALSE(ws.ok()) << path << " resolved (to " << (ws.ok() ? ws->relative : "") << ")";
    EXPECT_TRUE(absl::StrContains(ws.status().message(), part))
        << path << ": " << ws.status();
  }

  // Resolves for `peer`, stages and returns the marker seen through the staged mount.
  std::string StageAndReadMarker(const std::string& path, const std::string& name = "s") {
    return StageAndReadMarkerAs(operator_, path, true, name);
  }
  std::string StageAndReadMarkerAs(const PeerIdentity& peer, const std::string& path,
                                   bool read_only, const std::string& name = "s") {
    auto ws = ResolveWorkspace(deployment_, path, peer, read_only);
    if (!ws.ok()) return "refused: " + std::string(ws.status().message());
    std::string staging = staging_ + "/" + name;
    absl::Status st = StageBind(*ws, staging, read_only);
    if (!st.ok()) return "stage failed: " + std::string(st.message());
    std::string marker = Slurp(staging + "/marker");
    EXPECT_TRUE(UnstageBind(staging).ok());
    return marker;
  }

  // Root owns every directory the fixture makes, so uid 0 reaches them by the owner bits (it
  // gets no bypass: privhelper/peer_access.h).
  const PeerIdentity operator_{0, {0}};
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
  auto ws = ResolveWorkspace(other, root_, operator_, true);
  ASSERT_FALSE(ws.ok());
  EXPECT_EQ(ws.status().code(), absl::StatusCode::kPermissionDenied);
  ExpectRefused(outside_, "not beneath any workspace root of deployment alpha");
  // A sibling whose name merely starts with the root's is not beneath it.
  ASSERT_EQ(mkdir((root_ + "-evil").c_str(), 0755), 0);
  ExpectRefused(root_ + "-evil", "not beneath");
}

TEST_F(WorkspaceAttackTest, DockerMappingResolvesOnlyThroughTheClientPath) {
  deployment_ = Deployment("docker", root_, "/workspace");
  auto ws = ResolveWorkspace(deployment_, "/workspace/dir", operator_, true);
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
  auto ws = ResolveWorkspace(deployment_, root_, operator_, true);
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
  auto ws = ResolveWorkspace(deployment_, root_ + "/dir", operator_, /*read_only=*/false);
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

// ---------------------------------------------------------------- the client's own permissions
//
// Regression (attack run item 1): the privhelper resolves with CAP_DAC_OVERRIDE, so a client
// was given a workspace beneath a directory it could not enter itself. A workspace is now given
// only if the requesting client could open it: search on every directory from the root down,
// read (and write) and search on the workspace, for its uid and gids, with no bypass for uid 0.

constexpr uint16_t kAclUserObj = 0x01, kAclUser = 0x02, kAclGroupObj = 0x04, kAclGroup = 0x08,
                   kAclMask = 0x10, kAclOther = 0x20;

void SetAcl(const std::string& path, const PosixAcl& entries) {
  std::string v;
  auto le = [&v](uint32_t x, int bytes) {
    for (int i = 0; i < bytes; ++i) v.push_back(static_cast<char>((x >> (8 * i)) & 0xff));
  };
  le(2, 4);
  for (const auto& e : entries) {
    le(e.tag, 2);
    le(e.perm, 2);
    le(e.id, 4);
  }
  ASSERT_EQ(setxattr(path.c_str(), "system.posix_acl_access", v.data(), v.size(), 0), 0)
      << path << ": " << std::strerror(errno);
}

// What the kernel lets a process with exactly `peer`'s ids and no capabilities do, for each of
// `checks` (a path and an access(2) mode): the truth the privhelper's decisions must match.
std::vector<bool> KernelDecisions(const PeerIdentity& peer,
                                  const std::vector<std::pair<std::string, int>>& checks) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    gid_t primary = peer.gids.empty() ? 65534 : peer.gids[0];
    // setresuid away from 0 clears every capability: the child is an ordinary process.
    if (setgroups(peer.gids.size(), peer.gids.data()) != 0 ||
        setresgid(primary, primary, primary) != 0 || setresuid(peer.uid, peer.uid, peer.uid) != 0)
      _exit(2);
    std::string answers;
    for (const auto& [path, mode] : checks) {
      int rc = access(path.c_str(), mode);
      answers.push_back(rc == 0 ? 'y' : errno == EACCES ? 'n' : '?');
    }
    _exit(write(fds[1], answers.data(), answers.size()) ==
                  static_cast<ssize_t>(answers.size())
              ? 0
              : 3);
  }
  close(fds[1]);
  std::string answers(checks.size(), '\0');
  size_t got = 0;
  while (got < answers.size()) {
    ssize_t n = read(fds[0], answers.data() + got, answers.size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the kernel-side child failed";
  EXPECT_EQ(answers.find('?'), std::string::npos) << "access(2) failed other than EACCES";
  std::vector<bool> out;
  for (char c : answers) out.push_back(c == 'y');
  return out;
}

void MakeDir(const std::string& path, uid_t owner, gid_t group, mode_t mode) {
  ASSERT_EQ(mkdir(path.c_str(), 0700), 0) << path;
  ASSERT_EQ(chown(path.c_str(), owner, group), 0) << path;
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

// The repro, as reported: a 0700 root-owned directory inside a root the client owns, a
// world-readable directory and file beneath it. `cat` fails for the client; the privhelper
// must refuse the same, and stage nothing.
TEST_F(WorkspaceAttackTest, TheReportedLockedDirectoryIsRefusedToTheClient) {
  ASSERT_EQ(chown(root_.c_str(), 2101, 2101), 0);
  MakeDir(root_ + "/locked", 0, 0, 0700);
  MakeDir(root_ + "/locked/inner", 0, 0, 0755);
  Put(root_ + "/locked/inner/marker", "X");
  const PeerIdentity client{2101, {2101}};
  EXPECT_EQ(KernelDecisions(client, {{root_ + "/locked/inner/marker", R_OK}}),
            std::vector<bool>{false})
      << "the client itself cannot read the marker";
  auto ws = ResolveWorkspace(deployment_, root_ + "/locked/inner", client, /*read_only=*/true);
  ASSERT_FALSE(ws.ok());
  EXPECT_EQ(ws.status().code(), absl::StatusCode::kPermissionDenied) << ws.status();
  EXPECT_TRUE(absl::StrContains(ws.status().message(),
                                "uid 2101 (gids 2101) may not search " + root_ + "/locked"))
      << ws.status();
  std::string seen = StageAndReadMarkerAs(client, root_ + "/locked/inner", true, "repro");
  EXPECT_TRUE(absl::StartsWith(seen, "refused")) << seen;
  struct stat st;
  EXPECT_NE(stat((staging_ + "/repro").c_str(), &st), 0) << "a refusal staged something";
  EXPECT_EQ(StageAndReadMarkerAs(client, root_ + "/locked/inner", false, "repro-rw").substr(0, 7),
            "refused");
  // Whoever may enter it (here its owner) still gets it.
  EXPECT_EQ(StageAndReadMarkerAs(operator_, root_ + "/locked/inner", true, "owner"), "X");
}

// A table of directories (owner, group, mode, ACL) two levels deep, each path requested
// read-only and read-write by clients with and without the groups involved: the privhelper's
// decision must equal what the kernel lets that client do itself, every time.
TEST_F(WorkspaceAttackTest, EveryDecisionMatchesWhatTheKernelLetsTheClientDo) {
  struct Spec {
    uid_t owner;
    gid_t group;
    mode_t mode;
    PosixAcl acl;  // empty: none
  };
  const std::vector<Spec> specs = {
      {0, 0, 0700, {}},
      {0, 0, 0755, {}},
      {0, 0, 0711, {}},  // searchable, not readable
      {0, 0, 0744, {}},  // readable, not searchable
      {0, 0, 0701, {}},
      {0, 0, 0000, {}},
      {0, 0, 0757, {}},  // other may write
      {2101, 2101, 0700, {}},
      {2101, 2101, 0070, {}},  // the owner is shut out by the owner bits
      {0, 2200, 0750, {}},
      {0, 2200, 0770, {}},
      {0, 2200, 0705, {}},  // the group is shut out, other is not
      {0, 2200, 0710, {}},
      {3000, 3000, 0777, {}},
      // POSIX ACLs: a named user, a named group behind a mask, a named user shut out inside
      // the owning group, a mask of nothing.
      {0, 0, 0700, {{kAclUserObj, 7, 0}, {kAclUser, 5, 2101}, {kAclGroupObj, 0, 0},
                    {kAclMask, 5, 0}, {kAclOther, 0, 0}}},
      {0, 0, 0700, {{kAclUserObj, 7, 0}, {kAclGroupObj, 0, 0}, {kAclGroup, 7, 2200},
                    {kAclMask, 5, 0}, {kAclOther, 0, 0}}},
      {0, 2200, 0770, {{kAclUserObj, 7, 0}, {kAclUser, 0, 2102}, {kAclGroupObj, 7, 0},
                       {kAclMask, 7, 0}, {kAclOther, 0, 0}}},
      {0, 0, 0700, {{kAclUserObj, 7, 0}, {kAclUser, 7, 2101}, {kAclGroupObj, 7, 0},
                    {kAclMask, 0, 0}, {kAclOther, 0, 0}}},
  };
  auto make = [&](const std::string& path, const Spec& spec) {
    MakeDir(path, spec.owner, spec.group, spec.mode);
    if (!spec.acl.empty()) SetAcl(path, spec.acl);
  };
  std::vector<std::string> paths;
  // The deepest first, so a parent's mode never keeps the test (root) from making its child.
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string first = root_ + "/d" + std::to_string(i);
    MakeDir(first, 0, 0, 0700);
    paths.push_back(first);
    for (size_t j = 0; j < specs.size(); ++j) {
      std::string second = first + "/d" + std::to_string(j);
      make(second, specs[j]);
      paths.push_back(second);
    }
    // Now the first level gets its own mode (and ACL).
    ASSERT_EQ(chown(first.c_str(), specs[i].owner, specs[i].group), 0);
    ASSERT_EQ(chmod(first.c_str(), specs[i].mode), 0);
    if (!specs[i].acl.empty()) SetAcl(first, specs[i].acl);
  }
  const std::vector<PeerIdentity> peers = {
      {2101, {2101}}, {2101, {2101, 2200}}, {2102, {2102, 2200}}, {2102, {2102}},
      {3000, {3000}}, {2103, {2103, 4000, 2200}},
  };
  int granted = 0, refused = 0;
  for (const auto& peer : peers) {
    std::vector<std::pair<std::string, int>> checks;
    for (const auto& path : paths) {
      checks.push_back({path, R_OK | X_OK});
      checks.push_back({path, R_OK | W_OK | X_OK});
    }
    std::vector<bool> kernel = KernelDecisions(peer, checks);
    ASSERT_EQ(kernel.size(), checks.size());
    for (size_t k = 0; k < checks.size(); ++k) {
      bool read_only = (checks[k].second & W_OK) == 0;
      auto ws = ResolveWorkspace(deployment_, checks[k].first, peer, read_only);
      EXPECT_EQ(ws.ok(), kernel[k])
          << peer.Describe() << (read_only ? " ro " : " rw ") << checks[k].first << ": "
          << (ws.ok() ? "granted" : std::string(ws.status().message())) << ", the kernel says "
          << (kernel[k] ? "yes" : "no");
      if (!ws.ok()) {
        EXPECT_EQ(ws.status().code(), absl::StatusCode::kPermissionDenied) << ws.status();
        ++refused;
      } else {
        ++granted;
      }
    }
  }
  std::printf("%d decisions matched the kernel's: %d granted, %d refused\n", granted + refused,
              granted, refused);
  EXPECT_GT(granted, 100);
  EXPECT_GT(refused, 100);
}

TEST_F(WorkspaceAttackTest, GroupPermissionComesOnlyFromGroupsTheClientHas) {
  MakeDir(root_ + "/team", 0, 2200, 0770);
  Put(root_ + "/team/marker", "TEAM");
  EXPECT_EQ(StageAndReadMarkerAs({2102, {2102, 2200}}, root_ + "/team", false, "member"), "TEAM")
      << "granted through a supplementary gid";
  EXPECT_EQ(StageAndReadMarkerAs({2102, {2200}}, root_ + "/team", false, "primary"), "TEAM")
      << "granted through the primary gid";
  for (const PeerIdentity& outsider :
       {PeerIdentity{2102, {2102}}, PeerIdentity{2102, {2102, 2201}}, PeerIdentity{2102, {}}}) {
    std::string seen = StageAndReadMarkerAs(outsider, root_ + "/team", true, "outsider");
    EXPECT_TRUE(absl::StrContains(seen, "may not open read-only " + root_ + "/team"))
        << outsider.Describe() << ": " << seen;
  }
}

TEST_F(WorkspaceAttackTest, OtherPermissionGrantsReadOnlyButNotReadWrite) {
  MakeDir(root_ + "/public", 0, 0, 0755);
  Put(root_ + "/public/marker", "PUBLIC");
  const PeerIdentity anyone{3000, {3000}};
  EXPECT_EQ(StageAndReadMarkerAs(anyone, root_ + "/public", true), "PUBLIC");
  std::string rw = StageAndReadMarkerAs(anyone, root_ + "/public", false);
  EXPECT_TRUE(absl::StrContains(rw, "may not open read-write " + root_ + "/public")) << rw;
  MakeDir(root_ + "/listable", 0, 0, 0744);
  MakeDir(root_ + "/listable/inner", 0, 0, 0755);
  std::string through = StageAndReadMarkerAs(anyone, root_ + "/listable/inner", true);
  EXPECT_TRUE(absl::StrContains(through, "may not search " + root_ + "/listable")) << through;
}

TEST_F(WorkspaceAttackTest, AnAclGrantIsHonouredAndAMaskLimitsIt) {
  MakeDir(root_ + "/acl", 0, 0, 0700);
  Put(root_ + "/acl/marker", "ACL");
  SetAcl(root_ + "/acl", {{kAclUserObj, 7, 0}, {kAclUser, 5, 2101}, {kAclGroupObj, 0, 0},
                          {kAclMask, 5, 0}, {kAclOther, 0, 0}});
  EXPECT_EQ(StageAndReadMarkerAs({2101, {2101}}, root_ + "/acl", true), "ACL");
  EXPECT_TRUE(absl::StartsWith(StageAndReadMarkerAs({2101, {2101}}, root_ + "/acl", false),
                               "refused"));
  EXPECT_TRUE(absl::StartsWith(StageAndReadMarkerAs({2102, {2102}}, root_ + "/acl", true),
                               "refused"));
  SetAcl(root_ + "/acl", {{kAclUserObj, 7, 0}, {kAclUser, 5, 2101}, {kAclGroupObj, 0, 0},
                          {kAclMask, 0, 0}, {kAclOther, 0, 0}});
  EXPECT_TRUE(absl::StartsWith(StageAndReadMarkerAs({2101, {2101}}, root_ + "/acl", true),
                               "refused"))
      << "a mask of nothing takes the named user's grant away";
}

TEST_F(WorkspaceAttackTest, UidZeroIsJudgedByTheModeBitsLikeAnyone) {
  MakeDir(root_ + "/theirs", 2101, 2101, 0700);
  Put(root_ + "/theirs/marker", "THEIRS");
  std::string seen = StageAndReadMarkerAs(operator_, root_ + "/theirs", true);
  EXPECT_TRUE(absl::StrContains(seen, "uid 0 (gids 0) may not open read-only")) << seen;
  EXPECT_EQ(StageAndReadMarkerAs({2101, {2101}}, root_ + "/theirs", false), "THEIRS");
}

// Paseo's Docker image: the container's uid 1000 is what SO_PEERCRED reports (no user namespace
// remapping), and the host inodes beneath the mapped root are judged for uid 1000.
TEST_F(WorkspaceAttackTest, DockerMappedPathsAreJudgedForTheHostUid) {
  deployment_ = Deployment("docker", root_, "/workspace");
  MakeDir(root_ + "/proj", 1000, 1000, 0700);
  Put(root_ + "/proj/marker", "PROJ");
  MakeDir(root_ + "/locked", 0, 0, 0700);
  MakeDir(root_ + "/locked/inner", 0, 0, 0755);
  Put(root_ + "/locked/inner/marker", "SECRET");
  const PeerIdentity docker{1000, {1000}};
  EXPECT_EQ(StageAndReadMarkerAs(docker, "/workspace/proj", false), "PROJ");
  std::string seen = StageAndReadMarkerAs(docker, "/workspace/locked/inner", true);
  EXPECT_TRUE(absl::StrContains(seen, "uid 1000 (gids 1000) may not search /workspace/locked"))
      << seen;
  EXPECT_FALSE(absl::StrContains(seen, root_)) << "the refusal names no host path: " << seen;
  EXPECT_TRUE(absl::StartsWith(StageAndReadMarkerAs({1001, {1001}}, "/workspace/proj", true),
                               "refused"));
}

// The check and the open use the same fd at every step, so swapping a directory the client may
// enter with one it may not (RENAME_EXCHANGE, in a tight loop) can only ever give the first or
// a refusal. A checker that looked at a path and then opened it again would lose this race.
TEST_F(WorkspaceAttackTest, APermissionSwapRaceNeverGrantsTheLockedSide) {
  MakeDir(root_ + "/a", 0, 0, 0755);
  MakeDir(root_ + "/a/open", 0, 0, 0755);
  MakeDir(root_ + "/a/open/inner", 0, 0, 0755);
  Put(root_ + "/a/open/inner/marker", "OPEN");
  MakeDir(root_ + "/a/locked", 0, 0, 0700);
  MakeDir(root_ + "/a/locked/inner", 0, 0, 0755);
  Put(root_ + "/a/locked/inner/marker", "SECRET");
  const PeerIdentity client{2101, {2101}};
  std::atomic<bool> stop{false};
  std::atomic<long> swaps{0};
  std::thread racer([&] {
    std::string a = root_ + "/a/open", b = root_ + "/a/locked";
    while (!stop.load()) {
      if (syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0)
        ++swaps;
    }
  });
  int staged = 0, refused = 0;
  std::string wrong;  // the first outcome that is neither the open side nor a refusal
  for (int i = 0; i < 2000 && wrong.empty(); ++i) {
    for (const char* p : {"/a/open/inner", "/a/open", "/a/locked/inner"}) {
      std::string marker = StageAndReadMarkerAs(client, root_ + p, true);
      if (marker == "OPEN" || (marker.empty() && std::string(p) == "/a/open")) {
        ++staged;
      } else if (absl::StartsWith(marker, "refused")) {
        ++refused;
      } else {
        wrong = absl::StrCat(p, " at iteration ", i, " gave: ", marker);
        break;
      }
    }
  }
  stop = true;
  racer.join();
  ASSERT_EQ(wrong, "") << "the locked side was given";
  std::printf("permission swap race: %ld swaps, %d staged, %d refused, 0 locked given\n",
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
