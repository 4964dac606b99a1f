// PidfdWatcher on the test's own children (no root): a watched process's exit is seen, its
// status is read once it is reaped, and a pid that is gone, a zombie, or outside the cgroup is
// not watched.
#include "privhelper/pidfd_watch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include <kj/async-io.h>

#include "gtest/gtest.h"

namespace paseo {
namespace {

// The cgroup path of this process in its first hierarchy listed.
std::string OwnCgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::getline(in, line);
  return line.substr(line.find(':', line.find(':') + 1) + 1);
}

pid_t Sleeper() {
  pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

class PidfdWatchTest : public ::testing::Test {
 protected:
  ~PidfdWatchTest() noexcept override {}
  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  PidfdWatcher watcher_{io_.unixEventPort};
};

TEST(InCgroupTest, MatchesAWholePathInAnyHierarchy) {
  std::string v1 = "12:pids:/paseo-sandbox/sb-1\n4:memory:/paseo-sandbox/sb-1\n0::/\n";
  EXPECT_TRUE(InCgroup(v1, "/paseo-sandbox/sb-1"));
  EXPECT_FALSE(InCgroup(v1, "/paseo-sandbox/sb-"));
  EXPECT_FALSE(InCgroup(v1, "/paseo-sandbox"));
  EXPECT_TRUE(InCgroup("0::/paseo-sandbox/sb-2\n", "/paseo-sandbox/sb-2"));
  EXPECT_FALSE(InCgroup("0::/paseo-sandbox/sb-22\n", "/paseo-sandbox/sb-2"));
  EXPECT_FALSE(InCgroup("", "/paseo-sandbox/sb-1"));
}

TEST_F(PidfdWatchTest, SeesTheExitAndReadsTheStatusOnceReaped) {
  pid_t child = Sleeper();
  auto watched = watcher_.Watch(child, OwnCgroup());
  ASSERT_TRUE(watched.ok()) << watched.status();
  ASSERT_NE(watched->get(), nullptr);
  auto exited = (*watched)->Exited();
  EXPECT_FALSE(exited.poll(io_.waitScope)) << "it runs";
  kill(child, SIGKILL);
  exited.wait(io_.waitScope);
  // A zombie has no exit info yet: with no patience there is no status.
  EXPECT_EQ((*watched)->Status(0 * kj::SECONDS).wait(io_.waitScope), std::nullopt);
  auto status = (*watched)->Status(5 * kj::SECONDS);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  auto known = status.wait(io_.waitScope);
  ASSERT_TRUE(known.has_value()) << "PIDFD_INFO_EXIT needs Linux 6.15";
  EXPECT_TRUE(WIFSIGNALED(*known) && WTERMSIG(*known) == SIGKILL) << *known;
  // Exited can be asked again.
  (*watched)->Exited().wait(io_.waitScope);
}

TEST_F(PidfdWatchTest, ExitCodesAreWaitStatuses) {
  pid_t child = fork();
  if (child == 0) {
    usleep(100000);
    _exit(3);
  }
  auto watched = watcher_.Watch(child, OwnCgroup());
  ASSERT_TRUE(watched.ok() && watched->get() != nullptr);
  (*watched)->Exited().wait(io_.waitScope);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  auto known = (*watched)->Status(5 * kj::SECONDS).wait(io_.waitScope);
  ASSERT_TRUE(known.has_value());
  EXPECT_TRUE(WIFEXITED(*known) && WEXITSTATUS(*known) == 3) << *known;
}

TEST_F(PidfdWatchTest, WatchesNothingThatIsNotRunningInTheCgroup) {
  pid_t child = Sleeper();
  auto elsewhere = watcher_.Watch(child, "/paseo-sandbox/sb-0123456789abcdef01234567");
  ASSERT_TRUE(elsewhere.ok());
  EXPECT_EQ(elsewhere->get(), nullptr) << "a pid outside the sandbox's cgroup is not its process";
  kill(child, SIGKILL);
  usleep(50000);
  auto zombie = watcher_.Watch(child, OwnCgroup());
  ASSERT_TRUE(zombie.ok());
  EXPECT_EQ(zombie->get(), nullptr) << "an exited (unreaped) process";
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  auto gone = watcher_.Watch(child, OwnCgroup());
  ASSERT_TRUE(gone.ok());
  EXPECT_EQ(gone->get(), nullptr);
  auto none = watcher_.Watch(0, OwnCgroup());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->get(), nullptr);
}

}  // namespace
}  // namespace paseo
