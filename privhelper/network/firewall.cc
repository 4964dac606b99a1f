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

absl::Status Firewall::Reset() { return Run(RenderTable(pool_, uplink_)); }

absl::Status Firewall::RemoveTable() { return Run(RenderTableRemoval()); }

absl::Status Firewall::AddSandbox(const FirewallSandbox& sandbox) {
  return Run(RenderSandbox(sandbox, pool_));
}

absl::Status Firewall::RemoveSandbox(const std::string& tag) {
  if (Run(RenderSandboxRemoval(tag)).ok()) return absl::OkStatus();
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

void Firewall::AllowResolved(const std::string& sandbox_id, uint32_t addr,
                             const std::vector<uint16_t>& ports, std::chrono::seconds ttl) {
  ttl = std::clamp(ttl, kMinTtl, kMaxTtl);
  absl::Status st = Run(RenderAllowResolved(sandbox_id, addr, ports, ttl));
  if (!st.ok()) KJ_LOG(ERROR, "cannot open a resolved address", sandbox_id, st.ToString());
}

}  // namespace paseo::network
