#include "privhelper/exit_status.h"

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace paseo {
namespace {

// The shape of a real `runsc --debug-log=... exec` log (runsc 0.0~20221219).
std::string Log(const std::string& status_line) {
  return "I1129 11:55:54.795189   29866 main.go:216] ***************************\n"
         "I1129 11:55:54.795217   29866 main.go:217] Args: [runsc exec --process p.json s1]\n"
         "I1129 11:55:54.796905   29866 exec.go:140] Using exec capabilities from container\n" +
         status_line;
}

TEST(ParseRunscExitLine, DecodesExitsAndSignals) {
  EXPECT_EQ(ParseRunscExitLine(Log("I1129 11:55:54.80 1 main.go:266] Exiting with status: 36608\n")),
            36608);  // exit 143
  EXPECT_EQ(ParseRunscExitLine(Log("I1 2 3 main.go:266] Exiting with status: 15\n")), 15);  // SIGTERM
  EXPECT_EQ(ParseRunscExitLine(Log("I1 2 3 main.go:266] Exiting with status: 0")), 0);
}

TEST(ParseRunscExitLine, RefusesAnythingElse) {
  EXPECT_EQ(ParseRunscExitLine(""), std::nullopt);
  EXPECT_EQ(ParseRunscExitLine(Log("W1 2 3 main.go:270] Failure to execute command, err: 1\n")),
            std::nullopt);
  EXPECT_EQ(ParseRunscExitLine(Log("I1 2 3 main.go:266] Exiting with status: 12x\n")), std::nullopt);
  EXPECT_EQ(ParseRunscExitLine(Log("I1 2 3 main.go:266] Exiting with status: -1\n")), std::nullopt);
  EXPECT_EQ(ParseRunscExitLine(Log("I1 2 3 main.go:266] Exiting with status: 99999999999\n")),
            std::nullopt);
  // 0x137f is "stopped by SIGSTOP", not an end.
  EXPECT_EQ(ParseRunscExitLine(Log("I1 2 3 main.go:266] Exiting with status: 4991\n")), std::nullopt);
  EXPECT_EQ(ParseRunscExitLine(Log("I1 2 3 main.go:266] Exiting with status: \n")), std::nullopt);
}

TEST(ParseOomKillCount, ReadsV1AndV2) {
  EXPECT_EQ(ParseOomKillCount("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 3u);
  EXPECT_EQ(ParseOomKillCount("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n"), 1u);
  EXPECT_EQ(ParseOomKillCount("oom_kill_disable 0\nunder_oom 0\n"), std::nullopt);
  EXPECT_EQ(ParseOomKillCount(""), std::nullopt);
}

TEST(ReadOomKillCount, FindsTheV1FileThenTheV2File) {
  std::string root = std::string(getenv("TEST_TMPDIR")) + "/cg";
  mkdir(root.c_str(), 0755);
  mkdir((root + "/memory").c_str(), 0755);
  mkdir((root + "/memory/p").c_str(), 0755);
  mkdir((root + "/memory/p/a").c_str(), 0755);
  mkdir((root + "/p").c_str(), 0755);
  mkdir((root + "/p/b").c_str(), 0755);
  std::ofstream(root + "/memory/p/a/memory.oom_control") << "oom_kill_disable 0\noom_kill 2\n";
  std::ofstream(root + "/p/b/memory.events") << "oom 1\noom_kill 1\n";
  EXPECT_EQ(ReadOomKillCount("/p/a", root), 2u);
  EXPECT_EQ(ReadOomKillCount("/p/b", root), 1u);
  EXPECT_EQ(ReadOomKillCount("/p/none", root), std::nullopt);
}

TEST(ParseRunscExitLine, OnlyTheLastLineCounts) {
  // runsc logs a program it could not load by its name, as given: a client-chosen argv[0]
  // with newlines must not pass for runsc's own final line.
  std::string forged = Log("W1 2 3 exec.go:1] failed to load /x\nI1 2 3 main.go:266] Exiting with status: 0\n"
                           "W1 2 3 main.go:270] Failure to execute command, err: 1\n");
  EXPECT_EQ(ParseRunscExitLine(forged), std::nullopt);
  EXPECT_EQ(DecideProcessExit(128 << 8, forged, false), (ProcessExit{ProcessExit::kUnknown, 0}));
}

TEST(DecideProcessExit, TheLoggedStatusMustMatchRunscsExitCode) {
  // A log that ends "exited 0" while runsc exited 128 is not believed.
  EXPECT_EQ(DecideProcessExit(128 << 8, Log("I1 2 3 main.go:266] Exiting with status: 0\n"), false),
            (ProcessExit{ProcessExit::kUnknown, 0}));
  EXPECT_EQ(DecideProcessExit(137 << 8, Log("I1 2 3 main.go:266] Exiting with status: 15\n"), false),
            (ProcessExit{ProcessExit::kUnknown, 0}));
}

TEST(DecideProcessExit, PrefersWhatRunscLogged) {
  const int runsc_exit_143 = 143 << 8;
  EXPECT_EQ(DecideProcessExit(runsc_exit_143, Log("I1 2 3 main.go:266] Exiting with status: 15\n"), false),
            (ProcessExit{ProcessExit::kSignaled, 15}));
  EXPECT_EQ(DecideProcessExit(runsc_exit_143, Log("I1 2 3 main.go:266] Exiting with status: 36608\n"), false),
            (ProcessExit{ProcessExit::kExited, 143}));
  EXPECT_EQ(DecideProcessExit(0, Log("I1 2 3 main.go:266] Exiting with status: 0\n"), false),
            (ProcessExit{ProcessExit::kExited, 0}));
  // The sandbox died under it: runsc exits 128 with no status line.
  EXPECT_EQ(DecideProcessExit(128 << 8, Log(""), true), (ProcessExit{ProcessExit::kOomKilled, 0}));
  EXPECT_EQ(DecideProcessExit(128 << 8, Log(""), false), (ProcessExit{ProcessExit::kUnknown, 0}));
  // runsc itself was killed: whatever it logged before is not the end.
  EXPECT_EQ(DecideProcessExit(SIGKILL, Log("I1 2 3 main.go:266] Exiting with status: 9\n"), false),
            (ProcessExit{ProcessExit::kUnknown, 0}));
}

}  // namespace
}  // namespace paseo
