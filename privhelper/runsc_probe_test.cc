#include "privhelper/runsc_probe.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

using ::testing::HasSubstr;

TEST(RunscProbe, RoundTripsAndIsParsedStrictly) {
  RunscProbe p{"runsc=ab,kernel=6.18,cpus=2,cpu=X", true, "ptrace", {{"systrap", 1650}, {"ptrace", 980}}};
  auto back = ParseRunscProbe(FormatRunscProbe(p));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->key, p.key);
  EXPECT_TRUE(back->gofer_userns);
  EXPECT_EQ(back->platform, "ptrace");
  EXPECT_EQ(back->median_ms, p.median_ms);
  EXPECT_EQ(DescribeMeasuredPlatform(p, "/s/runsc-probe"),
            "ptrace (runsc.platform auto: measured faster on this host, systrap 1650 ms, ptrace "
            "980 ms; /s/runsc-probe)");
  // Not measured (an explicit platform, or a runsc with ptrace only): no platform lines.
  RunscProbe plain{"k", false, "", {}};
  EXPECT_EQ(FormatRunscProbe(plain), "key k\ngofer_userns no\n");
  back = ParseRunscProbe(FormatRunscProbe(plain));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_FALSE(back->gofer_userns);
  EXPECT_TRUE(back->platform.empty());
}

TEST(RunscProbe, ABadRecordIsRefusedSoTheHostIsProbedAgain) {
  for (const char* bad : {
           "",                                                              // nothing
           "key k\n",                                                        // no gofer line
           "gofer_userns yes\n",                                             // no key
           "key k\ngofer_userns maybe\n",                                    // not yes or no
           "key k\ngofer_userns yes\nplatform ptrace\n",                     // not measured
           "key k\ngofer_userns no\nplatform kvm\nmedian_ms kvm 3\n",        // never auto's
           "key k\ngofer_userns no\nplatform ptrace\nmedian_ms ptrace -1\n", // negative
           "key k\ngofer_userns no\nmedian_ms ptrace 1\nmedian_ms ptrace 2\n", // twice
           "key k\ngofer_userns no\nextra 1\n",                              // unknown line
           "key k\nkey j\ngofer_userns no\n",                                // key twice
           "key k\ngofer_userns no\ngofer_userns yes\n",                     // gofer twice
           "key a b\ngofer_userns no\n",                                     // key of two words
       }) {
    EXPECT_FALSE(ParseRunscProbe(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseRunscProbe(std::string(5000, 'k')).ok());
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
