// The resource bounds every sandbox gets and those of the whole service, and their defaults
// derived from the host. A launch profile may set each sandbox bound, helper.json each service
// bound (schema/config.capnp); a bound left at 0 takes the default here, so nothing ever runs
// unbounded. Why each bound and mechanism: docs/decisions.md
// ("Every sandbox is bounded") and docs/threat-model.md.
//   HostResources host = *ReadHostResources();
//   ServiceBounds service = ResolveServiceBounds(configured, host);  // configured: 0 = default
//   SandboxLimits limits = ResolveLimits(requested, service, host);  // requested: 0 = default
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
// A sandbox's CPU weight against its neighbours' (v1 cpu.shares; cpu_priority.h): the base
// every sandbox starts at (its bundle's linux.resources.cpu.shares), and the weight of one a
// client has just started a process in, 4096 times more.
inline constexpr uint64_t kBaseCpuShares = 64;
inline constexpr uint64_t kBoostCpuShares = 262144;  // v1's maximum

// Bounds on the whole service: every sandbox together, on the host cgroup that holds each
// sandbox's (helper.json's cgroupParent). What is left is the host's own, whatever the
// sandboxes do at once (docs/threat-model.md, "Limits add up").
struct ServiceBounds {
  uint64_t memory_bytes = 0;    // memory cgroup limit of all sandboxes together
  uint32_t cpu_millis = 0;      // cfs quota of all sandboxes together, thousandths of a CPU
  uint32_t max_host_tasks = 0;  // pids.max of all sandboxes' host tasks together

  bool operator==(const ServiceBounds&) const = default;
};

// The service's defaults, from the host:
//   memory_bytes   half the host's RAM (at least 512 MiB)
//   cpu_millis     three quarters of the host's CPUs (750 per CPU)
//   max_host_tasks half of min(pid_max, threads-max), at least 1024
ServiceBounds DefaultServiceBounds(const HostResources& host);

// `requested` (helper.json's serviceLimits) with each 0 replaced by its default.
ServiceBounds ResolveServiceBounds(const ServiceBounds& requested, const HostResources& host);

// A sandbox's defaults, from the service's bounds and the host, sized so that four sandboxes
// at their bounds leave a fifth of the service to the rest:
//   memory_bytes   a fifth of the service's memory (at least 256 MiB)
//   cpu_millis     half the host's CPUs (500 per CPU), at most the service's
//   max_host_tasks a fifth of the service's host tasks, at least 1024
//   max_processes  1/64 of min(pid_max, threads-max), in [128, 4096]
// None is above the service's bound.
SandboxLimits DefaultLimits(const ServiceBounds& service, const HostResources& host);
// With the service's defaults.
SandboxLimits DefaultLimits(const HostResources& host);

// `requested` with each 0 replaced by its default.
SandboxLimits ResolveLimits(const SandboxLimits& requested, const ServiceBounds& service,
                            const HostResources& host);
SandboxLimits ResolveLimits(const SandboxLimits& requested, const HostResources& host);

}  // namespace paseo
