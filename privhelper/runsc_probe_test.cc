#include "privhelper/runsc_probe.h"

#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

using ::testing::HasSubstr;

TEST(RunscProbe, RoundTripsAndIsParsedStrictly) {
  RunscProbe p{"runsc=ab,kernel=6.18,cpus=2,cpu=X", "ptrace", {{"systrap", 1650}, {"ptrace", 980}}};
  auto back = ParseRunscProbe(FormatRunscProbe(p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->key, p.key);
  EXPECT_EQ(back->platform, "ptrace");
  EXPECT_EQ(back->median_ms, p.median_ms);
  EXPECT_EQ(DescribeMeasuredPlatform(p, "/s/runsc-probe"),
            "ptrace (runsc.platform auto: measured faster on this host, systrap 1650 ms, ptrace "
            "980 ms; /s/runsc-probe)");
  // A measurement that failed: the key alone.
  RunscProbe plain{"k", "", {}};
  EXPECT_EQ(FormatRunscProbe(plain), "key k\n");
  back = ParseRunscProbe(FormatRunscProbe(plain));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->platform.empty());
}

TEST(RunscProbe, ABadRecordIsRefusedSoTheHostIsProbedAgain) {
  for (const char* bad : {
           "",                                                // nothing
           "platform ptrace\nmedian_ms ptrace 1\n",            // no key
           "key k\nplatform ptrace\n",                         // not measured
           "key k\nplatform kvm\nmedian_ms kvm 3\n",           // never auto's
           "key k\nplatform ptrace\nmedian_ms ptrace -1\n",    // negative
           "key k\nmedian_ms ptrace 1\nmedian_ms ptrace 2\n",  // twice
           "key k\nextra 1\n",                                 // unknown line
           "key k\nkey j\n",                                   // key twice
           "key a b\n",                                        // key of two words
           "key k\ngofer_userns no\n",                         // a field no longer written
       }) {
    EXPECT_FALSE(ParseRunscProbe(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseRunscProbe(std::string(5000, 'k')).ok());
}

TEST(RunscProbe, AReadRecordMustBeThisHostsForThisRunsc) {
  std::string path = std::string(getenv("TEST_TMPDIR")) + "/runsc-probe";
  EXPECT_FALSE(ReadRunscProbe(path, "aa").ok()) << "missing";
  std::ofstream(path) << FormatRunscProbe({HostRunscKey("aa"), "ptrace", {{"ptrace", 9}}});
  auto mine = ReadRunscProbe(path, "aa");
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->platform, "ptrace");
  EXPECT_FALSE(ReadRunscProbe(path, "bb").ok()) << "another runsc's record";
  std::ofstream(path) << std::string(8192, 'k');
  EXPECT_FALSE(ReadRunscProbe(path, "aa").ok()) << "too long";
}

TEST(RunscProbe, TheKeyNamesTheRunscTheKernelAndTheCpus) {
  std::string a = HostRunscKey("aa");
  EXPECT_THAT(a, HasSubstr("runsc=aa,kernel="));
  EXPECT_THAT(a, HasSubstr(",cpus="));
  EXPECT_EQ(a.find(' '), std::string::npos) << "a record line holds the key as one word";
  EXPECT_NE(a, HostRunscKey("bb"));
}

}  // namespace
}  // namespace paseo
