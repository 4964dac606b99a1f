// The resource bounds every sandbox gets, and their defaults derived from the host. A launch
// profile may set each bound (schema/config.capnp); a bound it leaves at 0 takes the default
// here, so no sandbox ever runs unbounded. Why each bound and mechanism: docs/decisions.md
// ("Every sandbox is bounded") and docs/threat-model.md.
//   HostResources host = *ReadHostResources();
//   SandboxLimits limits = ResolveLimits(requested, host);  // requested: 0 = default
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"

namespace paseo {

// What the host has, as the privhelper sees it at start-up.
struct HostResources {
  uint32_t cpus = 1;          // CPUs the privhelper may run on (its affinity mask)
  uint64_t memory_bytes = 0;  // physical RAM
  uint64_t pid_max = 32768;   // /proc/sys/kernel/pid_max
  uint64_t threads_max = 0;   // /proc/sys/kernel/threads-max
};

absl::StatusOr<HostResources> ReadHostResources();

struct SandboxLimits {
  // Host memory cgroup limit of the whole sandbox (sentry, gofer, stubs, the agent's memory);
  // gVisor also reports it as MemTotal inside.
  uint64_t memory_bytes = 0;
  // CPU bandwidth in thousandths of a CPU: cfs quota = cpu_millis * 100 us per 100 ms period.
  uint32_t cpu_millis = 0;
  // RLIMIT_NPROC of the sandbox's processes: gVisor's sentry counts every task (thread or
  // process) of the agent's uid in the sandbox and fails fork/clone beyond it with EAGAIN.
  uint32_t max_processes = 0;
  // Host pids cgroup limit (pids.max) on the sandbox's host tasks: the sentry's and gofer's
  // threads and, under ptrace, a stub process per address space with a stub thread per sentry
  // thread that ran it. Reaching it ends the sandbox (the sentry cannot create a thread).
  uint32_t max_host_tasks = 0;

  bool operator==(const SandboxLimits&) const = default;
};

// The cfs period the CPU quota is expressed over.
inline constexpr uint64_t kCpuPeriodMicros = 100000;

// The defaults, from the host:
//   memory_bytes   a quarter of the host's RAM (at least 256 MiB)
//   cpu_millis     half the host's CPUs (500 per CPU)
//   max_host_tasks a quarter of min(pid_max, threads-max), in [1024, 1048576]
//   max_processes  1/64 of min(pid_max, threads-max), in [128, 4096]
SandboxLimits DefaultLimits(const HostResources& host);

// `requested` with each 0 replaced by its default.
SandboxLimits ResolveLimits(const SandboxLimits& requested, const HostResources& host);

}  // namespace paseo
