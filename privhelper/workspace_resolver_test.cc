// The client-permission walk of ResolveWorkspace (workspace_resolver.h), without root: the test
// user owns every directory in TEST_TMPDIR and the walk is judged for other uids and groups.
// Regression for the attack run's item 1: the privhelper resolved with CAP_DAC_OVERRIDE, so a
// client got a workspace beneath a 0700 directory it could not enter itself. Mounting and the
// same cases on root-owned trees: testing/workspace_attack_test.cc.
#include "privhelper/workspace_resolver.h"

#include <capnp/message.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

class WorkspaceResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string templ = std::string(base != nullptr && *base ? base : "/tmp") + "/wr.XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    root_ = templ;
    ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
    // Every directory is the test user's, in its primary group.
    for (auto [dir, mode] : std::vector<std::pair<std::string, mode_t>>{{"locked", 0700},
                                                                        {"locked/inner", 0755},
                                                                        {"readable", 0744},
                                                                        {"readable/inner", 0755},
                                                                        {"shared", 0755},
                                                                        {"team", 0770},
                                                                        {"team/inner", 0755},
                                                                        {"open", 0757},
                                                                        {"writeonly", 0733}}) {
      std::string path = root_ + "/" + dir;
      ASSERT_EQ(mkdir(path.c_str(), 0700), 0) << path;
      ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
    }
    std::ofstream(root_ + "/locked/inner/marker") << "X";
    deployment_ = Deployment(root_, "");
  }

  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  config::Deployment::Reader Deployment(const std::string& host, const std::string& client) {
    auto& m = messages_.emplace_back(std::make_unique<capnp::MallocMessageBuilder>());
    auto d = m->initRoot<config::Deployment>();
    d.setId("alpha");
    auto roots = d.initWorkspaceRoots(1);
    roots[0].setHostPath(host);
    roots[0].setClientPath(client);
    return d.asReader();
  }

  absl::Status Resolve(const std::string& path, const PeerIdentity& peer, bool read_only) {
    return ResolveWorkspace(deployment_, path, peer, read_only).status();
  }

  // Refused as permission-denied, naming `denied` (as the client sees it) and what was wanted.
  void ExpectDenied(const std::string& path, const PeerIdentity& peer, bool read_only,
                    const std::string& denied, const std::string& what) {
    absl::Status s = Resolve(path, peer, read_only);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << path << ": " << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "may not " + what + " " + denied)) << s;
    EXPECT_TRUE(absl::EndsWith(s.message(), denied)) << "names the first directory denied: " << s;
  }

  PeerIdentity me_{getuid(), {getgid()}};
  PeerIdentity stranger_{getuid() + 1000, {getgid() + 1000}};
  PeerIdentity member_{getuid() + 1000, {getgid() + 1000, getgid()}};  // supplementary group
  std::string root_;
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> messages_;
  config::Deployment::Reader deployment_;
};

TEST_F(WorkspaceResolverTest, TheOwnerReachesItsOwnLockedDirectory) {
  auto ws = ResolveWorkspace(deployment_, root_ + "/locked/inner", me_, /*read_only=*/false);
  ASSERT_TRUE(ws.ok()) << ws.status();
  EXPECT_EQ(ws->relative, "locked/inner");
}

// The exact shape of the report: a 0700 directory above a 0755 one.
TEST_F(WorkspaceResolverTest, ALockedIntermediateDirectoryRefusesEveryoneElse) {
  ExpectDenied(root_ + "/locked/inner", stranger_, true, root_ + "/locked", "search");
  ExpectDenied(root_ + "/locked", stranger_, true, root_ + "/locked", "open read-only");
  ExpectDenied(root_ + "/locked/inner", member_, true, root_ + "/locked", "search");
}

