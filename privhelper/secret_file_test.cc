// The checks on a secret's file, on real files, owned by the test's own user (the privhelper
// asks for root; run-tests runs unit tests as an ordinary user).
#include "privhelper/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

class SecretFileTest : public ::testing::Test {
 protected:
  std::string dir_;
  void SetUp() override {
    char tmpl[] = "/tmp/secret-file-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    chmod(dir_.c_str(), 0700);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string Write(const std::string& name, const std::string& content, mode_t mode = 0600) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    chmod(path.c_str(), mode);
    return path;
  }
  absl::StatusOr<std::string> Read(const std::string& path) { return ReadSecretFile(path, geteuid()); }
};

TEST_F(SecretFileTest, TheValueIsTheFirstLineWithoutItsNewline) {
  EXPECT_EQ(Read(Write("a", "sk-ant-123\n")).value(), "sk-ant-123");
  EXPECT_EQ(Read(Write("b", "sk-ant-456\r\n")).value(), "sk-ant-456");
  EXPECT_EQ(Read(Write("c", "no-newline", 0400)).value(), "no-newline");
}

TEST_F(SecretFileTest, AnythingElseIsRefusedWithoutItsContentInTheMessage) {
  for (const auto& [name, content] : std::vector<std::pair<std::string, std::string>>{
           {"two-lines", "LEAKME-one\nLEAKME-two\n"},
           {"control", std::string("LEAKME\x01", 7)},
           {"empty", ""},
           {"newline-only", "\n"},
           {"too-long", "LEAKME" + std::string(5000, 'k')}}) {
    auto got = Read(Write(name, content));
    EXPECT_FALSE(got.ok()) << name;
    EXPECT_EQ(got.status().message().find("LEAKME"), std::string::npos) << got.status();
  }
  EXPECT_FALSE(Read(Write("group-readable", "v", 0640)).ok());
  EXPECT_FALSE(Read(Write("world-readable", "v", 0604)).ok());
}

TEST_F(SecretFileTest, AFileOfAnotherOwnerIsRefused) {
  std::string path = Write("owned", "value");
  EXPECT_FALSE(ReadSecretFile(path, geteuid() + 1).ok()) << "owned by someone else than asked";
}

TEST_F(SecretFileTest, SymlinksAndHardLinksAreRefused) {
  std::string target = Write("target", "value");
  std::string sym = dir_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), sym.c_str()), 0);
  EXPECT_FALSE(Read(sym).ok()) << "a symlinked file";
  std::string linked_dir = dir_ + "-dirlink";
  ASSERT_EQ(symlink(dir_.c_str(), linked_dir.c_str()), 0);
  EXPECT_FALSE(Read(linked_dir + "/target").ok()) << "a symlink on the way";
  unlink(linked_dir.c_str());
  std::string hard = dir_ + "/hard";
  ASSERT_EQ(link(target.c_str(), hard.c_str()), 0);
  EXPECT_FALSE(Read(hard).ok()) << "a second link (one to /etc/shadow, say)";
  EXPECT_FALSE(Read(dir_).ok()) << "a directory";
  EXPECT_FALSE(Read("relative/path").ok());
}

TEST_F(SecretFileTest, ADirectoryOthersMayWriteIsRefused) {
  std::string path = Write("v", "value");
  chmod(dir_.c_str(), 0777);
  EXPECT_FALSE(Read(path).ok());
}

TEST_F(SecretFileTest, ADirectoryAboveThatOthersMayWriteIsRefused) {
  ASSERT_EQ(mkdir((dir_ + "/open").c_str(), 0777), 0);
  ASSERT_EQ(chmod((dir_ + "/open").c_str(), 0777), 0);
  ASSERT_EQ(mkdir((dir_ + "/open/keys").c_str(), 0700), 0);
  std::string path = Write("open/keys/v", "value");
  auto got = Read(path);
  EXPECT_FALSE(got.ok()) << "anyone could rename keys/ and put another in its place";
  EXPECT_NE(got.status().message().find(dir_ + "/open must be"), std::string::npos) << got.status();
  ASSERT_EQ(chmod((dir_ + "/open").c_str(), 01777), 0);
  EXPECT_TRUE(Read(path).ok()) << "sticky, as /tmp: others cannot rename what is not theirs";
}

TEST(PlaceholderTest, EachIsFreshAndNamesItsSecret) {
  std::string a = NewPlaceholder("anthropic"), b = NewPlaceholder("anthropic");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("paseo-secret-anthropic-", 0), 0u);
  EXPECT_EQ(a.size(), std::string("paseo-secret-anthropic-").size() + 32);
}

}  // namespace
}  // namespace paseo
