#include "privhelper/network/netns.h"

#include <fcntl.h>
#include <net/if.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "gtest/gtest.h"
#include "privhelper/network/userns_sandbox.h"

namespace paseo::network {
namespace {

TEST(Netns, CreateEnterAndRemove) {
  std::string dir = testing::TempDir("netns");
  ASSERT_FALSE(dir.empty());
  int rc = testing::InUserNamespace([&] {
    std::string pin = dir + "/sb-1";
    CHECK_OR_FAIL(CreateNetns(pin).ok());
    CHECK_OR_FAIL(IsNetns(pin));
    // A second create on the same pin refuses and leaves the first alone.
    CHECK_OR_FAIL(!CreateNetns(pin).ok());
    CHECK_OR_FAIL(IsNetns(pin));
    // Inside it, a different namespace than ours: a fresh one has lo only, down.
    struct stat mine, theirs;
    CHECK_OR_FAIL(stat("/proc/self/ns/net", &mine) == 0);
    CHECK_OR_FAIL(InNetnsFile(pin, [&] {
                    if (stat("/proc/thread-self/ns/net", &theirs) != 0)
                      return absl::InternalError("stat");
                    if (if_nametoindex("lo") == 0) return absl::InternalError("no lo");
                    return absl::OkStatus();
                  }).ok());
    CHECK_OR_FAIL(mine.st_ino != theirs.st_ino);
    // Our own thread never moved.
    struct stat after;
    CHECK_OR_FAIL(stat("/proc/self/ns/net", &after) == 0 && after.st_ino == mine.st_ino);
    CHECK_OR_FAIL(RemoveNetns(pin).ok());
    CHECK_OR_FAIL(access(pin.c_str(), F_OK) != 0);
    CHECK_OR_FAIL(RemoveNetns(pin).ok());  // gone already: fine
    // Re-pinning a process's namespace (adoption): our own.
    CHECK_OR_FAIL(PinNetnsOf(getpid(), pin).ok());
    CHECK_OR_FAIL(IsNetns(pin));
    CHECK_OR_FAIL(PinNetnsOf(getpid(), pin).ok());  // already pinned: kept
    CHECK_OR_FAIL(RemoveNetns(pin).ok());
    return true;
  });
  rmdir(dir.c_str());
  if (rc == 77) GTEST_SKIP() << "no unprivileged user namespaces here";
  EXPECT_EQ(rc, 0);
}

TEST(Netns, IsNetnsRefusesOtherFiles) {
  EXPECT_FALSE(IsNetns("/proc/self/ns/mnt"));
  EXPECT_FALSE(IsNetns("/dev/null"));
  EXPECT_FALSE(IsNetns("/nonexistent"));
  EXPECT_FALSE(IsNetns("/proc/self/ns/net"));  // a magic link, not a pin: never followed
}

}  // namespace
}  // namespace paseo::network
