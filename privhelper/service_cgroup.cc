// See service_cgroup.h.
#include "privhelper/service_cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/dir_entries.h"
#include "common/status.h"

namespace paseo {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Writes `value` to an existing cgroup file, in one write(2) as the kernel wants it.
absl::Status WriteControl(const std::string& path, const std::string& value) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("open", path);
  ssize_t n = write(fd, value.data(), value.size());
  int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    errno = n < 0 ? err : EIO;
    return ErrnoStatus(absl::StrCat("write \"", value, "\" to"), path);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ReadControl(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("open", path);
  char buf[64];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  uint64_t value = 0;
  if (n <= 0 ||
      !absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, static_cast<size_t>(n))),
                        &value))
    return absl::InternalError(absl::StrCat("cannot read a number from ", path));
  return value;
}

// A bound: a number, or "max" (none: 0). v1 writes "none" as the largest page-aligned value.
absl::StatusOr<uint64_t> ReadLimit(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("open", path);
  char buf[64];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  absl::string_view text =
      absl::StripAsciiWhitespace(absl::string_view(buf, n > 0 ? static_cast<size_t>(n) : 0));
  uint64_t value = 0;
  if (text == "max") return 0;
  if (!absl::SimpleAtoi(text, &value))
    return absl::InternalError(absl::StrCat("cannot read a bound from ", path));
  return value >= (uint64_t{1} << 62) ? 0 : value;
}

// The value of `key` in a flat-keyed file such as memory.stat ("<key> <value>" lines), read
// without following a symlink (a cgroup file is at most a page: memory.stat is ~1.5 KiB).
absl::StatusOr<uint64_t> ReadStat(const std::string& path, absl::string_view key) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return ErrnoStatus("open", path);
  std::string text(16 * 1024, '\0');
  size_t len = 0;
  for (ssize_t n; len < text.size() && (n = read(fd, &text[len], text.size() - len)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      close(fd);
      errno = saved;
      return ErrnoStatus("read", path);
    }
    len += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(len);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    uint64_t value = 0;
    if (absl::ConsumePrefix(&line, key) && absl::ConsumePrefix(&line, " ") &&
        absl::SimpleAtoi(line, &value))
      return value;
  }
  return absl::InternalError(absl::StrCat(path, " has no ", key));
}

// mkdir -p of `parent` (normalized, absolute) beneath `base`, each directory made 0755; calls
// `made(dir)` for `base` and then for each component's directory, in order.
template <typename Fn>
absl::Status MakeBeneath(const std::string& base, const std::string& parent, Fn made) {
  std::string dir = base;
  RETURN_IF_ERROR(made(dir));
  std::vector<std::string> parts = absl::StrSplit(parent, '/', absl::SkipEmpty());
  for (const std::string& part : parts) {
    dir += "/" + part;
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", dir);
    struct stat st;
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return absl::FailedPreconditionError(absl::StrCat(dir, " is not a cgroup directory"));
    RETURN_IF_ERROR(made(dir));
  }
  return absl::OkStatus();
}

constexpr const char* kV1Controllers[] = {"memory", "pids", "cpu"};

}  // namespace

absl::StatusOr<ServiceCgroup> ServiceCgroup::Open(std::string root, std::string parent) {
  struct stat st;
  if (stat((root + "/cgroup.controllers").c_str(), &st) == 0)
    return ServiceCgroup(std::move(root), std::move(parent), /*unified=*/true);
  for (const char* controller : kV1Controllers) {
    if (!IsDirectory(absl::StrCat(root, "/", controller)))
      return absl::FailedPreconditionError(absl::StrCat(
          root, " is neither a cgroup v2 hierarchy nor holds the v1 ", controller,
          " controller's: the service's bounds cannot be set"));
  }
  return ServiceCgroup(std::move(root), std::move(parent), /*unified=*/false);
}

std::string ServiceCgroup::Dir(const std::string& v1_controller) const {
  return unified_ ? root_ + parent_ : absl::StrCat(root_, "/", v1_controller, parent_);
}

absl::Status ServiceCgroup::Apply(const ServiceBounds& bounds) const {
  std::string cpu_quota = absl::StrCat(uint64_t{bounds.cpu_millis} * kCpuPeriodMicros / 1000);
  absl::Status first = absl::OkStatus();
  auto keep = [&](absl::Status s) {
    if (first.ok()) first = std::move(s);
  };
  if (unified_) {
    // Each level hands the controllers down to the next, the parent to the sandboxes' cgroups.
    RETURN_IF_ERROR(MakeBeneath(root_, parent_, [](const std::string& dir) {
      return WriteControl(dir + "/cgroup.subtree_control", "+memory +pids +cpu");
    }));
    std::string dir = Dir("");
    keep(WriteControl(dir + "/memory.max", absl::StrCat(bounds.memory_bytes)));
    keep(WriteControl(dir + "/pids.max", absl::StrCat(bounds.max_host_tasks)));
    keep(WriteControl(dir + "/cpu.max", absl::StrCat(cpu_quota, " ", kCpuPeriodMicros)));
    return first;
  }
  for (const char* controller : kV1Controllers) {
    RETURN_IF_ERROR(MakeBeneath(absl::StrCat(root_, "/", controller), parent_,
                                [](const std::string&) { return absl::OkStatus(); }));
  }
  keep(WriteControl(Dir("memory") + "/memory.limit_in_bytes", absl::StrCat(bounds.memory_bytes)));
  keep(WriteControl(Dir("pids") + "/pids.max", absl::StrCat(bounds.max_host_tasks)));
  // v1 refuses a child's quota above its parent's: every sandbox's cpuMillis is at most the
  // service's (checked when the config loads).
  keep(WriteControl(Dir("cpu") + "/cpu.cfs_period_us", absl::StrCat(kCpuPeriodMicros)));
  keep(WriteControl(Dir("cpu") + "/cpu.cfs_quota_us", cpu_quota));
  return first;
}

