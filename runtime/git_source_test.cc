#include "runtime/git_source.h"

#include <gtest/gtest.h>

namespace paseo::runtime {
namespace {

TEST(GitSource, ParsesHttpsHttpAndGitUrlsWithTheirPorts) {
  auto a = ParseGitUrl("https://Git.Example.test/acme/project.git");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->scheme, "https");
  EXPECT_EQ(a->host, "git.example.test");
  EXPECT_EQ(a->port, 443);
  EXPECT_EQ(ParseGitUrl("http://git.example.test/x")->port, 80);
  EXPECT_EQ(ParseGitUrl("git://git.example.test/x")->port, 9418);
  EXPECT_EQ(ParseGitUrl("https://git.example.test:8443/x")->port, 8443);
  EXPECT_EQ(ParseGitUrl("https://git.example.test")->host, "git.example.test");
}

TEST(GitSource, RefusesWhatTheSandboxCouldNotReachByNameOrWhatCarriesASecret) {
  for (const char* bad : {"ssh://git@host/x", "git@github.com:a/b.git", "file:///etc",
                          "/srv/repo", "https://user:token@host/x", "https://token@host/x",
                          "https://203.0.113.5/x", "https://[::1]/x", "https://host:0/x",
                          "https://host:99999/x", "https://ho st/x", "https:///x",
                          "https://-host/x", "https://host/x\n", "ext::sh -c evil"}) {
    EXPECT_EQ(ParseGitUrl(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(GitSource, RevisionAndSubdirectoryCannotBecomeOptionsOrLeaveTheRepository) {
  GitSource ok{"https://git.example.test/x", "main", std::nullopt};
  EXPECT_TRUE(CheckGitSource(ok).ok());
  ok.subdirectory = "packages/app";
  EXPECT_TRUE(CheckGitSource(ok).ok());
  for (const char* rev : {"", "-uhelp", "--upload-pack=touch /x", "a b", "a\tb"}) {
    GitSource g{"https://git.example.test/x", rev, std::nullopt};
    EXPECT_FALSE(CheckGitSource(g).ok()) << rev;
  }
  for (const char* sub : {"", "/abs", "a/../..", "..", "a//b", "a/", "./a"}) {
    GitSource g{"https://git.example.test/x", "main", std::string(sub)};
    EXPECT_FALSE(CheckGitSource(g).ok()) << sub;
  }
}

TEST(GitSource, TheProfileMustAllowTheHostOnItsPort) {
  std::vector<std::pair<std::string, std::vector<uint16_t>>> rules = {
      {"git.example.test", {443}}, {"*.forge.test", {80, 443}}};
  auto remote = [](const char* url) { return *ParseGitUrl(url); };
  EXPECT_TRUE(AllowsRemote(rules, remote("https://git.example.test/x")));
  EXPECT_FALSE(AllowsRemote(rules, remote("http://git.example.test/x")));  // port 80
  EXPECT_TRUE(AllowsRemote(rules, remote("http://a.forge.test/x")));
  EXPECT_FALSE(AllowsRemote(rules, remote("https://forge.test/x")));  // the apex is not below
  EXPECT_FALSE(AllowsRemote(rules, remote("https://evil-git.example.test/x")));
  EXPECT_FALSE(AllowsRemote({}, remote("https://git.example.test/x")));
}

TEST(GitSource, CommandsPutTheUrlAndRevisionWhereNoOptionCanHide) {
  GitSource g{"https://git.example.test/x", "v1.2", std::nullopt};
  auto clone = GitCloneArgv(g);
  ASSERT_GE(clone.size(), 3u);
  EXPECT_EQ(clone[clone.size() - 3], "--");
  EXPECT_EQ(clone[clone.size() - 2], g.url);
  EXPECT_EQ(clone.back(), ".");
  auto checkout = GitCheckoutArgv(g);
  EXPECT_EQ(checkout.back(), "--");
  EXPECT_EQ(checkout[checkout.size() - 2], "v1.2");
  EXPECT_EQ(GitSourceLabel(g), "git:https://git.example.test/x#v1.2");
  g.subdirectory = "pkg";
  EXPECT_EQ(GitSourceLabel(g), "git:https://git.example.test/x#v1.2:pkg");
  // The separators cannot be forged by the parts: two sources, two labels.
  GitSource a{"https://h.test/x#y", "z", std::nullopt};
  GitSource b{"https://h.test/x", "y#z", std::nullopt};
  EXPECT_NE(GitSourceLabel(a), GitSourceLabel(b));
  GitSource c{"https://h.test:8443/x", "main:sub", std::nullopt};
  GitSource d{"https://h.test:8443/x", "main", std::string("sub")};
  EXPECT_NE(GitSourceLabel(c), GitSourceLabel(d));
  EXPECT_EQ(GitSourceLabel(c), "git:https://h.test%3A8443/x#main%3Asub");
}

}  // namespace
}  // namespace paseo::runtime
