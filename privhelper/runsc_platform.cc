// Choosing the gVisor platform from helper.json and what the pinned runsc has (runsc_platform.h).
#include "privhelper/runsc_platform.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/spawn.h"
#include "common/status.h"

namespace paseo {

std::vector<std::string> ParseRunscPlatforms(absl::string_view help) {
  // Go's flag package prints "  -platform string\n    \t<usage>"; the usage names the
  // platforms after "platform to use:" up to the sentence's end.
  size_t flag = help.find("-platform string");
  if (flag == absl::string_view::npos) return {};
  absl::string_view rest = help.substr(flag);
  size_t colon = rest.find("platform to use:");
  size_t line_end = rest.find('\n', rest.find('\n') + 1);  // the usage line's end
  if (colon == absl::string_view::npos || (line_end != absl::string_view::npos && colon > line_end))
    return {};
  rest = rest.substr(colon + sizeof("platform to use:") - 1);
  rest = rest.substr(0, std::min(rest.find('.'), rest.find('\n')));
  std::vector<std::string> names;
  for (absl::string_view part : absl::StrSplit(rest, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::EndsWith(part, "(default)")) part = absl::StripAsciiWhitespace(part.substr(0, part.size() - 9));
    bool plain = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_' || c == '-';
    });
    if (plain) names.emplace_back(part);
  }
  return names;
}

namespace {

// `runsc ARGS` from the verified fd, stdout and stderr together (at most 1 MiB), within 10 s.
absl::StatusOr<std::string> RunscOutput(int runsc_fd, std::vector<std::string> args) {
  const std::string what = absl::StrCat("runsc ", absl::StrJoin(args, " "));
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", what);
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) {
    close(out[0]);
    close(out[1]);
    return ErrnoStatus("open", "/dev/null");
  }
  SpawnRequest request;
  request.exec_fd = runsc_fd;
  request.argv = {"runsc"};
  request.argv.insert(request.argv.end(), args.begin(), args.end());
  request.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
  // runsc prints its flag help on stderr (and stdout for good measure).
  request.fds = {{0, devnull}, {1, out[1]}, {2, out[1]}};
  absl::StatusOr<pid_t> pid = Spawn(request);
  close(out[1]);
  close(devnull);
  if (!pid.ok()) {
    close(out[0]);
    return pid.status();
  }
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      timed_out = r == 0;
      break;
    }
    char buf[8192];
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < (1 << 20)) text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  // Its output ended (or the time did): the exit is waited for within what is left of the
  // 10 s, then it is killed, so a runsc that closed its output and hangs cannot stall a start.
  int status = 0;
  pid_t waited = 0;
  while (!timed_out && (waited = waitpid(*pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline)
    usleep(10000);
  if (waited != *pid) {
    timed_out = true;
    kill(*pid, SIGKILL);
    while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (timed_out) return absl::DeadlineExceededError(what + ": did not finish within 10 s");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return absl::InternalError(absl::StrCat(what, ": ended with wait status ", status));
  return text;
}

}  // namespace

absl::StatusOr<std::string> RunscVersion(int runsc_fd) {
  ASSIGN_OR_RETURN(std::string text, RunscOutput(runsc_fd, {"--version"}));
  // "runsc version 0.0~20240729.0\nspec: 1.2.0\n"
  constexpr absl::string_view kPrefix = "runsc version ";
  if (!absl::StartsWith(text, kPrefix))
    return absl::InternalError("runsc --version: not \"runsc version ...\"");
  std::string version = text.substr(kPrefix.size(), text.find('\n') - kPrefix.size());
  if (version.empty() || version.size() > 64 ||
      !std::all_of(version.begin(), version.end(), [](char c) { return absl::ascii_isgraph(c); }))
    return absl::InternalError("runsc --version: not a version");
  return version;
}

absl::StatusOr<std::string> RunscFlagsHelp(int runsc_fd) { return RunscOutput(runsc_fd, {"flags"}); }

bool RunscHasFlag(absl::string_view help, absl::string_view name) {
  // Go's flag package prints each flag as "  -<name>" alone or followed by " <type>".
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    if (absl::StartsWith(line, "  -") && !absl::StartsWith(line, "   ")) {
      absl::string_view flag = line.substr(3);
      flag = flag.substr(0, flag.find(' '));
      if (flag == name) return true;
    }
  }
  return false;
}

