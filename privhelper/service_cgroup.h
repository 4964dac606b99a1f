// The cgroup that holds every sandbox's (helper.json's cgroupParent), with the service's bounds
// on it: memory, CPU and host tasks of all sandboxes together. runsc makes each sandbox's
// cgroup beneath it (<cgroupParent>/<id>), so the kernel applies both bounds: the sandbox's own
// and the service's. What it costs now is read before each create (SandboxHost::Create).
//   auto cg = ServiceCgroup::Open("/sys/fs/cgroup", "/paseo-sandbox");
//   RETURN_IF_ERROR(cg->Apply(config.service()));
//   ServiceUse use = *cg->Use();
//
// Layouts: the unified hierarchy (cgroup v2: <root>/cgroup.controllers exists), or v1
// hierarchies per controller (<root>/memory, <root>/pids, <root>/cpu; also a hybrid layout's).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "privhelper/resource_limits.h"

namespace paseo {

struct ServiceUse {
  // Memory charged to all sandboxes now, less the inactive file cache the kernel reclaims
  // before it reaches the bound (the working set, as memory.stat counts it).
  uint64_t memory_bytes = 0;
  uint64_t host_tasks = 0;    // their host tasks now
};

// What one cgroup uses now and its bounds (a bound of 0: none).
struct CgroupUsage {
  uint64_t cpu_ns = 0;        // CPU time its tasks have used, cumulative
  uint64_t memory_bytes = 0;  // charged now, less the inactive file cache (as ServiceUse)
  uint64_t memory_limit_bytes = 0;
  uint64_t host_tasks = 0;
  uint64_t host_tasks_limit = 0;
};

class ServiceCgroup {
 public:
  // Finds the layout under `root`; FailedPrecondition if it has neither.
  static absl::StatusOr<ServiceCgroup> Open(std::string root, std::string parent);

  // Makes the parent cgroup (and its ancestors) where missing and writes the bounds. On v2 it
  // enables the memory, pids and cpu controllers from the root down to the parent's children.
  // Every bound is tried; the first failure is returned.
  absl::Status Apply(const ServiceBounds& bounds) const;
  // True if the parent cgroup has a child cgroup (a sandbox's) in any hierarchy it bounds.
  bool HoldsSandboxes() const;
  // Apply again if the parent cgroup is gone (something removed it while empty).
  absl::Status EnsureApplied(const ServiceBounds& bounds) const;
  absl::StatusOr<ServiceUse> Use() const;
  // What the parent cgroup (`child` empty) or a sandbox's cgroup beneath it (`child` its id, one
  // path component) uses: the figures of `paseo-sandbox stats`. NotFound if it has no cgroup.
  absl::StatusOr<CgroupUsage> Usage(const std::string& child) const;
  // Weighs sandbox `id`'s CPU against the other sandboxes' (cpu_priority.h): v1's cpu.shares
  // (2 to 262144) as given, on v2 the cpu.weight runsc gives the same shares
  // (1 + (shares - 2) * 9999 / 262142: 1 to 10000). NotFound if the sandbox has no cgroup.
  absl::Status SetSandboxCpuShares(const std::string& id, uint64_t shares) const;
  static uint64_t CpuWeightOfShares(uint64_t shares);

  bool unified() const { return unified_; }
  // The directory whose file `file` (a v1 controller's, e.g. "pids.max") applies.
  std::string Dir(const std::string& v1_controller) const;

 private:
  ServiceCgroup(std::string root, std::string parent, bool unified)
      : root_(std::move(root)), parent_(std::move(parent)), unified_(unified) {}
  std::string root_, parent_;
  bool unified_;
};

}  // namespace paseo
