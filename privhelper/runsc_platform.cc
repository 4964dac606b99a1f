// Choosing the gVisor platform from helper.json and what the pinned runsc has (runsc_platform.h).
#include "privhelper/runsc_platform.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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

absl::StatusOr<std::vector<std::string>> RunscPlatforms(int runsc_fd) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", "runsc flags");
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) {
    close(out[0]);
    close(out[1]);
    return ErrnoStatus("open", "/dev/null");
  }
  SpawnRequest request;
  request.exec_fd = runsc_fd;
  request.argv = {"runsc", "flags"};
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
  if (timed_out) return absl::DeadlineExceededError("runsc flags: did not finish within 10 s");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return absl::InternalError(absl::StrCat("runsc flags: ended with wait status ", status));
  std::vector<std::string> names = ParseRunscPlatforms(text);
  if (names.empty())
    return absl::InternalError("runsc flags: its -platform flag names no platform");
  return names;
}

absl::StatusOr<PlatformChoice> ChoosePlatform(absl::string_view configured,
                                              const std::vector<std::string>& available) {
  auto has = [&](absl::string_view p) {
    return std::find(available.begin(), available.end(), p) != available.end();
  };
  std::string list = absl::StrJoin(available, ", ");
  if (configured == "auto") {
    for (const char* p : {"systrap", "ptrace"}) {
      if (has(p))
        return PlatformChoice{p, absl::StrCat(p, " (runsc.platform auto; the pinned runsc has ", list, ")")};
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
  return PlatformChoice{std::string(configured), absl::StrCat(configured, " (runsc.platform ", configured, ")")};
}

absl::StatusOr<PlatformChoice> ChoosePlatformFromProbe(
    absl::string_view configured, const absl::StatusOr<std::vector<std::string>>& available) {
  if (available.ok()) return ChoosePlatform(configured, *available);
  if (configured == "systrap" || configured == "ptrace" || configured == "kvm")
    return PlatformChoice{std::string(configured),
                          absl::StrCat(configured, " (runsc.platform ", configured,
                                       "; what the pinned runsc has is unknown: ",
                                       available.status().message(), ")")};
  if (configured == "auto")
    return absl::FailedPreconditionError(absl::StrCat(
        "runsc.platform auto: cannot tell which platforms the pinned runsc has (",
        available.status().message(), "); set runsc.platform to \"ptrace\" or \"systrap\""));
  return ChoosePlatform(configured, {});
}

}  // namespace paseo
