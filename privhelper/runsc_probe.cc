// See runsc_probe.h.
#include "privhelper/runsc_probe.h"

#include <sys/utsname.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace paseo {

std::string HostRunscKey(absl::string_view runsc_sha256) {
  utsname u{};
  uname(&u);
  std::string model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    // x86 names the model; arm64 has no "model name" but a "CPU part".
    if (absl::StartsWith(line, "model name") || absl::StartsWith(line, "CPU part")) {
      model = std::string(absl::StripAsciiWhitespace(line.substr(line.find(':') + 1)));
      break;
    }
  }
  std::string key = absl::StrCat("runsc=", runsc_sha256, ",kernel=", u.release, ",cpus=",
                                 std::thread::hardware_concurrency(), ",cpu=", model);
  for (char& c : key) {  // one word of plain characters, whatever uname says
    if (!absl::ascii_isalnum(c) && std::string_view(".,=_-+~").find(c) == std::string_view::npos) c = '_';
  }
  return key;
}

std::string FormatRunscProbe(const RunscProbe& probe) {
  std::string text = absl::StrCat("key ", probe.key, "\n");
  if (!probe.platform.empty()) absl::StrAppend(&text, "platform ", probe.platform, "\n");
  for (const auto& [name, ms] : probe.median_ms) absl::StrAppend(&text, "median_ms ", name, " ", ms, "\n");
  return text;
}

absl::StatusOr<RunscProbe> ParseRunscProbe(absl::string_view text) {
  if (text.size() > 4096) return absl::InvalidArgumentError("runsc probe record: longer than 4 KiB");
  RunscProbe probe;
  auto measurable = [](absl::string_view p) { return p == "systrap" || p == "ptrace"; };
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    int64_t ms = 0;
    bool measured_before = std::any_of(probe.median_ms.begin(), probe.median_ms.end(),
                                       [&](const auto& m) { return f.size() > 1 && m.first == f[1]; });
    if (f.size() == 2 && f[0] == "key" && probe.key.empty() && !f[1].empty()) {
      probe.key = std::string(f[1]);
    } else if (f.size() == 2 && f[0] == "platform" && probe.platform.empty() && measurable(f[1])) {
      probe.platform = std::string(f[1]);
    } else if (f.size() == 3 && f[0] == "median_ms" && measurable(f[1]) && !measured_before &&
               absl::SimpleAtoi(f[2], &ms) && ms >= 0) {
      probe.median_ms.emplace_back(std::string(f[1]), ms);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("runsc probe record: bad line \"", line, "\""));
    }
  }
  if (probe.key.empty()) return absl::InvalidArgumentError("runsc probe record: no key");
  bool measured = std::any_of(probe.median_ms.begin(), probe.median_ms.end(),
                              [&](const auto& m) { return m.first == probe.platform; });
  if (!probe.platform.empty() && !measured)
    return absl::InvalidArgumentError("runsc probe record: its platform was not measured");
  return probe;
}

absl::StatusOr<RunscProbe> ReadRunscProbe(const std::string& path, absl::string_view runsc_sha256) {
  std::ifstream in(path);
  std::string text(4097, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  ASSIGN_OR_RETURN(RunscProbe probe, ParseRunscProbe(text));
  if (probe.key != HostRunscKey(runsc_sha256))
    return absl::FailedPreconditionError("runsc probe record: measured for another runsc, kernel or CPU");
  return probe;
}

RunscProbe ProbeRunscOnHost(int runsc_fd, absl::string_view runsc_sha256,
                                            const std::vector<std::string>& measure,
                                            const std::string& record_path,
                                            const std::string& scratch_parent,
                                            const std::vector<std::string>& flags) {
  absl::StatusOr<RunscProbe> kept = ReadRunscProbe(record_path, runsc_sha256);
  if (kept.ok() && std::find(measure.begin(), measure.end(), kept->platform) != measure.end())
    return *kept;
  RunscProbe fresh;
  fresh.key = HostRunscKey(runsc_sha256);
  absl::StatusOr<PlatformMedians> medians = MeasurePlatforms(runsc_fd, measure, scratch_parent, 3, flags);
  if (!medians.ok()) return fresh;  // nothing recorded: measured again at the next start
  fresh.median_ms = *medians;
  fresh.platform = std::min_element(medians->begin(), medians->end(), [](const auto& a, const auto& b) {
                     return a.second < b.second;
                   })->first;
  std::string tmp = record_path + ".new";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << FormatRunscProbe(fresh);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, record_path, ec);
  return fresh;
}

std::string DescribeMeasuredPlatform(const RunscProbe& probe, const std::string& record_path) {
  std::vector<std::string> figures;
  for (const auto& [name, ms] : probe.median_ms) figures.push_back(absl::StrCat(name, " ", ms, " ms"));
  return absl::StrCat(probe.platform, " (runsc.platform auto: measured faster on this host, ",
                      absl::StrJoin(figures, ", "), "; ", record_path, ")");
}

}  // namespace paseo