TEST_F(WorkspaceResolverTest, NothingIsRevealedBeneathADirectoryThePeerMayNotSearch) {
  // Existing and missing paths below it are refused alike, before anything is opened there.
  ExpectDenied(root_ + "/locked/missing", stranger_, true, root_ + "/locked", "search");
  ExpectDenied(root_ + "/locked/inner/marker", stranger_, true, root_ + "/locked", "search");
  EXPECT_EQ(Resolve(root_ + "/locked/missing", me_, true).code(), absl::StatusCode::kNotFound);
}

TEST_F(WorkspaceResolverTest, AReadableButUnsearchableDirectoryIsNoWayThrough) {
  ExpectDenied(root_ + "/readable/inner", stranger_, true, root_ + "/readable", "search");
  ExpectDenied(root_ + "/readable", stranger_, true, root_ + "/readable", "open read-only");
}

TEST_F(WorkspaceResolverTest, ReadWriteNeedsWritePermissionOnTheWorkspace) {
  EXPECT_TRUE(Resolve(root_ + "/shared", stranger_, /*read_only=*/true).ok());
  ExpectDenied(root_ + "/shared", stranger_, false, root_ + "/shared", "open read-write");
  EXPECT_TRUE(Resolve(root_ + "/open", stranger_, /*read_only=*/false).ok()) << "other rwx";
  // Write and search without read is not enough for either mode.
  ExpectDenied(root_ + "/writeonly", stranger_, false, root_ + "/writeonly", "open read-write");
  ExpectDenied(root_ + "/writeonly", stranger_, true, root_ + "/writeonly", "open read-only");
}

TEST_F(WorkspaceResolverTest, GroupPermissionComesFromTheGroupsThePeerHas) {
  EXPECT_TRUE(Resolve(root_ + "/team", member_, /*read_only=*/false).ok())
      << "granted through a supplementary gid";
  EXPECT_TRUE(Resolve(root_ + "/team/inner", member_, /*read_only=*/true).ok());
  ExpectDenied(root_ + "/team/inner", stranger_, true, root_ + "/team", "search");
  PeerIdentity other_group{getuid() + 1000, {getgid() + 1000, getgid() + 1001}};
  ExpectDenied(root_ + "/team", other_group, true, root_ + "/team", "open read-only");
}

TEST_F(WorkspaceResolverTest, TheRootItselfIsChecked) {
  ASSERT_EQ(chmod(root_.c_str(), 0700), 0);
  ExpectDenied(root_, stranger_, true, root_, "open read-only");
  ExpectDenied(root_ + "/shared", stranger_, true, root_, "search");
  EXPECT_TRUE(Resolve(root_ + "/shared", me_, false).ok());
  ASSERT_EQ(chmod(root_.c_str(), 0755), 0);
}

TEST_F(WorkspaceResolverTest, UidZeroGetsNoBypass) {
  if (getuid() == 0) GTEST_SKIP() << "uid 0 owns these directories when the test runs as root";
  PeerIdentity root_peer{0, {0}};
  ExpectDenied(root_ + "/locked/inner", root_peer, true, root_ + "/locked", "search");
  ExpectDenied(root_ + "/shared", root_peer, false, root_ + "/shared", "open read-write");
}

TEST_F(WorkspaceResolverTest, ADockerMappedPathIsRefusedInTheClientsOwnTerms) {
  deployment_ = Deployment(root_, "/workspace");
  ExpectDenied("/workspace/locked/inner", stranger_, true, "/workspace/locked", "search");
  absl::Status s = Resolve("/workspace/locked/inner", stranger_, true);
  EXPECT_FALSE(absl::StrContains(s.message(), root_)) << "no host path in the refusal: " << s;
  EXPECT_TRUE(Resolve("/workspace/locked/inner", me_, false).ok());
  EXPECT_TRUE(Resolve("/workspace/shared", stranger_, true).ok());
}

}  // namespace
}  // namespace paseo

