#include "admin/config_files.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace paseo::admin {
namespace {

namespace fs = std::filesystem;

constexpr char kSha[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

class ConfigFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string tmpl = absl::StrCat(base != nullptr && *base ? base : "/tmp", "/admin.XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    config_ = dir_ + "/etc";
    scratch_ = dir_ + "/scratch";
    fs::create_directories(config_ + "/deployments");
    fs::create_directories(scratch_);
    Write("etc/helper.json",
          absl::StrCat(R"({"runsc": {"sha256": ")", kSha, R"("}, "rootfsVersion": "v1"})"));
    Write("etc/deployments/one.json",
          R"({"id": "one", "allowedUids": [1000], "workspaceRoots": [{"hostPath": "/srv/one"}]})");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Write(const std::string& rel, const std::string& text) {
    std::ofstream(dir_ + "/" + rel, std::ios::binary | std::ios::trunc) << text;
  }
  std::string Read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // What the config dir holds, file by file, to show a refused change left it alone.
  std::string Snapshot() {
    std::string all;
    for (const auto& e : fs::recursive_directory_iterator(config_))
      all += e.path().string() + "=" + (e.is_regular_file() ? Read(e.path()) : "") + "\n";
    return all;
  }
  bool ScratchIsEmpty() { return fs::is_empty(scratch_); }

  std::string dir_, config_, scratch_;
};

TEST_F(ConfigFilesTest, GeneratedDeploymentLoadsAsThePrivhelperReadsIt) {
  DeploymentSpec spec;
  spec.id = "two";
  spec.allowed_uids = {2000, 2001};
  spec.allowed_gids = {3000};
  spec.workspace_roots = {ParseRoot("/srv/two:/workspace"), ParseRoot("/srv/other")};
  spec.run_as = std::make_pair(2000u, 2000u);
  spec.max_sandboxes = 4;
  auto config = ValidateChange(config_, {"deployments/two.json", DeploymentJson(spec)}, scratch_);
  ASSERT_TRUE(config.ok()) << config.status();
  const config::Deployment::Reader* d = (*config)->FindDeployment("two");
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(d->getAllowedUids().size(), 2u);
  EXPECT_EQ(d->getAllowedUids()[1], 2001u);
  EXPECT_EQ(d->getAllowedGids()[0], 3000u);
  ASSERT_EQ(d->getWorkspaceRoots().size(), 2u);
  EXPECT_EQ(std::string(d->getWorkspaceRoots()[0].getHostPath().cStr()), "/srv/two");
  EXPECT_EQ(std::string(d->getWorkspaceRoots()[0].getClientPath().cStr()), "/workspace");
  EXPECT_EQ(std::string(d->getWorkspaceRoots()[1].getClientPath().cStr()), "");
  EXPECT_EQ(d->getRunAs().getUid(), 2000u);
  EXPECT_EQ(d->getMaxSandboxes(), 4u);
  EXPECT_NE((*config)->FindDeployment("one"), nullptr);
  // Validation happened on a copy: the real dir is unchanged and the copy is gone.
  EXPECT_FALSE(fs::exists(config_ + "/deployments/two.json"));
  EXPECT_TRUE(ScratchIsEmpty());
}

// The privhelper's own rules refuse, and the message names the real file, not the copy.
TEST_F(ConfigFilesTest, InvalidDeploymentsAreRefusedNamingTheRealPath) {
  std::string before = Snapshot();
  struct Case {
    std::string json;
    std::string expected;
  } cases[] = {
      {R"({"id": "two", "allowedUids": [0], "workspaceRoots": [{"hostPath": "relative"}]})",
       "workspaceRoots[0].hostPath"},
      {R"({"id": "two", "allowedUids": [5], "workspaceRoots": [{"hostPath": "/srv/x"}], "bogus": 1})",
       "unknown field"},
      {R"({"id": "one", "allowedUids": [5], "workspaceRoots": [{"hostPath": "/srv/x"}]})",
       "defined twice"},
      {R"({"id": "two", "allowedUids": [5], "workspaceRoots": [{"hostPath": "/srv/x"}], "profiles": ["nope"]})",
       "unknown launch profile"},
      {R"({"id": "two", "allowedUids": [5], "workspaceRoots": [{"hostPath": "/srv/x/../y"}]})",
       "hostPath"},
      {"{not json", "deployments/two.json"},
  };
  for (const auto& c : cases) {
    auto config = ValidateChange(config_, {"deployments/two.json", c.json}, scratch_);
    ASSERT_FALSE(config.ok()) << c.json;
    EXPECT_TRUE(absl::StrContains(config.status().message(), c.expected))
        << c.json << " -> " << config.status();
    EXPECT_TRUE(absl::StrContains(config.status().message(), config_ + "/deployments/two.json") ||
                c.expected == "defined twice")
        << config.status();
    EXPECT_FALSE(absl::StrContains(config.status().message(), scratch_)) << config.status();
  }
  EXPECT_EQ(Snapshot(), before);
  EXPECT_TRUE(ScratchIsEmpty());
}

TEST_F(ConfigFilesTest, RemovingTheLastDeploymentIsRefused) {
  auto config = ValidateChange(config_, {"deployments/one.json", std::nullopt}, scratch_);
  ASSERT_FALSE(config.ok());
  EXPECT_TRUE(absl::StrContains(config.status().message(), "no deployment defined"))
      << config.status();
}

TEST_F(ConfigFilesTest, ChangesOutsideTheConfigFilesAreRefused) {
  for (const char* rel : {"helper.json", "deployments/../helper.json", "deployments/a/b.json",
                          "deployments/x.txt", "other/x.json"}) {
    auto config = ValidateChange(config_, {rel, "{}"}, scratch_);
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << rel;
  }
}

TEST_F(ConfigFilesTest, WriteFileAtomicallyReplacesWholeAndLeavesNoTemporary) {
  std::string path = config_ + "/deployments/one.json";
  ASSERT_TRUE(WriteFileAtomically(path, "new contents\n", 0644).ok());
  EXPECT_EQ(Read(path), "new contents\n");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(config_ + "/deployments")) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  ASSERT_TRUE(RemoveFileDurably(path).ok());
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(RemoveFileDurably(path).ok());
}

TEST_F(ConfigFilesTest, DeploymentIdOfValidatesTheIdItBecomesAFileName) {
  EXPECT_EQ(*DeploymentIdOf(R"({"id": "ok-1"})", "f"), "ok-1");
  for (const char* bad : {R"({"id": "../etc"})", R"({"id": "a/b"})", R"({"id": ""})",
                          R"({"id": "UPPER"})", "[1]"}) {
    EXPECT_FALSE(DeploymentIdOf(bad, "f").ok()) << bad;
  }
}

TEST_F(ConfigFilesTest, FileOfDeploymentFindsItWhateverTheFileIsCalled) {
  Write("etc/deployments/misc.json",
        R"({"id": "three", "allowedUids": [7], "workspaceRoots": [{"hostPath": "/srv/3"}]})");
  EXPECT_EQ(*FileOfDeployment(config_, "three"), config_ + "/deployments/misc.json");
  EXPECT_EQ(*FileOfDeployment(config_, "one"), config_ + "/deployments/one.json");
  EXPECT_EQ(FileOfDeployment(config_, "four").status().code(), absl::StatusCode::kNotFound);
}

// status and gc find the service even when a deployment file is broken.
TEST_F(ConfigFilesTest, HelperDirsAreReadOnTheirOwn) {
  Write("etc/deployments/broken.json", "{not json");
  auto dirs = ReadHelperDirs(config_);
  ASSERT_TRUE(dirs.ok()) << dirs.status();
  EXPECT_EQ(dirs->state_dir, "/var/lib/paseo-sandbox");
  EXPECT_EQ(dirs->run_dir, "/run/paseo-sandbox");
  Write("etc/helper.json", R"({"runDir": "/srv/run", "stateDir": "/srv/state"})");
  EXPECT_EQ(ReadHelperDirs(config_)->run_dir, "/srv/run");
  EXPECT_EQ(ReadHelperDirs(config_)->state_dir, "/srv/state");
  EXPECT_FALSE(ReadHelperDirs(dir_ + "/nowhere").ok());
}

TEST(ParseRootTest, SplitsAtTheFirstColon) {
  EXPECT_EQ(ParseRoot("/a").host_path, "/a");
  EXPECT_EQ(ParseRoot("/a").client_path, "");
  EXPECT_EQ(ParseRoot("/a:/b").client_path, "/b");
  EXPECT_EQ(ParseRoot("/a:/b").host_path, "/a");
}

}  // namespace
}  // namespace paseo::admin
