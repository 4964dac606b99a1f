// The sandbox firewall: applies firewall_rules.h's text through libnftables
// (nft_run_cmd_from_buffer; never an `nft` subprocess) in the host's network namespace, on a
// short-lived thread that joins it (netns.h). Also the resolver's sink for learned addresses:
// it remembers, per sandbox, which (address, port) elements it opened until when, so a sandbox
// asking the same names again costs no transaction until an element is half-way to expiry, and
// it opens one answer's addresses in one transaction, at most kResolvedBurst at once and
// kResolvedPerSecond after that per sandbox (the privhelper's event loop runs them).
//
//   Firewall fw(host_ns_fd, pool, uplink);
//   RETURN_IF_ERROR(fw.Reset());                    // at start: the table, empty of sandboxes
//   RETURN_IF_ERROR(fw.AddSandbox(rules));
//   fw.AllowResolved("sb-1", {addr1, addr2}, {443}, std::chrono::seconds(300));
//   fw.RemoveSandbox("sb-1");
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
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
  // Bounds what the egress proxy's user may connect to (RenderEgressUser), until the next Reset.
  absl::Status RestrictEgressUser(uint32_t uid, const std::vector<Endpoint>& upstreams);
  // Adds a sandbox's chains, set and map entries in one transaction: all or nothing.
  absl::Status AddSandbox(const FirewallSandbox& sandbox);
  // Removes them (by the sandbox's tag, SandboxTag); pieces already gone are skipped.
  absl::Status RemoveSandbox(const std::string& tag);
  // The tags (SandboxTag) of the sandboxes that have chains.
  absl::StatusOr<std::vector<std::string>> SandboxTags();

  std::chrono::seconds AllowResolved(const std::string& sandbox_id,
                                     const std::vector<uint32_t>& addrs,
                                     const std::vector<uint16_t>& ports,
                                     std::chrono::seconds ttl) override;

  // Names the resolver may open a learned address for at most / at least this long.
  static constexpr std::chrono::seconds kMinTtl{30};
  static constexpr std::chrono::seconds kMaxTtl{86400};
  // Resolved-address transactions per sandbox: a token bucket of this size, refilled at this
  // rate. Answers whose addresses are open already take none.
  static constexpr double kResolvedBurst = 50;
  static constexpr double kResolvedPerSecond = 10;

  // Elements per transaction: the kernel's work for refreshing elements of this set type grows
  // faster than their number in one transaction (256: ~20 ms; 819: seconds), and 4096 make too
  // long a netlink message. An answer is 32 addresses at most, times its rule's ports.
  static constexpr size_t kResolvedPerTransaction = 256;

  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  using Runner = std::function<absl::Status(const std::string& text)>;
  // Tests: a fake clock; a fake nft (instead of RunNft in the host's namespace) for
  // AllowResolved; how many resolved-address transactions were run.
  void SetClockForTesting(Clock clock) { clock_ = std::move(clock); }
  void SetResolvedRunnerForTesting(Runner runner) { resolved_runner_ = std::move(runner); }
  size_t resolved_transactions() const { return resolved_transactions_; }

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  // What a sandbox's resolved names opened (as far as this firewall knows: its set started
  // empty when AddSandbox made it) and its transaction budget.
  struct Opened {
    std::map<ResolvedKey, TimePoint> until;
    double tokens = kResolvedBurst;
    TimePoint refilled{};
  };

  absl::Status Run(const std::string& text, std::string* listing = nullptr);
  // Whether `keys`' new elements fit under kMaxResolvedElements (dropping expired ones).
  static bool Fits(Opened& opened, const std::vector<ResolvedKey>& keys, TimePoint now);
  static bool TakeToken(Opened& opened, TimePoint now);

  int host_ns_fd_;
  Cidr pool_;
  std::string uplink_;
  std::map<std::string, Opened> opened_;  // by SandboxTag
  // Sandboxes whose names go through the egress proxy (FirewallSandbox.egress_port), by tag:
  // their resolved names open nothing here (decision 58).
  std::set<std::string> proxied_;
  Clock clock_ = [] { return std::chrono::steady_clock::now(); };
  Runner resolved_runner_;
  size_t resolved_transactions_ = 0;
};

}  // namespace paseo::network
