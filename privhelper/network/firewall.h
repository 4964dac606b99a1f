// The sandbox firewall: applies firewall_rules.h's text through libnftables
// (nft_run_cmd_from_buffer; never an `nft` subprocess) in the host's network namespace, on a
// short-lived thread that joins it (netns.h). Also the resolver's sink for learned addresses.
//
//   Firewall fw(host_ns_fd, pool, uplink);
//   RETURN_IF_ERROR(fw.Reset());                    // at start: the table, empty of sandboxes
//   RETURN_IF_ERROR(fw.AddSandbox(rules));
//   fw.AllowResolved("sb-1", addr, {443}, std::chrono::seconds(300));
//   fw.RemoveSandbox("sb-1");
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "privhelper/network/firewall_rules.h"
#include "privhelper/network/resolved_address_sink.h"

namespace paseo::network {

// Runs nft commands (`text`) in the calling thread's network namespace, as one transaction;
// `listing` (if not null) gets what they print.
absl::Status RunNft(const std::string& text, std::string* listing = nullptr);

class Firewall final : public ResolvedAddressSink {
 public:
  Firewall(int host_ns_fd, Cidr pool, std::string uplink)
      : host_ns_fd_(host_ns_fd), pool_(pool), uplink_(std::move(uplink)) {}

  // Replaces the table with an empty one (no sandbox passes until its chain is added).
  absl::Status Reset();
  // Removes the table (clean shutdown, no sandbox left).
  absl::Status RemoveTable();
  // Adds a sandbox's chains, set and map entries in one transaction: all or nothing.
  absl::Status AddSandbox(const FirewallSandbox& sandbox);
  // Removes them (by the sandbox's tag, SandboxTag); pieces already gone are skipped.
  absl::Status RemoveSandbox(const std::string& tag);
  // The tags (SandboxTag) of the sandboxes that have chains.
  absl::StatusOr<std::vector<std::string>> SandboxTags();

  void AllowResolved(const std::string& sandbox_id, uint32_t addr,
                     const std::vector<uint16_t>& ports, std::chrono::seconds ttl) override;

  // Names the resolver may open a learned address for at most / at least this long.
  static constexpr std::chrono::seconds kMinTtl{30};
  static constexpr std::chrono::seconds kMaxTtl{86400};

 private:
  absl::Status Run(const std::string& text, std::string* listing = nullptr);
  int host_ns_fd_;
  Cidr pool_;
  std::string uplink_;
};

}  // namespace paseo::network
