#include "privhelper/sandbox_identity.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace paseo {
namespace {

constexpr char kDebianPasswd[] =
    "root:x:0:0:root:/root:/bin/bash\n"
    "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
    "agent:x:1000:1000:agent:/home/agent:/bin/bash\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";

TEST(PasswdWithAgentTest, AnotherUidReplacesTheRootfsAgent) {
  EXPECT_EQ(PasswdWithAgent(kDebianPasswd, {4242, 4343, "/home/agent", "/bin/bash"}),
            "root:x:0:0:root:/root:/bin/bash\n"
            "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            "agent:x:4242:4343:agent:/home/agent:/bin/bash\n");
}

TEST(PasswdWithAgentTest, TheSameUidGetsTheSandboxsHome) {
  std::string out = PasswdWithAgent(kDebianPasswd, {1000, 1000, "/srv/home", "/bin/sh"});
  EXPECT_NE(out.find("agent:x:1000:1000:agent:/srv/home:/bin/sh\n"), std::string::npos);
  EXPECT_EQ(out.find("/home/agent"), std::string::npos);
}

TEST(PasswdWithAgentTest, AUidTakenByASystemUserBecomesTheAgent) {
  // One name per uid: getpwuid must answer "agent" with the sandbox's home.
  std::string out = PasswdWithAgent(kDebianPasswd, {1, 1, "/home/agent", "/bin/sh"});
  EXPECT_EQ(out.find("daemon:"), std::string::npos);
  EXPECT_NE(out.find("agent:x:1:1:agent:/home/agent:/bin/sh\n"), std::string::npos);
  EXPECT_NE(out.find("root:x:0:0:"), std::string::npos);
}

TEST(PasswdWithAgentTest, EmptyOrUnterminatedInputAndOddLinesAreKept) {
  EXPECT_EQ(PasswdWithAgent("", {5, 6, "/h", "/bin/sh"}), "agent:x:5:6:agent:/h:/bin/sh\n");
  EXPECT_EQ(PasswdWithAgent("root:x:0:0::/root:/bin/sh", {5, 6, "/h", "/bin/sh"}),
            "root:x:0:0::/root:/bin/sh\nagent:x:5:6:agent:/h:/bin/sh\n");
  // A comment or a malformed line is not an entry for anyone; it stays.
  EXPECT_EQ(PasswdWithAgent("# agent:5\nbroken\n", {5, 6, "/h", "/bin/sh"}),
            "# agent:5\nbroken\nagent:x:5:6:agent:/h:/bin/sh\n");
  // "agent" only as a whole name, a uid only as the whole third field.
  EXPECT_EQ(PasswdWithAgent("agents:x:50:50::/:/bin/sh\nx:x:500:5::/:/bin/sh\n",
                            {5, 6, "/h", "/bin/sh"}),
            "agents:x:50:50::/:/bin/sh\nx:x:500:5::/:/bin/sh\nagent:x:5:6:agent:/h:/bin/sh\n");
}

TEST(GroupWithAgentTest, OneGroupForTheGid) {
  EXPECT_EQ(GroupWithAgent("root:x:0:\nusers:x:100:\nagent:x:1000:\n", 4343),
            "root:x:0:\nusers:x:100:\nagent:x:4343:\n");
  EXPECT_EQ(GroupWithAgent("root:x:0:\nusers:x:100:\nagent:x:1000:\n", 100),
            "root:x:0:\nagent:x:100:\n");
}

class WriteSandboxIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/identity-test.XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    root_ = templ;
  }
  void TearDown() override { ASSERT_EQ(system(("rm -rf " + root_).c_str()), 0); }
  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(root_ + "/" + rel) << text;
  }
  std::string Read(const std::string& rel) {
    std::ifstream in(root_ + "/" + rel);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string root_;
};

