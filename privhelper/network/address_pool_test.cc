#include "privhelper/network/address_pool.h"

#include <set>

#include "gtest/gtest.h"

namespace paseo::network {
namespace {

AddressPool Pool(const char* cidr) { return AddressPool(*ParseCidr(cidr)); }

TEST(AddressPool, HandsOutDistinctBlocksUntilFull) {
  AddressPool pool = Pool("10.88.0.0/24");
  EXPECT_EQ(pool.capacity(), 64u);
  std::set<uint32_t> seen;
  for (int i = 0; i < 64; ++i) {
    auto b = pool.Allocate();
    ASSERT_TRUE(b.ok()) << i;
    EXPECT_EQ(*b & 3, 0u);
    EXPECT_TRUE(pool.cidr().Contains(*b));
    EXPECT_TRUE(seen.insert(*b).second);
  }
  EXPECT_EQ(pool.Allocate().status().code(), absl::StatusCode::kResourceExhausted);
  pool.Free(*seen.begin());
  EXPECT_EQ(*pool.Allocate(), *seen.begin());
}

TEST(AddressPool, AddressesOfABlock) {
  AddressPool pool = Pool("10.88.0.0/16");
  uint32_t b = *pool.Allocate();
  EXPECT_EQ(FormatIpv4(b), "10.88.0.0");
  EXPECT_EQ(FormatIpv4(AddressPool::HostEnd(b)), "10.88.0.1");
  EXPECT_EQ(FormatIpv4(AddressPool::SandboxAddress(b)), "10.88.0.2");
}

TEST(AddressPool, DoesNotReuseAFreedBlockAtOnce) {
  AddressPool pool = Pool("10.88.0.0/24");
  uint32_t a = *pool.Allocate();
  pool.Free(a);
  EXPECT_NE(*pool.Allocate(), a);
}

TEST(AddressPool, ReserveTakesExactlyTheRecordedBlock) {
  AddressPool pool = Pool("10.88.0.0/24");
  uint32_t recorded = *ParseIpv4("10.88.0.8");
  ASSERT_TRUE(pool.Reserve(recorded).ok());
  EXPECT_EQ(pool.Reserve(recorded).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(pool.Reserve(*ParseIpv4("10.88.0.9")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.Reserve(*ParseIpv4("10.89.0.0")).code(), absl::StatusCode::kInvalidArgument);
  for (size_t i = 0; i + 1 < pool.capacity(); ++i) EXPECT_NE(*pool.Allocate(), recorded);
  EXPECT_FALSE(pool.Allocate().ok());
}

}  // namespace
}  // namespace paseo::network
