// The /30 blocks of HelperNetwork.pool that sandbox links take: the block's first usable
// address is the host end, the second the sandbox. Pure bookkeeping, no system calls: a
// restarted privhelper reserves the blocks its adopted sandboxes recorded before it allocates.
//
//   AddressPool pool(*ParseCidr("10.88.0.0/16"));
//   ASSIGN_OR_RETURN(uint32_t block, pool.Allocate());   // 10.88.0.0
//   AddressPool::HostEnd(block);                          // 10.88.0.1
//   pool.Free(block);
#pragma once

#include <cstdint>
#include <set>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "privhelper/network/sandbox_network.h"

namespace paseo::network {

class AddressPool {
 public:
  explicit AddressPool(Cidr pool);

  // A free block (its network address), resource-exhausted when none is left. Blocks are handed
  // out round-robin, so a just-freed address is not reused at once (stale conntrack entries and
  // caches of the last owner age out first).
  absl::StatusOr<uint32_t> Allocate();
  // Takes `block` (an adopted sandbox's): invalid-argument unless it is a block of this pool,
  // already-exists if it is taken.
  absl::Status Reserve(uint32_t block);
  // Gives `block` back; a block that is not taken is ignored.
  void Free(uint32_t block);

  bool Taken(uint32_t block) const { return taken_.count(block) != 0; }
  size_t capacity() const { return blocks_; }
  size_t used() const { return taken_.size(); }
  const Cidr& cidr() const { return pool_; }

  static uint32_t HostEnd(uint32_t block) { return block + 1; }
  static uint32_t SandboxAddress(uint32_t block) { return block + 2; }
  static constexpr int kBlockPrefix = 30;

 private:
  Cidr pool_;
  uint32_t blocks_;
  uint32_t next_ = 0;  // index of the next block to try
  std::set<uint32_t> taken_;
};

}  // namespace paseo::network