TEST_F(WriteSandboxIdentityTest, RewritesBothFilesWithBashWhenTheRootfsHasIt) {
  ASSERT_EQ(mkdir((root_ + "/etc").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((root_ + "/usr").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((root_ + "/usr/bin").c_str(), 0755), 0);
  // Debian's merged /usr: /bin is a link into the rootfs.
  ASSERT_EQ(symlink("usr/bin", (root_ + "/bin").c_str()), 0);
  Write("usr/bin/bash", "");
  Write("etc/passwd", kDebianPasswd);
  Write("etc/group", "root:x:0:\nagent:x:1000:\n");
  ASSERT_TRUE(WriteSandboxIdentity(root_, {4242, 4343, "/home/agent"}).ok());
  EXPECT_NE(Read("etc/passwd").find("agent:x:4242:4343:agent:/home/agent:/bin/bash\n"),
            std::string::npos);
  EXPECT_EQ(Read("etc/group"), "root:x:0:\nagent:x:4343:\n");
  struct stat st;
  ASSERT_EQ(stat((root_ + "/etc/passwd").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  // Nothing is left beside them.
  EXPECT_NE(access((root_ + "/etc/.passwd.paseo-sandbox").c_str(), F_OK), 0);
}

TEST_F(WriteSandboxIdentityTest, MissingFilesAreCreatedAndNoEtcIsLeftAlone) {
  ASSERT_TRUE(WriteSandboxIdentity(root_, {7, 8, "/h"}).ok());
  EXPECT_NE(access((root_ + "/etc").c_str(), F_OK), 0);
  ASSERT_EQ(mkdir((root_ + "/etc").c_str(), 0755), 0);
  ASSERT_TRUE(WriteSandboxIdentity(root_, {7, 8, "/h"}).ok());
  EXPECT_EQ(Read("etc/passwd"), "agent:x:7:8:agent:/h:/bin/sh\n");
  EXPECT_EQ(Read("etc/group"), "agent:x:8:\n");
}

// The rootfs is trusted, but nothing in it may make the privhelper write outside the sandbox's
// tree: a link at /etc/passwd is refused, and an /etc that links out resolves inside the root.
TEST_F(WriteSandboxIdentityTest, SymlinksCannotRedirectTheWrite) {
  char outside_templ[] = "/tmp/identity-outside.XXXXXX";
  ASSERT_NE(mkdtemp(outside_templ), nullptr);
  std::string outside = outside_templ;
  std::ofstream(outside + "/passwd") << "victim:x:1:1::/:/bin/sh\n";

  ASSERT_EQ(mkdir((root_ + "/etc").c_str(), 0755), 0);
  ASSERT_EQ(symlink((outside + "/passwd").c_str(), (root_ + "/etc/passwd").c_str()), 0);
  EXPECT_FALSE(WriteSandboxIdentity(root_, {7, 8, "/h"}).ok());

  ASSERT_EQ(system(("rm -rf " + root_ + "/etc").c_str()), 0);
  ASSERT_EQ(symlink(outside.c_str(), (root_ + "/etc").c_str()), 0);
  // "/tmp/identity-outside.X" inside the root does not exist: nothing to rewrite.
  EXPECT_TRUE(WriteSandboxIdentity(root_, {7, 8, "/h"}).ok());

  std::ifstream in(outside + "/passwd");
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str(), "victim:x:1:1::/:/bin/sh\n");
  EXPECT_NE(access((outside + "/group").c_str(), F_OK), 0);
  ASSERT_EQ(system(("rm -rf " + outside).c_str()), 0);
}

TEST_F(WriteSandboxIdentityTest, ResolvConfReplacesEvenASymlinkWithoutFollowingIt) {
  char outside_templ[] = "/tmp/resolv-outside.XXXXXX";
  ASSERT_NE(mkdtemp(outside_templ), nullptr);
  std::string outside = outside_templ;
  std::ofstream(outside + "/resolv.conf") << "nameserver 1.1.1.1\n";
  ASSERT_TRUE(WriteSandboxResolvConf(root_, "10.88.0.1").ok());  // no /etc: left alone
  ASSERT_EQ(mkdir((root_ + "/etc").c_str(), 0755), 0);
  ASSERT_EQ(symlink((outside + "/resolv.conf").c_str(), (root_ + "/etc/resolv.conf").c_str()), 0);
  ASSERT_TRUE(WriteSandboxResolvConf(root_, "10.88.0.1").ok());
  EXPECT_EQ(Read("etc/resolv.conf"), ResolvConfFor("10.88.0.1"));
  EXPECT_NE(Read("etc/resolv.conf").find("\nnameserver 10.88.0.1\n"), std::string::npos);
  std::ifstream in(outside + "/resolv.conf");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "nameserver 1.1.1.1\n");
  ASSERT_EQ(system(("rm -rf " + outside).c_str()), 0);
}

TEST_F(WriteSandboxIdentityTest, AFifoOrAHugeFileIsRefused) {
  ASSERT_EQ(mkdir((root_ + "/etc").c_str(), 0755), 0);
  ASSERT_EQ(mkfifo((root_ + "/etc/passwd").c_str(), 0644), 0);
  EXPECT_FALSE(WriteSandboxIdentity(root_, {7, 8, "/h"}).ok());
  ASSERT_EQ(unlink((root_ + "/etc/passwd").c_str()), 0);
  Write("etc/passwd", std::string((1 << 20) + 1, 'x'));
  EXPECT_FALSE(WriteSandboxIdentity(root_, {7, 8, "/h"}).ok());
}

}  // namespace
}  // namespace paseo