absl::StatusOr<std::vector<std::string>> RunscPlatforms(int runsc_fd) {
  return ReadRunscFlags(runsc_fd).platforms;
}

RunscFlagsInfo ReadRunscFlags(int runsc_fd) {
  RunscFlagsInfo info;
  absl::StatusOr<std::string> help = RunscFlagsHelp(runsc_fd);
  if (!help.ok()) {
    info.platforms = help.status();
    return info;
  }
  std::vector<std::string> names = ParseRunscPlatforms(*help);
  if (names.empty()) info.platforms = absl::InternalError("runsc flags: its -platform flag names no platform");
  else info.platforms = std::move(names);
  info.has_directfs_flag = RunscHasFlag(*help, "directfs");
  return info;
}

std::vector<std::string> RunscFlagsInfo::FixedFlags() const {
  if (has_directfs_flag) return {"--directfs=false"};
  return {};
}

absl::StatusOr<PlatformChoice> ChoosePlatform(absl::string_view configured,
                                              const std::vector<std::string>& available) {
  auto has = [&](absl::string_view p) {
    return std::find(available.begin(), available.end(), p) != available.end();
  };
  std::string list = absl::StrJoin(available, ", ");
  if (configured == "auto") {
    if (has("systrap") && has("ptrace"))
      return PlatformChoice{"systrap",
                            absl::StrCat("systrap (runsc.platform auto, not measured; the pinned runsc has ",
                                         list, ")"),
                            {"systrap", "ptrace"}};
    for (const char* p : {"systrap", "ptrace"}) {
      if (has(p))
        return PlatformChoice{p, absl::StrCat(p, " (runsc.platform auto; the pinned runsc has ", list, ")"), {}};
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "runsc.platform auto: the pinned runsc has neither systrap nor ptrace (it has ", list,
        "); set runsc.platform to one it has"));
  }
  if (configured != "systrap" && configured != "ptrace" && configured != "kvm")
    return absl::InvalidArgumentError(absl::StrCat(
        "runsc.platform \"", configured, "\": must be \"auto\", \"systrap\", \"ptrace\" or \"kvm\""));
  if (!has(configured))
    return absl::FailedPreconditionError(absl::StrCat(
        "runsc.platform \"", configured, "\": the pinned runsc does not have it (it has ", list,
        "); set runsc.platform to \"auto\" or one it has"));
  return PlatformChoice{std::string(configured), absl::StrCat(configured, " (runsc.platform ", configured, ")"), {}};
}

absl::StatusOr<PlatformChoice> ChoosePlatformFromProbe(
    absl::string_view configured, const absl::StatusOr<std::vector<std::string>>& available) {
  if (available.ok()) return ChoosePlatform(configured, *available);
  if (configured == "systrap" || configured == "ptrace" || configured == "kvm")
    return PlatformChoice{std::string(configured),
                          absl::StrCat(configured, " (runsc.platform ", configured,
                                       "; what the pinned runsc has is unknown: ",
                                       available.status().message(), ")"),
                          {}};
  if (configured == "auto")
    return absl::FailedPreconditionError(absl::StrCat(
        "runsc.platform auto: cannot tell which platforms the pinned runsc has (",
        available.status().message(), "); set runsc.platform to \"ptrace\" or \"systrap\""));
  return ChoosePlatform(configured, {});
}

