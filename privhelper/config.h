// Loading and validating the privhelper's root-owned JSON configuration (schema/config.capnp).
// Decoding goes through capnp's JsonCodec with unknown fields rejected; every error names the
// file and the field. Usage:
//   absl::StatusOr<std::unique_ptr<Config>> config = LoadConfig("/etc/paseo-sandbox");
//   const config::Deployment::Reader* d = (*config)->FindDeployment("paseo-main");
#pragma once

#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include <capnp/message.h>

#include "absl/status/statusor.h"
#include "common/request_checks.h"  // IsNormalizedAbsolutePath
#include "privhelper/resource_limits.h"
#include "schema/config.capnp.h"

namespace paseo {

// At most this many secrets per deployment and per profile (decision 59).
inline constexpr size_t kMaxSecrets = 16;
// At most this many tool roots per deployment and tool mounts per profile (schema/config.capnp).
inline constexpr size_t kMaxToolMounts = 8;
// At most this many CIDR rules, name rules, ports of one rule, inbound ports and DNS upstreams.
inline constexpr size_t kMaxNetworkRules = 256;

// The smallest audit.maxBytes: room for many of the broker's longest audit lines (about 2 KiB).
inline constexpr uint64_t kMinAuditFileBytes = 65536;

class Config {
 public:
  config::HelperConfig::Reader helper() const { return helper_; }
  const std::vector<config::Deployment::Reader>& deployments() const { return deployments_; }
  const std::vector<config::LaunchProfile::Reader>& profiles() const { return profiles_; }

  const config::Deployment::Reader* FindDeployment(absl::string_view id) const;
  const config::LaunchProfile::Reader* FindProfile(absl::string_view name) const;
  // The profiles a deployment may use, in order ("default" when it names none).
  std::vector<std::string> ProfilesOf(const config::Deployment::Reader& d) const;
  // <stateDir>/rootfs/<version>/rootfs for the profile's (or the default) rootfs version.
  std::string RootfsPath(const config::LaunchProfile::Reader& profile) const;
  // The profile's resource bounds. LoadConfig has already replaced each bound the profile left
  // at 0 with the host-derived default, so none is 0 here.
  SandboxLimits LimitsOf(const config::LaunchProfile::Reader& profile) const;
  const HostResources& host() const { return host_; }
  // Bounds on all sandboxes together: helper.json's serviceLimits, each 0 replaced by the
  // host-derived default.
  const ServiceBounds& service() const { return service_; }
  std::string BrokerBinary(absl::string_view privhelper_path) const;
  std::string EgressBinary(absl::string_view privhelper_path) const;
  std::string SandboxShimBinary(absl::string_view privhelper_path) const;
  // The audit log's current file (audit.path, or <stateDir>/audit/audit.log when empty); only
  // meaningful with audit.destination "file".
  std::string AuditPath() const;
  // True if a profile has network mode "sandbox" (only then is any network state made).
  bool UsesSandboxNetwork() const;

  // A reload (SIGHUP): takes `next`'s deployments and profiles. helper.json must be unchanged
  // (its settings were used to set up the running service: directories, runsc, the socket, the
  // network), else FailedPrecondition and nothing changes. What this Config held before is kept
  // alive for the process's life: readers handed out earlier (a create in flight holds its
  // profile's) stay valid. Reloads are rare and a config is a few KiB.
  absl::Status ReplaceWith(std::unique_ptr<Config> next);
  // True if `other` has the same helper.json, deployments and profiles (structurally, in
  // order): a reload that changes nothing need not restart the broker.
  bool SameAs(const Config& other) const;

 private:
  friend absl::StatusOr<std::unique_ptr<Config>> LoadConfig(const std::string& dir,
                                                             const HostResources& host);
  HostResources host_;
  ServiceBounds service_;
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> messages_;
  config::HelperConfig::Reader helper_;
  std::vector<config::Deployment::Reader> deployments_;
  std::vector<config::LaunchProfile::Reader> profiles_;
  std::vector<std::unique_ptr<Config>> retired_;  // earlier generations (ReplaceWith)
};

// Reads <dir>/helper.json, <dir>/deployments/*.json and <dir>/profiles/*.json, decodes and
// validates them. Errors: "<file>: <field>: <problem>" as InvalidArgument (NotFound when a
// required file is missing). Service and sandbox bounds left at 0 get the defaults for `host`
// (the first form reads this host's); a profile's bound above the service's is an error.
absl::StatusOr<std::unique_ptr<Config>> LoadConfig(const std::string& dir);
absl::StatusOr<std::unique_ptr<Config>> LoadConfig(const std::string& dir,
                                                   const HostResources& host);

// The config directory, its subdirectories and every file in them must be owned by root and
// not writable by group or others: they decide what the privhelper may mount.
absl::Status CheckConfigOwnership(const std::string& dir);

}  // namespace paseo
