// See firewall.h.
#include "privhelper/network/firewall.h"

#include <nftables/libnftables.h>

#include <algorithm>

#include <kj/debug.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "privhelper/network/netns.h"

namespace paseo::network {

absl::Status RunNft(const std::string& text, std::string* listing) {
  nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx == nullptr) return absl::ResourceExhaustedError("nft_ctx_new");
  nft_ctx_buffer_output(ctx);
  nft_ctx_buffer_error(ctx);
  int rc = nft_run_cmd_from_buffer(ctx, text.c_str());
  std::string error = nft_ctx_get_error_buffer(ctx);
  if (listing != nullptr) *listing = nft_ctx_get_output_buffer(ctx);
  nft_ctx_free(ctx);
  if (rc != 0) {
    while (!error.empty() && error.back() == '\n') error.pop_back();
    return absl::InternalError(absl::StrCat("nftables: ", error));
  }
  return absl::OkStatus();
}

absl::Status Firewall::Run(const std::string& text, std::string* listing) {
  return InNetns(host_ns_fd_, [&] { return RunNft(text, listing); });
}

absl::Status Firewall::Reset() {
  opened_.clear();  // every set goes with the table
  proxied_.clear();
  return Run(RenderTable(pool_, uplink_));
}

absl::Status Firewall::RemoveTable() {
  proxied_.clear();
  opened_.clear();
  return Run(RenderTableRemoval());
}

absl::Status Firewall::RestrictEgressUser(uint32_t uid, const std::vector<Endpoint>& upstreams) {
  return Run(RenderEgressUser(uid, upstreams, pool_, uplink_));
}

absl::Status Firewall::AddSandbox(const FirewallSandbox& sandbox) {
  std::string tag = SandboxTag(sandbox.sandbox_id);
  opened_.erase(tag);  // its set starts empty
  absl::Status added = Run(RenderSandbox(sandbox, pool_));
  bool egress = sandbox.egress_port != 0 && (sandbox.egress_all_ports || !sandbox.egress_ports.empty());
  if (added.ok() && egress) proxied_.insert(tag);
  else proxied_.erase(tag);
  return added;
}

absl::Status Firewall::RemoveSandbox(const std::string& tag) {
  opened_.erase(tag);
  bool egress = proxied_.erase(tag) > 0;
  if (Run(RenderSandboxRemoval(tag, egress)).ok()) return absl::OkStatus();
  // Something was missing (a half-removed sandbox): each piece on its own.
  absl::Status last = absl::OkStatus();
  for (const auto& step : RenderSandboxRemovalSteps(tag)) (void)Run(step);
  auto tags = SandboxTags();
  if (tags.ok() && std::find(tags->begin(), tags->end(), tag) != tags->end())
    last = absl::InternalError(absl::StrCat("cannot remove the firewall chain sb_", tag));
  return last;
}

absl::StatusOr<std::vector<std::string>> Firewall::SandboxTags() {
  std::string listing;
  RETURN_IF_ERROR(Run(absl::StrCat("list table inet ", kTable, "\n"), &listing));
  return SandboxTagsIn(listing);
}

bool Firewall::Fits(Opened& opened, const std::vector<ResolvedKey>& keys, TimePoint now) {
  auto fresh = [&] {
    return std::count_if(keys.begin(), keys.end(),
                         [&](const ResolvedKey& k) { return !opened.until.count(k); });
  };
  if (opened.until.size() + fresh() <= kMaxResolvedElements) return true;
  // The kernel has dropped (or is about to drop) what expired: forget it too.
  std::erase_if(opened.until, [now](const auto& entry) { return entry.second <= now; });
  return opened.until.size() + fresh() <= kMaxResolvedElements;
}

bool Firewall::TakeToken(Opened& opened, TimePoint now) {
  double elapsed = std::chrono::duration<double>(now - opened.refilled).count();
  opened.tokens = std::min(kResolvedBurst, opened.tokens + elapsed * kResolvedPerSecond);
  opened.refilled = now;
  if (opened.tokens < 1) return false;
  opened.tokens -= 1;
  return true;
}

std::chrono::seconds Firewall::AllowResolved(const std::string& sandbox_id,
                                             const std::vector<uint32_t>& addrs,
                                             const std::vector<uint16_t>& ports,
                                             std::chrono::seconds ttl) {
  ttl = std::clamp(ttl, kMinTtl, kMaxTtl);
  // Its names are checked and dialled by the egress proxy: an answer opens nothing.
  if (proxied_.count(SandboxTag(sandbox_id))) return ttl;
  TimePoint now = clock_();
  Opened& opened = opened_[SandboxTag(sandbox_id)];
  // An element that stays open for more than half the TTL is left alone: refreshing it would
  // cost a transaction and gain little. The answer's TTL is capped by the shortest one kept.
  TimePoint kept = now + ttl;
  std::vector<ResolvedKey> stale;
  for (const ResolvedKey& key : ResolvedKeys(addrs, ports)) {
    auto it = opened.until.find(key);
    if (it != opened.until.end() && it->second > now + ttl / 2) {
      kept = std::min(kept, it->second);
    } else {
      stale.push_back(key);
    }
  }
  auto open_for = [&] { return std::chrono::floor<std::chrono::seconds>(kept - now); };
  if (stale.empty()) return open_for();
  if (!Fits(opened, stale, now)) {
    KJ_LOG(WARNING, "a sandbox's resolved addresses reached the bound; answer not opened",
           sandbox_id, kMaxResolvedElements);
    return std::chrono::seconds(0);
  }
  if (!TakeToken(opened, now)) {
    KJ_LOG(WARNING, "a sandbox resolves new addresses too fast; answer not opened", sandbox_id);
    return std::chrono::seconds(0);
  }
  // One transaction, unless the answer's addresses times its rule's ports are more elements
  // than kResolvedPerTransaction. Elements it does not remember are not in the set (its
  // memory started with the set, and forgets only what expired), so they are only added.
  for (size_t at = 0; at < stale.size(); at += kResolvedPerTransaction) {
    std::vector<ResolvedKey> fresh, known;
    for (size_t i = at; i < std::min(stale.size(), at + kResolvedPerTransaction); ++i)
      (opened.until.count(stale[i]) ? known : fresh).push_back(stale[i]);
    ++resolved_transactions_;
    std::string text = RenderAllowResolved(sandbox_id, fresh, known, ttl);
    absl::Status st = resolved_runner_ ? resolved_runner_(text) : Run(text);
    if (!st.ok()) {
      KJ_LOG(ERROR, "cannot open a resolved address", sandbox_id, st.ToString());
      return std::chrono::seconds(0);
    }
    for (const auto* keys : {&fresh, &known})
      for (const ResolvedKey& key : *keys) opened.until[key] = now + ttl;
  }
  return open_for();
}

}  // namespace paseo::network
