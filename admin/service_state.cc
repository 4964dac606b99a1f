// See service_state.h.
#include "admin/service_state.h"

#include <dirent.h>
#include <ftw.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <kj/exception.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "admin/config_files.h"
#include "common/ids.h"
#include "common/status.h"
#include "schema/records.capnp.h"

namespace paseo::admin {
absl::StatusOr<pid_t> RunningPrivhelper(const std::string& run_dir, const std::string& proc) {
  std::string pid_file = run_dir + "/privhelper.pid";
  auto text = ReadWholeFile(pid_file);
  if (!text.ok())
    return absl::FailedPreconditionError(
        absl::StrCat("no privhelper runs (", pid_file, " is missing)"));
  int pid = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &pid) || pid <= 0)
    return absl::FailedPreconditionError(absl::StrCat(pid_file, " holds no pid"));
  char exe[4096];
  std::string link = absl::StrCat(proc, "/", pid, "/exe");
  ssize_t n = readlink(link.c_str(), exe, sizeof(exe) - 1);
  std::string target = n > 0 ? std::string(exe, static_cast<size_t>(n)) : "";
  // A deleted-and-replaced binary reads "<path> (deleted)": still the privhelper.
  if (absl::EndsWith(target, " (deleted)")) target.resize(target.size() - 10);
  std::string base = target.substr(target.rfind('/') + 1);
  if (base != "paseo-sandbox-privhelper")
    return absl::FailedPreconditionError(absl::StrCat(
        pid_file, " names pid ", pid, ", which is not a paseo-sandbox-privhelper",
        n > 0 ? "" : " (no such process)"));
  return static_cast<pid_t>(pid);
}

absl::StatusOr<Generation> ParseGeneration(const std::string& text) {
  std::string line(absl::StripTrailingAsciiWhitespace(text));
  size_t space = line.find(' ');
  Generation g;
  if (space == std::string::npos || !absl::SimpleAtoi(line.substr(0, space), &g.number))
    return absl::InvalidArgumentError(absl::StrCat("config-generation: not \"<number> <outcome>\": ", line));
  g.outcome = line.substr(space + 1);
  return g;
}

absl::StatusOr<Generation> ReadGeneration(const std::string& run_dir) {
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(run_dir + "/config-generation"));
  return ParseGeneration(text);
}

absl::StatusOr<Generation> RequestReload(const std::string& run_dir,
                                         std::chrono::milliseconds patience) {
  ASSIGN_OR_RETURN(pid_t pid, RunningPrivhelper(run_dir));
  auto before = ReadGeneration(run_dir);
  uint64_t seen = before.ok() ? before->number : 0;
  if (kill(pid, SIGHUP) != 0) return ErrnoStatus("kill SIGHUP", absl::StrCat("pid ", pid));
  auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    auto now = ReadGeneration(run_dir);
    if (now.ok() && now->number > seen) return *now;
    if (std::chrono::steady_clock::now() > deadline)
      return absl::DeadlineExceededError(absl::StrCat(
          "privhelper ", pid, " did not report a reload in ", run_dir,
          "/config-generation within ", patience.count() / 1000, " s (see its log)"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

absl::StatusOr<std::vector<SandboxSummary>> ListSandboxRecords(const std::string& state_dir) {
  std::string bundles = state_dir + "/bundles";
  std::vector<SandboxSummary> out;
  DIR* d = opendir(bundles.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return out;
    return ErrnoStatus("opendir", bundles);
  }
  std::vector<std::string> ids;
  while (dirent* e = readdir(d)) {
    if (IsValidId(e->d_name)) ids.emplace_back(e->d_name);
  }
  closedir(d);
  std::sort(ids.begin(), ids.end());
  for (const auto& id : ids) {
    auto text = ReadWholeFile(absl::StrCat(bundles, "/", id, "/sandbox.json"));
    if (!text.ok()) continue;
    capnp::MallocMessageBuilder message;
    auto root = message.initRoot<records::SandboxRecord>();
    capnp::JsonCodec codec;
    auto error = kj::runCatchingExceptions(
        [&] { codec.decode(kj::ArrayPtr<const char>(text->data(), text->size()), root); });
    if (error != nullptr) continue;
    out.push_back({root.getId().cStr(), root.getDeploymentId().cStr(), root.getProfile().cStr(),
                   root.getUid(), root.getCreatedAtUnixMs(), root.getDeleting()});
  }
  return out;
}

namespace {
uint64_t usage_total = 0;  // nftw's callback has no user pointer; the admin is single-threaded
int AddUsage(const char*, const struct stat* st, int type, FTW*) {
  if (type == FTW_F || type == FTW_D || type == FTW_SL) usage_total += static_cast<uint64_t>(st->st_blocks) * 512;
  return 0;
}
}  // namespace

uint64_t DiskUsage(const std::string& dir) {
  usage_total = 0;
  nftw(dir.c_str(), AddUsage, 32, FTW_PHYS | FTW_MOUNT);
  return usage_total;
}

}  // namespace paseo::admin