uint64_t ServiceCgroup::CpuWeightOfShares(uint64_t shares) {
  shares = std::clamp<uint64_t>(shares, 2, 262144);
  return 1 + (shares - 2) * 9999 / 262142;
}

absl::Status ServiceCgroup::SetSandboxCpuShares(const std::string& id, uint64_t shares) const {
  // O_NOFOLLOW on the file and an id that is one path component (the caller's, validated).
  if (id.empty() || id.find('/') != std::string::npos || id == "." || id == "..")
    return absl::InvalidArgumentError(absl::StrCat("not a sandbox id: ", id));
  std::string dir = absl::StrCat(Dir("cpu"), "/", id);
  struct stat st;  // not followed: a symlink there is no sandbox's cgroup
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return absl::NotFoundError(absl::StrCat(dir, " is not a cgroup"));
  if (unified_) return WriteControl(dir + "/cpu.weight", absl::StrCat(CpuWeightOfShares(shares)));
  return WriteControl(dir + "/cpu.shares", absl::StrCat(std::clamp<uint64_t>(shares, 2, 262144)));
}

bool ServiceCgroup::HoldsSandboxes() const {
  for (const char* controller : kV1Controllers) {
    for (const std::string& entry : DirEntries(Dir(controller)))
      if (IsDirectory(absl::StrCat(Dir(controller), "/", entry))) return true;
    if (unified_) break;
  }
  return false;
}

absl::Status ServiceCgroup::EnsureApplied(const ServiceBounds& bounds) const {
  for (const char* controller : kV1Controllers) {
    if (!IsDirectory(Dir(controller))) return Apply(bounds);
    if (unified_) break;
  }
  return absl::OkStatus();
}

absl::StatusOr<CgroupUsage> ServiceCgroup::Usage(const std::string& child) const {
  if (child == "." || child == ".." || child.find('/') != std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat("not a sandbox id: ", child));
  const std::string sub = child.empty() ? "" : "/" + child;
  CgroupUsage use;
  const std::string memory = Dir("memory") + sub, pids = Dir("pids") + sub, cpu = Dir("cpu") + sub;
  // Each controller's directory (one, unified; three on v1), not followed: a symlink there is
  // no sandbox's cgroup. The files in them are opened O_NOFOLLOW.
  for (const std::string* dir : {&memory, &pids, &cpu}) {
    struct stat st;
    if (lstat(dir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return absl::NotFoundError(absl::StrCat(*dir, " is not a cgroup"));
  }
  if (unified_) {
    ASSIGN_OR_RETURN(uint64_t usec, ReadStat(cpu + "/cpu.stat", "usage_usec"));
    use.cpu_ns = usec * 1000;
  } else {
    // cpuacct shares its hierarchy with cpu on Debian ("cpu,cpuacct"); else it is its own.
    auto ns = ReadControl(cpu + "/cpuacct.usage");
    if (!ns.ok()) ns = ReadControl(absl::StrCat(root_, "/cpuacct", parent_, sub, "/cpuacct.usage"));
    if (!ns.ok()) return ns.status();
    use.cpu_ns = *ns;
  }
  ASSIGN_OR_RETURN(uint64_t charged, ReadControl(memory + (unified_ ? "/memory.current"
                                                                    : "/memory.usage_in_bytes")));
  ASSIGN_OR_RETURN(uint64_t inactive_file,
                   ReadStat(memory + "/memory.stat",
                            unified_ ? "inactive_file" : "total_inactive_file"));
  use.memory_bytes = charged - std::min(charged, inactive_file);
  ASSIGN_OR_RETURN(use.memory_limit_bytes,
                   ReadLimit(memory + (unified_ ? "/memory.max" : "/memory.limit_in_bytes")));
  ASSIGN_OR_RETURN(use.host_tasks, ReadControl(pids + "/pids.current"));
  ASSIGN_OR_RETURN(use.host_tasks_limit, ReadLimit(pids + "/pids.max"));
  return use;
}

absl::StatusOr<ServiceUse> ServiceCgroup::Use() const {
  ServiceUse use;
  ASSIGN_OR_RETURN(uint64_t charged, ReadControl(unified_ ? Dir("") + "/memory.current"
                                                          : Dir("memory") + "/memory.usage_in_bytes"));
  ASSIGN_OR_RETURN(uint64_t inactive_file,
                   ReadStat(Dir("memory") + "/memory.stat",
                            unified_ ? "inactive_file" : "total_inactive_file"));
  use.memory_bytes = charged - std::min(charged, inactive_file);
  ASSIGN_OR_RETURN(use.host_tasks, ReadControl(Dir("pids") + "/pids.current"));
  return use;
}

}  // namespace paseo
