#include "privhelper/resource_limits.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace paseo {
namespace {

HostResources Host(uint32_t cpus, uint64_t memory_gib, uint64_t pid_max, uint64_t threads_max) {
  HostResources h;
  h.cpus = cpus;
  h.memory_bytes = memory_gib << 30;
  h.pid_max = pid_max;
  h.threads_max = threads_max;
  return h;
}

// The development machine: 2 CPUs, 24 GiB, pid_max 32768, threads-max 192730.
TEST(DefaultLimitsTest, DevelopmentMachine) {
  ServiceBounds s = DefaultServiceBounds(Host(2, 24, 32768, 192730));
  EXPECT_EQ(s.memory_bytes, uint64_t{12} << 30);  // half the RAM
  EXPECT_EQ(s.cpu_millis, 1500u);                 // three quarters of the CPUs
  EXPECT_EQ(s.max_host_tasks, 16384u);            // half of pid_max
  SandboxLimits d = DefaultLimits(Host(2, 24, 32768, 192730));
  EXPECT_EQ(d.memory_bytes, uint64_t{2457} << 20);  // a fifth of the service's
  EXPECT_EQ(d.cpu_millis, 1000u);                   // one of the two CPUs
  EXPECT_EQ(d.max_host_tasks, 3276u);               // a fifth of the service's
  EXPECT_EQ(d.max_processes, 512u);
}

TEST(DefaultLimitsTest, TheSmallerOfPidMaxAndThreadsMaxCounts) {
  // systemd's pid_max of 4194304: threads-max (from RAM) is what bounds host tasks then.
  SandboxLimits d = DefaultLimits(Host(16, 64, 4194304, 500000));
  EXPECT_EQ(DefaultServiceBounds(Host(16, 64, 4194304, 500000)).max_host_tasks, 250000u);
  EXPECT_EQ(d.max_host_tasks, 50000u);
  EXPECT_EQ(d.max_processes, 4096u);  // capped
  EXPECT_EQ(d.cpu_millis, 8000u);
  EXPECT_EQ(d.memory_bytes, uint64_t{32768 / 5} << 20);
  // threads-max unknown: pid_max alone.
  EXPECT_EQ(DefaultLimits(Host(2, 24, 32768, 0)).max_host_tasks, 3276u);
}

TEST(DefaultLimitsTest, SmallHostsGetFloorsNeverZero) {
  SandboxLimits d = DefaultLimits(Host(1, 0, 1000, 500));
  ServiceBounds s = DefaultServiceBounds(Host(1, 0, 1000, 500));
  EXPECT_EQ(s.memory_bytes, uint64_t{512} << 20);
  EXPECT_EQ(s.cpu_millis, 750u);
  EXPECT_EQ(s.max_host_tasks, 1024u);
  EXPECT_EQ(d.memory_bytes, uint64_t{256} << 20);
  EXPECT_EQ(d.cpu_millis, 500u);
  EXPECT_EQ(d.max_host_tasks, 1024u);
  EXPECT_EQ(d.max_processes, 128u);
  // A nonsensical 0 CPUs still gives a bound.
  EXPECT_EQ(DefaultLimits(Host(0, 1, 32768, 0)).cpu_millis, 500u);
}

TEST(DefaultLimitsTest, MemoryIsWholeMebibytes) {
  HostResources h = Host(2, 0, 32768, 0);
  h.memory_bytes = (uint64_t{8} << 30) + 12345;
  EXPECT_EQ(DefaultServiceBounds(h).memory_bytes, uint64_t{4} << 30);
  EXPECT_EQ(DefaultLimits(h).memory_bytes, uint64_t{819} << 20);
}

TEST(ResolveLimitsTest, ZeroTakesTheDefaultAndEverythingElseStays) {
  HostResources host = Host(2, 24, 32768, 192730);
  EXPECT_EQ(ResolveLimits({}, host), DefaultLimits(host));
  SandboxLimits requested;
  requested.memory_bytes = 1 << 30;
  requested.max_processes = 64;
  SandboxLimits r = ResolveLimits(requested, host);
  EXPECT_EQ(r.memory_bytes, uint64_t{1} << 30);
  EXPECT_EQ(r.max_processes, 64u);
  EXPECT_EQ(r.cpu_millis, 1000u);
  EXPECT_EQ(r.max_host_tasks, 3276u);
  requested.cpu_millis = 250;
  requested.max_host_tasks = 300;
  r = ResolveLimits(requested, host);
  EXPECT_EQ(r.cpu_millis, 250u);
  EXPECT_EQ(r.max_host_tasks, 300u);
}

// No default of a sandbox is above the service's, whatever the host or the configured bounds.
TEST(DefaultLimitsTest, NeverAboveTheService) {
  for (uint32_t cpus : {1u, 2u, 64u}) {
    for (uint64_t gib : {0u, 1u, 24u, 1024u}) {
      for (uint64_t pid_max : {301u, 32768u, 4194304u}) {
        HostResources host = Host(cpus, gib, pid_max, 0);
        for (ServiceBounds configured : {ServiceBounds{}, ServiceBounds{512 << 20, 100, 1024}}) {
          ServiceBounds s = ResolveServiceBounds(configured, host);
          SandboxLimits d = DefaultLimits(s, host);
          EXPECT_LE(d.memory_bytes, s.memory_bytes);
          EXPECT_LE(d.cpu_millis, s.cpu_millis);
          EXPECT_LE(d.max_host_tasks, s.max_host_tasks);
          EXPECT_GT(d.memory_bytes, 0u);
          EXPECT_GT(d.cpu_millis, 0u);
          EXPECT_GT(d.max_host_tasks, 0u);
        }
      }
    }
  }
}

TEST(ReadHostResourcesTest, ReadsThisHost) {
  auto host = ReadHostResources();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_GE(host->cpus, 1u);
  EXPECT_LE(host->cpus, static_cast<uint32_t>(sysconf(_SC_NPROCESSORS_CONF)));
  EXPECT_EQ(host->memory_bytes,
            static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE));
  EXPECT_GE(host->pid_max, 301u);  // the kernel's minimum
  EXPECT_GT(host->threads_max, 0u);
}

}  // namespace
}  // namespace paseo
