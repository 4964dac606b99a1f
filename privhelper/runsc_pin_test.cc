#include "privhelper/runsc_pin.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include <capnp/message.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

std::string TempFile(const std::string& content) {
  const char* base = getenv("TEST_TMPDIR");
  std::string path = std::string(base != nullptr && *base ? base : "/tmp") + "/pin.XXXXXX";
  int fd = mkstemp(path.data());
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  close(fd);
  return path;
}

TEST(Sha256OfFdTest, HashesTheWholeFile) {
  std::string path = TempFile("abc");
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto sha = Sha256OfFd(fd, path);
  close(fd);
  ASSERT_TRUE(sha.ok()) << sha.status();
  EXPECT_EQ(*sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  unlink(path.c_str());
}

// A file the test user owns is not root-owned: refused before it is hashed.
TEST(OpenRootOwnedExecutableTest, RefusesAFileNotOwnedByRoot) {
  if (geteuid() == 0) GTEST_SKIP() << "runs as an ordinary user";
  std::string path = TempFile("#!/bin/true\n");
  auto fd = OpenRootOwnedExecutable(path);
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(fd.status().message(), "owned by root")) << fd.status();
  unlink(path.c_str());
}

TEST(OpenPinnedRunscTest, AcceptsTheMatchingDigestAndRefusesAnother) {
  // /bin/true stands in for runsc: a root-owned executable every user can read.
  int probe = open("/bin/true", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(probe, 0);
  auto sha = Sha256OfFd(probe, "/bin/true");
  close(probe);
  ASSERT_TRUE(sha.ok()) << sha.status();
  capnp::MallocMessageBuilder message;
  auto pin = message.initRoot<config::RunscPin>();
  pin.setPath("/bin/true");
  pin.setSha256(*sha);
  auto fd = OpenPinnedRunsc(pin.asReader());
  ASSERT_TRUE(fd.ok()) << fd.status();
  close(*fd);

  pin.setSha256(std::string(64, '0'));
  auto wrong = OpenPinnedRunsc(pin.asReader());
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), "does not match the pinned 000"))
      << wrong.status();
  EXPECT_TRUE(absl::StrContains(wrong.status().message(), *sha)) << wrong.status();
}

}  // namespace
}  // namespace paseo