absl::StatusOr<absl::Duration> RunPlatformSandbox(int runsc_fd, const std::string& platform,
                                                  const std::string& scratch_parent,
                                                  const std::vector<std::string>& command,
                                                  absl::Duration timeout,
                                                  const std::vector<int>& drop_caps,
                                                  const std::vector<std::string>& flags) {
  std::string root = scratch_parent + "/paseo-sandbox-platform.XXXXXX";
  if (mkdtemp(root.data()) == nullptr) return ErrnoStatus("mkdtemp", root);
  int out = memfd_create("runsc-platform", MFD_CLOEXEC);
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  SpawnRequest request;
  request.exec_fd = runsc_fd;  // the verified file, whatever is at its path by now
  request.argv = {"runsc", "--root=" + root, "--network=none", "--platform=" + platform};
  request.argv.insert(request.argv.end(), flags.begin(), flags.end());
  request.argv.push_back("do");
  request.argv.insert(request.argv.end(), command.begin(), command.end());
  request.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"};
  request.fds = {{0, null}, {1, out}, {2, out}};
  request.in_child = [drop_caps] {
    for (int cap : drop_caps) {
      if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return errno;
    }
    return unshare(CLONE_NEWNET) == 0 ? 0 : errno;
  };
  auto start = absl::Now();
  absl::StatusOr<pid_t> pid = (out >= 0 && null >= 0)
                                  ? Spawn(request)
                                  : absl::StatusOr<pid_t>(ErrnoStatus("open", "/dev/null or a memfd"));
  if (null >= 0) close(null);
  int status = 0;
  bool ended = false;
  while (pid.ok() && absl::Now() - start < timeout) {
    pid_t w = waitpid(*pid, &status, WNOHANG);
    if (w == *pid) {
      ended = true;
      break;
    }
    if (w < 0 && errno != EINTR) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  absl::Duration took = absl::Now() - start;
  if (pid.ok() && !ended) {
    kill(*pid, SIGKILL);
    while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  std::string output;
  if (out >= 0) {
    char buf[4096];
    ssize_t n = pread(out, buf, sizeof(buf), 0);
    if (n > 0) output.assign(buf, static_cast<size_t>(n));
    close(out);
  }
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  if (!pid.ok()) return pid.status();
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  if (ended && WIFEXITED(status) && WEXITSTATUS(status) == 0) return took;
  std::string how = !ended ? absl::StrCat("did not finish within ", absl::FormatDuration(timeout))
                    : WIFEXITED(status) ? absl::StrCat("exit status ", WEXITSTATUS(status))
                                        : absl::StrCat("signal ", WTERMSIG(status));
  return absl::InternalError(absl::StrCat("runsc --platform=", platform, " do: ", how,
                                          output.empty() ? "" : ": ", output));
}

absl::StatusOr<PlatformMedians> MeasurePlatforms(int runsc_fd,
                                                 const std::vector<std::string>& candidates,
                                                 const std::string& scratch_parent, int rounds,
                                                 const std::vector<std::string>& flags) {
  // What agents do most, and what costs most under gVisor: start processes and touch many
  // small files. The shell's own builtins do the file writes, so spawns are the only execs.
  const std::vector<std::string> work = {
      "/bin/sh", "-c",
      "set -e; i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done; "
      "d=$(mktemp -d); i=0; while [ $i -lt 200 ]; do echo x > $d/f$i; i=$((i+1)); done; "
      "cat $d/* > /dev/null; rm -r $d"};
  std::vector<std::vector<absl::Duration>> times(candidates.size());
  std::vector<std::string> failures;
  std::vector<bool> works(candidates.size(), true);
  for (int r = 0; r < rounds; ++r) {
    for (size_t c = 0; c < candidates.size(); ++c) {
      if (!works[c]) continue;
      absl::StatusOr<absl::Duration> t =
          RunPlatformSandbox(runsc_fd, candidates[c], scratch_parent, work, absl::Seconds(60), {}, flags);
      if (!t.ok()) {
        works[c] = false;
        failures.emplace_back(t.status().message());
        continue;
      }
      times[c].push_back(*t);
    }
  }
  PlatformMedians medians;
  for (size_t c = 0; c < candidates.size(); ++c) {
    if (!works[c]) continue;
    std::sort(times[c].begin(), times[c].end());
    medians.emplace_back(candidates[c], absl::ToInt64Milliseconds(times[c][times[c].size() / 2]));
  }
  if (medians.empty())
    return absl::InternalError(absl::StrCat("no platform ran the measurement: ",
                                            absl::StrJoin(failures, "; ")));
  return medians;
}

}  // namespace paseo