namespace paseo {
namespace {

std::string Fresh(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base != nullptr ? base : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Issue 26: an empty workspace (a git source's clone) is removed with its sandbox. What the
// sandbox put there is removed, and nothing it points at outside.
TEST(RemoveEmptyWorkspaceTest, RemovesEverythingInsideAndNothingASymlinkLeadsTo) {
  std::string base = Fresh("remove-empty");
  std::string outside = base + "/outside";
  std::filesystem::create_directories(outside + "/keep");
  std::ofstream(outside + "/keep/file") << "precious";
  std::string ws = base + "/bundle/mounts/empty-0";
  std::filesystem::create_directories(ws + "/a/b/c");
  std::ofstream(ws + "/a/b/c/f") << "x";
  std::ofstream(ws + "/top") << "y";
  std::filesystem::create_directory_symlink(outside, ws + "/link-dir");
  std::filesystem::create_directory_symlink(outside + "/keep", ws + "/a/link-keep");
  std::filesystem::create_symlink(outside + "/keep/file", ws + "/a/b/link-file");
  mkfifo((ws + "/a/fifo").c_str(), 0600);
  std::filesystem::create_directories(ws + "/locked/inner");
  chmod((ws + "/locked/inner").c_str(), 0);  // the owner (this test) may still remove it
  chmod((ws + "/locked").c_str(), 0500);
  absl::Status st = RemoveEmptyWorkspace(ws);
  // As an ordinary user a 0500 directory cannot be emptied; the privhelper (root) can. Make it
  // removable and go again: what matters is what was and was not touched.
  if (!st.ok()) {
    chmod((ws + "/locked").c_str(), 0700);
    chmod((ws + "/locked/inner").c_str(), 0700);
    st = RemoveEmptyWorkspace(ws);
  }
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FALSE(std::filesystem::exists(ws));
  EXPECT_TRUE(std::filesystem::exists(outside + "/keep/file"));
  EXPECT_TRUE(std::filesystem::exists(base + "/bundle/mounts"));
  EXPECT_TRUE(RemoveEmptyWorkspace(ws).ok()) << "already gone: nothing to do";
}

// `depth` nested directories named `name` under `dir`, a file in every `file_every`-th (0:
// none). Made relative to each parent's fd: the whole path may be longer than PATH_MAX.
void MakeChain(const std::string& dir, int depth, const std::string& name, int file_every) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  for (int i = 0; i < depth; ++i) {
    ASSERT_EQ(mkdirat(fd, name.c_str(), 0700), 0) << i;
    int next = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(next, 0);
    if (file_every > 0 && i % file_every == 0)
      close(openat(next, "file", O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
    close(fd);
    fd = next;
  }
  close(fd);
}

// The sandbox's user can prepare names the deep-tree move uses: none is replaced or followed.
TEST(RemoveEmptyWorkspaceTest, NamesTheSandboxPreparedForTheMoveUpAreNeitherReplacedNorInTheWay) {
  std::string ws = Fresh("remove-names") + "/empty-0";
  std::filesystem::create_directories(ws + "/.paseo-deep-0/full");
  std::ofstream(ws + "/.paseo-deep-1") << "a file";
  std::filesystem::create_directory_symlink("/etc", ws + "/.paseo-deep-2");
  MakeChain(ws, 2 * kMaxRemoveDepth, "d", 0);
  absl::Status st = RemoveEmptyWorkspace(ws);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FALSE(std::filesystem::exists(ws));
  EXPECT_TRUE(std::filesystem::exists("/etc/passwd"));
}

TEST(RemoveEmptyWorkspaceTest, ATreeDeeperThanItsFdBoundIsRemovedWhole) {
  std::string ws = Fresh("remove-deep") + "/empty-0";
  std::filesystem::create_directories(ws);
  MakeChain(ws, 5 * kMaxRemoveDepth, std::string(200, 'd'), 7);
  absl::Status st = RemoveEmptyWorkspace(ws);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FALSE(std::filesystem::exists(ws));
}

}  // namespace
}  // namespace paseo
