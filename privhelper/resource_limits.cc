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

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Task ids the host has: pid_max bounds pids, threads-max bounds tasks (0 when unknown).
uint64_t HostTasks(const HostResources& host) {
  return host.threads_max > 0 ? std::min(host.pid_max, host.threads_max) : host.pid_max;
}

uint64_t WholeMebibytes(uint64_t bytes) { return bytes & ~(kMiB - 1); }

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


ServiceBounds DefaultServiceBounds(const HostResources& host) {
  ServiceBounds s;
  s.memory_bytes = std::max<uint64_t>(WholeMebibytes(host.memory_bytes / 2), 512 * kMiB);
  s.cpu_millis = 750 * std::max<uint32_t>(host.cpus, 1);
  s.max_host_tasks =
      static_cast<uint32_t>(std::clamp<uint64_t>(HostTasks(host) / 2, 1024, uint64_t{1} << 22));
  return s;
}

ServiceBounds ResolveServiceBounds(const ServiceBounds& requested, const HostResources& host) {
  ServiceBounds d = DefaultServiceBounds(host);
  ServiceBounds r = requested;
  if (r.memory_bytes == 0) r.memory_bytes = d.memory_bytes;
  if (r.cpu_millis == 0) r.cpu_millis = d.cpu_millis;
  if (r.max_host_tasks == 0) r.max_host_tasks = d.max_host_tasks;
  return r;
}

SandboxLimits DefaultLimits(const ServiceBounds& service, const HostResources& host) {
  SandboxLimits d;
  d.memory_bytes = std::min(service.memory_bytes,
                            std::max(WholeMebibytes(service.memory_bytes / 5), 256 * kMiB));
  d.cpu_millis = std::min(service.cpu_millis, 500 * std::max<uint32_t>(host.cpus, 1));
  d.max_host_tasks = std::min(service.max_host_tasks,
                              std::max<uint32_t>(service.max_host_tasks / 5, 1024));
  d.max_processes =
      static_cast<uint32_t>(std::clamp<uint64_t>(HostTasks(host) / 64, 128, 4096));
  return d;
}

SandboxLimits DefaultLimits(const HostResources& host) {
  return DefaultLimits(DefaultServiceBounds(host), host);
}

SandboxLimits ResolveLimits(const SandboxLimits& requested, const ServiceBounds& service,
                            const HostResources& host) {
  SandboxLimits d = DefaultLimits(service, host);
  SandboxLimits r = requested;
  if (r.memory_bytes == 0) r.memory_bytes = d.memory_bytes;
  if (r.cpu_millis == 0) r.cpu_millis = d.cpu_millis;
  if (r.max_processes == 0) r.max_processes = d.max_processes;
  if (r.max_host_tasks == 0) r.max_host_tasks = d.max_host_tasks;
  return r;
}

SandboxLimits ResolveLimits(const SandboxLimits& requested, const HostResources& host) {
  return ResolveLimits(requested, DefaultServiceBounds(host), host);
}

}  // namespace paseo
