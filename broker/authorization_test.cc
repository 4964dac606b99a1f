#include "broker/authorization.h"

#include <sys/socket.h>
#include <unistd.h>

#include <capnp/message.h>

#include "gtest/gtest.h"

namespace paseo {
namespace {

TEST(AuthorizationTest, UidOrAnyGidGrantsAccessNothingElseDoes) {
  capnp::MallocMessageBuilder m;
  auto d = m.initRoot<helper::DeploymentPolicy>();
  d.setId("alpha");
  auto uids = d.initAllowedUids(1);
  uids.set(0, 1000);
  auto gids = d.initAllowedGids(1);
  gids.set(0, 2000);
  auto r = d.asReader();
  EXPECT_TRUE(MayUse(Peer{1000, {1000}}, r));
  EXPECT_TRUE(MayUse(Peer{1234, {1234, 2000}}, r)) << "supplementary group";
  EXPECT_TRUE(MayUse(Peer{1234, {2000}}, r)) << "primary group";
  EXPECT_FALSE(MayUse(Peer{1234, {1234, 1000}}, r)) << "a gid equal to an allowed uid is no uid";
  EXPECT_FALSE(MayUse(Peer{0, {0}}, r)) << "root is not special";
  EXPECT_FALSE(MayUse(Peer{}, r));
}

TEST(AuthorizationTest, ReadsOwnCredentialsFromASocketPair) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Peer peer;
  ASSERT_TRUE(ReadPeer(sv[0], &peer));
  EXPECT_EQ(peer.uid, getuid());
  ASSERT_FALSE(peer.gids.empty());
  EXPECT_EQ(peer.gids[0], getgid());
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace paseo
