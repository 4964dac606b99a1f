// The client-permission check the privhelper makes before it gives a workspace
// (peer_access.h): the kernel's rules for owner, group, other and POSIX ACLs, evaluated for a
// client's uid and gids with no capability bypass. Runs as any user.
#include "privhelper/peer_access.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

namespace paseo {
namespace {

constexpr int kR = kMayRead, kW = kMayWrite, kX = kMayExec;

// The system.posix_acl_access encoding: version 2, then (tag, perm, id) little-endian.
std::string Xattr(const PosixAcl& entries, uint32_t version = 2) {
  std::string out;
  auto le = [&out](uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  le(version, 4);
  for (const auto& e : entries) {
    le(e.tag, 2);
    le(e.perm, 2);
    le(e.id, 4);
  }
  return out;
}

constexpr uint16_t kUserObj = 0x01, kUser = 0x02, kGroupObj = 0x04, kGroup = 0x08, kMask = 0x10,
                   kOther = 0x20;
constexpr uint32_t kUndefined = 0xffffffff;

PeerIdentity Peer(uid_t uid, std::vector<gid_t> gids) { return PeerIdentity{uid, std::move(gids)}; }

TEST(ParsePosixAclTest, DecodesWhatTheKernelStores) {
  auto acl = ParsePosixAcl(Xattr({{kUserObj, 7, kUndefined},
                                  {kUser, 5, 2101},
                                  {kGroupObj, 5, kUndefined},
                                  {kGroup, 7, 27},
                                  {kMask, 5, kUndefined},
                                  {kOther, 0, kUndefined}}));
  ASSERT_TRUE(acl.ok()) << acl.status();
  ASSERT_EQ(acl->size(), 6u);
  EXPECT_EQ((*acl)[1].tag, kUser);
  EXPECT_EQ((*acl)[1].perm, 5);
  EXPECT_EQ((*acl)[1].id, 2101u);
  EXPECT_EQ((*acl)[3].id, 27u);
}

TEST(ParsePosixAclTest, RefusesAnythingMalformed) {
  const PosixAcl minimal = {
      {kUserObj, 7, kUndefined}, {kGroupObj, 5, kUndefined}, {kOther, 5, kUndefined}};
  ASSERT_TRUE(ParsePosixAcl(Xattr(minimal)).ok());
  struct Case {
    const char* name;
    std::string value;
  } cases[] = {
      {"empty", ""},
      {"version 1", Xattr(minimal, 1)},
      {"truncated entry", Xattr(minimal).substr(0, 4 + 8 * 3 - 1)},
      {"no entries", Xattr({})},
      {"unknown tag", Xattr({{kUserObj, 7, 0}, {0x40, 7, 0}, {kGroupObj, 5, 0}, {kOther, 5, 0}})},
      {"permission bits above rwx", Xattr({{kUserObj, 8, 0}, {kGroupObj, 5, 0}, {kOther, 5, 0}})},
      {"no owner entry", Xattr({{kGroupObj, 5, 0}, {kOther, 5, 0}})},
      {"no other entry", Xattr({{kUserObj, 7, 0}, {kGroupObj, 5, 0}})},
      {"two group entries",
       Xattr({{kUserObj, 7, 0}, {kGroupObj, 5, 0}, {kGroupObj, 7, 0}, {kOther, 5, 0}})},
      {"named user without a mask",
       Xattr({{kUserObj, 7, 0}, {kUser, 7, 5}, {kGroupObj, 5, 0}, {kOther, 5, 0}})},
  };
  for (const auto& c : cases) EXPECT_FALSE(ParsePosixAcl(c.value).ok()) << c.name;
}

// owner 1000, group 100; the peer 2101 with primary group 2101.
struct ModeCase {
  const char* name;
  mode_t mode;
  PeerIdentity peer;
  int want;
  bool granted;
};

TEST(PermitsTest, ModeBitsAreJudgedForThePeerAlone) {
  const ModeCase cases[] = {
      {"owner, 0700, rwx", 0700, Peer(1000, {1000}), kR | kW | kX, true},
      {"owner denied by the owner bits even where group and other grant", 0077, Peer(1000, {100}),
       kX, false},
      {"locked 0700 directory of another owner", 0700, Peer(2101, {2101}), kX, false},
      {"other may search 0701", 0701, Peer(2101, {2101}), kX, true},
      {"other may read but not search 0704", 0704, Peer(2101, {2101}), kX, false},
      {"other may read 0704 but not read and search", 0704, Peer(2101, {2101}), kR | kX, false},
      {"other read-only asking read-write", 0755, Peer(2101, {2101}), kR | kW | kX, false},
      {"other read-write 0757", 0757, Peer(2101, {2101}), kR | kW | kX, true},
      {"group through a supplementary gid", 0770, Peer(2101, {2101, 100}), kR | kW | kX, true},
      {"group through the primary gid", 0750, Peer(2101, {100}), kR | kX, true},
      {"a gid the peer does not have", 0770, Peer(2101, {2101, 101}), kX, false},
      {"the group class is exclusive: in the group, denied, though other grants", 0707,
       Peer(2101, {100}), kX, false},
      {"uid 0 gets no bypass", 0700, Peer(0, {0}), kX, false},
      {"uid 0 is judged as other", 0705, Peer(0, {0}), kR | kX, true},
      {"uid 0 cannot write 0755", 0755, Peer(0, {0}), kW, false},
      {"no gids at all", 0770, Peer(2101, {}), kX, false},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(Permits(1000, 100, S_IFDIR | c.mode, nullptr, c.peer, c.want), c.granted) << c.name;
  }
}

TEST(PermitsTest, PosixAclsAreEvaluatedAsTheKernelDoes) {
  // owner 1000 rwx, user 2101 r-x, owning group 100 r-x, group 27 rwx, mask r-x, other ---:
  // the mode shows the mask in the group bits, 0750.
  PosixAcl acl = {{kUserObj, 7, kUndefined}, {kUser, 5, 2101},       {kGroupObj, 5, kUndefined},
                  {kGroup, 7, 27},           {kMask, 5, kUndefined}, {kOther, 0, kUndefined}};
  const mode_t mode = S_IFDIR | 0750;
  auto permits = [&](const PeerIdentity& p, int want) {
    return Permits(1000, 100, mode, &acl, p, want);
  };
  EXPECT_TRUE(permits(Peer(2101, {2101}), kR | kX)) << "a named user entry grants beyond other";
  EXPECT_FALSE(permits(Peer(2101, {2101}), kW)) << "and no more than it says";
  EXPECT_TRUE(permits(Peer(3000, {3000, 27}), kR | kX)) << "a named group via a supplementary gid";
  EXPECT_FALSE(permits(Peer(3000, {3000, 27}), kW)) << "the mask limits a named group";
  EXPECT_TRUE(permits(Peer(3000, {100}), kX)) << "the owning group entry";
  EXPECT_FALSE(permits(Peer(3000, {3000}), kX)) << "no entry matches: other (---)";
  EXPECT_FALSE(permits(Peer(0, {0}), kX)) << "uid 0 gets no bypass";
  EXPECT_TRUE(permits(Peer(1000, {1000}), kR | kW | kX)) << "the owner";

  // A matching group entry that does not grant denies, even if other would grant.
  PosixAcl deny = {{kUserObj, 7, kUndefined},
                   {kGroupObj, 0, kUndefined},
                   {kGroup, 0, 27},
                   {kMask, 7, kUndefined},
                   {kOther, 5, kUndefined}};
  EXPECT_FALSE(Permits(1000, 100, S_IFDIR | 0775, &deny, Peer(3000, {27}), kX));
  EXPECT_TRUE(Permits(1000, 100, S_IFDIR | 0775, &deny, Peer(3000, {3000}), kX));
  // One of several matching group entries granting is enough.
  PosixAcl either = {{kUserObj, 7, kUndefined}, {kGroupObj, 0, kUndefined},
                     {kGroup, 0, 26},           {kGroup, 5, 27},
                     {kMask, 7, kUndefined},    {kOther, 0, kUndefined}};
  EXPECT_TRUE(Permits(1000, 100, S_IFDIR | 0770, &either, Peer(3000, {26, 27}), kX));
  // With the group bits (the mask) at 0 the kernel does not look at the ACL.
  EXPECT_FALSE(Permits(1000, 100, S_IFDIR | 0700, &acl, Peer(2101, {2101}), kX));
}

class PeerMayAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string templ = std::string(base != nullptr && *base ? base : "/tmp") + "/pa.XXXXXX";
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { rmdir(dir_.c_str()); }

  int OpenPath() { return open(dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC); }

  std::string dir_;
};

TEST_F(PeerMayAccessTest, ReadsTheInodeBehindAnOPathFd) {
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  int fd = OpenPath();
  ASSERT_GE(fd, 0);
  PeerIdentity me = Peer(getuid(), {getgid()});
  PeerIdentity stranger = Peer(getuid() + 1, {getgid() + 1});
  EXPECT_EQ(PeerMayAccess(fd, me, kR | kW | kX).value_or(false), true);
  EXPECT_EQ(PeerMayAccess(fd, stranger, kX).value_or(true), false);
  // The same fd after a chmod: the decision follows the inode, not a cached look.
  ASSERT_EQ(chmod(dir_.c_str(), 0705), 0);
  EXPECT_EQ(PeerMayAccess(fd, stranger, kR | kX).value_or(false), true);
  EXPECT_EQ(PeerMayAccess(fd, stranger, kR | kW | kX).value_or(true), false);
  close(fd);
}

TEST_F(PeerMayAccessTest, AnAclOnDiskIsHonoured) {
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  uid_t friend_uid = getuid() + 7;
  std::string acl = Xattr({{kUserObj, 7, kUndefined},
                           {kUser, 5, friend_uid},
                           {kGroupObj, 0, kUndefined},
                           {kMask, 5, kUndefined},
                           {kOther, 0, kUndefined}});
  if (setxattr(dir_.c_str(), "system.posix_acl_access", acl.data(), acl.size(), 0) != 0) {
    GTEST_SKIP() << "no POSIX ACLs on " << dir_ << ": " << std::strerror(errno);
  }
  struct stat st;
  ASSERT_EQ(stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u) << "the kernel shows the mask as the group bits";
  int fd = OpenPath();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(PeerMayAccess(fd, Peer(friend_uid, {friend_uid}), kR | kX).value_or(false), true)
      << "granted by a named-user entry, not by the mode bits";
  EXPECT_EQ(PeerMayAccess(fd, Peer(friend_uid, {friend_uid}), kW).value_or(true), false);
  EXPECT_EQ(PeerMayAccess(fd, Peer(friend_uid + 1, {getgid() + 1}), kX).value_or(true), false);
  close(fd);
}

}  // namespace
}  // namespace paseo
