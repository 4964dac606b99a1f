// See exit_status.h.
#include "privhelper/exit_status.h"

#include <sys/wait.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace paseo {
namespace {

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text(4096, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

}  // namespace

std::optional<int> ParseRunscExitLine(const std::string& log) {
  // Only runsc's very last line counts: earlier lines can quote client-chosen text (a
  // program name runsc could not load is logged as given, newlines included).
  static constexpr std::string_view kMarker = "] Exiting with status: ";
  std::string_view text(log);
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  size_t line_start = text.rfind('\n');
  std::string_view last = line_start == std::string_view::npos ? text : text.substr(line_start + 1);
  size_t at = last.find(kMarker);
  if (at == std::string_view::npos) return std::nullopt;
  const char* begin = last.data() + at + kMarker.size();
  const char* end = last.data() + last.size();
  int status = 0;
  auto [ptr, ec] = std::from_chars(begin, end, status);
  if (ec != std::errc() || ptr != end || status < 0) return std::nullopt;
  if (WIFEXITED(status) || (WIFSIGNALED(status) && WTERMSIG(status) >= 1 && WTERMSIG(status) <= 64))
    return status;
  return std::nullopt;
}

std::optional<uint64_t> ParseOomKillCount(const std::string& text) {
  std::istringstream in(text);
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

std::optional<uint64_t> ReadOomKillCount(const std::string& cgroup_path,
                                         const std::string& cgroup_root) {
  // cgroup v1 (also the memory controller of a hybrid layout), then the unified hierarchy.
  for (const std::string& file : {cgroup_root + "/memory" + cgroup_path + "/memory.oom_control",
                                  cgroup_root + cgroup_path + "/memory.events"}) {
    if (auto text = ReadSmallFile(file)) {
      if (auto count = ParseOomKillCount(*text)) return count;
    }
  }
  return std::nullopt;
}

ProcessExit DecideProcessExit(int runsc_wait_status, const std::string& runsc_log,
                              bool sandbox_oom_killed) {
  // runsc itself killed (a privhelper shutdown, a timeout): nothing it logged is final. And
  // the logged status must be the one runsc then exited with (128+N for signal N).
  if (WIFEXITED(runsc_wait_status)) {
    int runsc_code = WEXITSTATUS(runsc_wait_status);
    if (auto status = ParseRunscExitLine(runsc_log)) {
      if (WIFEXITED(*status) && WEXITSTATUS(*status) == runsc_code)
        return {ProcessExit::kExited, WEXITSTATUS(*status)};
      if (WIFSIGNALED(*status) && 128 + WTERMSIG(*status) == runsc_code)
        return {ProcessExit::kSignaled, WTERMSIG(*status)};
    }
  }
  if (sandbox_oom_killed) return {ProcessExit::kOomKilled, 0};
  return {ProcessExit::kUnknown, 0};
}

}  // namespace paseo
