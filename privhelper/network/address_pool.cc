// See address_pool.h.
#include "privhelper/network/address_pool.h"

#include "absl/strings/str_cat.h"

namespace paseo::network {

AddressPool::AddressPool(Cidr pool)
    : pool_(pool), blocks_(pool.prefix >= kBlockPrefix ? 1u : 1u << (kBlockPrefix - pool.prefix)) {}

absl::StatusOr<uint32_t> AddressPool::Allocate() {
  for (uint32_t tried = 0; tried < blocks_; ++tried) {
    uint32_t index = (next_ + tried) % blocks_;
    uint32_t block = pool_.addr + 4 * index;
    if (taken_.count(block)) continue;
    taken_.insert(block);
    next_ = (index + 1) % blocks_;
    return block;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("the network pool ", pool_.ToString(), " has no free address block (",
                   blocks_, " sandboxes with network \"sandbox\" exist)"));
}

absl::Status AddressPool::Reserve(uint32_t block) {
  if (!pool_.Contains(block) || (block & 3) != 0)
    return absl::InvalidArgumentError(
        absl::StrCat(FormatIpv4(block), " is not a /30 block of ", pool_.ToString()));
  if (!taken_.insert(block).second)
    return absl::AlreadyExistsError(absl::StrCat(FormatIpv4(block), "/30 is taken"));
  return absl::OkStatus();
}

void AddressPool::Free(uint32_t block) { taken_.erase(block); }

}  // namespace paseo::network
