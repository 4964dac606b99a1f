// See resource_limits.h.
#include "privhelper/resource_limits.h"

#include <sched.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "common/status.h"

namespace paseo {
namespace {

absl::StatusOr<uint64_t> ReadNumber(const char* path) {
  std::ifstream in(path);
  uint64_t value = 0;
  if (!(in >> value)) return absl::InternalError(absl::StrCat("cannot read a number from ", path));
  return value;
}

}  // namespace

absl::StatusOr<HostResources> ReadHostResources() {
  HostResources host;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    host.cpus = static_cast<uint32_t>(CPU_COUNT(&set));
  } else {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    host.cpus = online > 0 ? static_cast<uint32_t>(online) : 1;
  }
  struct sysinfo info;
  if (sysinfo(&info) != 0) return ErrnoStatus("sysinfo", "");
  host.memory_bytes = static_cast<uint64_t>(info.totalram) * info.mem_unit;
  ASSIGN_OR_RETURN(host.pid_max, ReadNumber("/proc/sys/kernel/pid_max"));
  ASSIGN_OR_RETURN(host.threads_max, ReadNumber("/proc/sys/kernel/threads-max"));
  return host;
}

SandboxLimits DefaultLimits(const HostResources& host) {
  SandboxLimits d;
  d.memory_bytes = std::max<uint64_t>(host.memory_bytes / 4 & ~((uint64_t{1} << 20) - 1),
                                      uint64_t{256} << 20);
  d.cpu_millis = 500 * std::max<uint32_t>(host.cpus, 1);
  // Task ids the host has: pid_max bounds pids, threads-max bounds tasks (0 when unknown).
  uint64_t tasks = host.threads_max > 0 ? std::min(host.pid_max, host.threads_max) : host.pid_max;
  d.max_host_tasks = static_cast<uint32_t>(std::clamp<uint64_t>(tasks / 4, 1024, 1 << 20));
  d.max_processes = static_cast<uint32_t>(std::clamp<uint64_t>(tasks / 64, 128, 4096));
  return d;
}

SandboxLimits ResolveLimits(const SandboxLimits& requested, const HostResources& host) {
  SandboxLimits d = DefaultLimits(host);
  SandboxLimits r = requested;
  if (r.memory_bytes == 0) r.memory_bytes = d.memory_bytes;
  if (r.cpu_millis == 0) r.cpu_millis = d.cpu_millis;
  if (r.max_processes == 0) r.max_processes = d.max_processes;
  if (r.max_host_tasks == 0) r.max_host_tasks = d.max_host_tasks;
  return r;
}

}  // namespace paseo
