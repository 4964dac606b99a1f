// The checks both daemons apply to request fields: tables of refused inputs, and the accepted
// forms they must not refuse.
#include "common/request_checks.h"

#include <gtest/gtest.h>

#include <functional>

#include <capnp/message.h>

#include "schema/api.capnp.h"

namespace paseo {
namespace {

struct Spec {
  std::vector<std::string> argv = {"/bin/true"};
  std::vector<std::string> env;
  std::string cwd;
  bool tty = false;
  uint16_t rows = 24, cols = 80;
};

absl::StatusOr<ProcessCommand> Check(const Spec& s) {
  capnp::MallocMessageBuilder m;
  auto b = m.initRoot<api::ProcessSpec>();
  auto argv = b.initArgv(static_cast<unsigned>(s.argv.size()));
  for (unsigned i = 0; i < s.argv.size(); ++i)
    argv.set(i, capnp::Text::Reader(s.argv[i].data(), s.argv[i].size()));
  auto env = b.initEnv(static_cast<unsigned>(s.env.size()));
  for (unsigned i = 0; i < s.env.size(); ++i)
    env.set(i, capnp::Text::Reader(s.env[i].data(), s.env[i].size()));
  b.setCwd(capnp::Text::Reader(s.cwd.data(), s.cwd.size()));
  auto r = b.asReader();
  return CheckProcessCommand(r.getArgv(), r.getEnv(), r.getCwd(), s.tty, s.rows, s.cols);
}

TEST(CheckProcessCommandTest, AcceptsAnOrdinaryCommand) {
  Spec s;
  s.argv = {"sh", "-c", "echo hi"};
  s.env = {"PATH=/bin", "EMPTY="};
  s.cwd = "/workspace/sub";
  auto c = Check(s);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->argv.size(), 3u);
  EXPECT_EQ(c->env[1], "EMPTY=");
  EXPECT_EQ(c->cwd, "/workspace/sub");
  EXPECT_FALSE(c->tty);
}

TEST(CheckProcessCommandTest, RefusesBadCommands) {
  std::vector<std::pair<std::string, Spec>> cases;
  // A default spec changed by `edit`.
  auto add = [&cases](const std::string& name, const std::function<void(Spec&)>& edit) {
    Spec s;
    edit(s);
    cases.emplace_back(name, s);
  };
  add("empty argv", [](Spec& s) { s.argv = {}; });
  add("empty argv[0]", [](Spec& s) { s.argv = {""}; });
  add("NUL in argv", [](Spec& s) { s.argv = {std::string("a\0b", 3)}; });
  add("too many args", [](Spec& s) { s.argv = std::vector<std::string>(kMaxArgs + 1, "x"); });
  add("argv too large", [](Spec& s) { s.argv = {"x", std::string(kMaxArgvBytes, 'a')}; });
  add("env without =", [](Spec& s) { s.env = {"NOEQUALS"}; });
  add("env with empty key", [](Spec& s) { s.env = {"=value"}; });
  add("NUL in env", [](Spec& s) { s.env = {std::string("A=b\0c", 5)}; });
  // The supervisor's words to its shim (issue 26 review): a client may not send them.
  add("reserved env name", [](Spec& s) { s.env = {"A=1", "PASEO_SHIM_SEARCH_PATH=/x"}; });
  add("reserved env prefix", [](Spec& s) { s.env = {"PASEO_SHIM_ANYTHING="}; });
  add("too many env entries",
      [](Spec& s) { s.env = std::vector<std::string>(kMaxEnv + 1, "A=b"); });
  for (std::string cwd : {"relative", "/a/../b", "/a/", "//a", "/a/./b"})
    add("cwd " + cwd, [cwd](Spec& s) { s.cwd = cwd; });
  add("tty with 0 rows", [](Spec& s) {
    s.tty = true;
    s.rows = 0;
  });
  add("tty with 0 cols", [](Spec& s) {
    s.tty = true;
    s.cols = 0;
  });
  for (const auto& [name, spec] : cases) {
    auto c = Check(spec);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
}

TEST(CheckProcessCommandTest, APipeProcessIgnoresItsTerminalSize) {
  Spec s;
  s.rows = 0;
  auto c = Check(s);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rows, 0);
}

TEST(RequestChecksTest, Signals) {
  EXPECT_TRUE(CheckSignal(1).ok());
  EXPECT_TRUE(CheckSignal(64).ok());
  for (int bad : {0, -1, 65, 1 << 30}) EXPECT_FALSE(CheckSignal(bad).ok()) << bad;
}

TEST(RequestChecksTest, ProfilesDefaultToTheFirstAndMustBeAllowed) {
  std::vector<std::string> allowed = {"default", "big"};
  EXPECT_EQ(*ChooseProfile(allowed, "", "w"), "default");
  EXPECT_EQ(*ChooseProfile(allowed, "big", "w"), "big");
  EXPECT_EQ(ChooseProfile(allowed, "other", "w").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ChooseProfile(allowed, std::string("big\0x", 5), "w").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_FALSE(ChooseProfile({}, "", "w").ok());
}

TEST(RequestChecksTest, NamesMustBeUtf8WithoutNul) {
  auto check = [](const std::string& s) {
    return CheckName("f", capnp::Text::Reader(s.data(), s.size())).ok();
  };
  EXPECT_TRUE(check("work-1"));
  EXPECT_TRUE(check("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(check(std::string("w\0tail", 6)));
  EXPECT_FALSE(check("\xff"));
  EXPECT_FALSE(check("\xc3"));              // truncated
  EXPECT_FALSE(check("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(check("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(check("\xf4\x90\x80\x80"));  // past U+10FFFF
}

TEST(RequestChecksTest, Labels) {
  std::string k = "k", v = "v", big(kMaxLabelBytes + 1, 'x'), nul("a\0b", 3);
  auto text = [](const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); };
  EXPECT_TRUE(CheckLabels({{text(k), text(v)}}).ok());
  EXPECT_FALSE(CheckLabels({{text(big), text(v)}}).ok());
  EXPECT_FALSE(CheckLabels({{text(k), text(big)}}).ok());
  EXPECT_FALSE(CheckLabels({{text(nul), text(v)}}).ok());
  std::vector<LabelView> many(kMaxLabels + 1, LabelView{text(k), text(v)});
  EXPECT_FALSE(CheckLabels(many).ok());
}

TEST(RequestChecksTest, Keys) {
  auto text = [](const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); };
  std::string empty, max(kMaxKeyBytes, 'k'), big(kMaxKeyBytes + 1, 'k'), nul("a\0b", 3);
  EXPECT_TRUE(CheckKey("key", text(empty)).ok());
  EXPECT_TRUE(CheckKey("key", text(max)).ok());
  EXPECT_TRUE(CheckKey("key", text("paseo/workspace-01")).ok());
  EXPECT_FALSE(CheckKey("key", text(big)).ok());
  EXPECT_FALSE(CheckKey("key", text(nul)).ok());
  EXPECT_FALSE(CheckKey("key", text("\xff")).ok());
}

TEST(RequestChecksTest, WorkspaceCwdIsNormalizedRelativeAndStaysInside) {
  auto check = [](const std::string& ws, const std::string& cwd = "") {
    return CheckWorkspaceCwd(capnp::Text::Reader(ws.data(), ws.size()),
                             capnp::Text::Reader(cwd.data(), cwd.size()));
  };
  // Unset.
  ASSERT_TRUE(check("").ok());
  EXPECT_FALSE(check("")->has_value());
  EXPECT_FALSE(check("", "/workspace")->has_value());
  // The workspace itself, however spelled.
  for (std::string root : {".", "./", ".//.", "./."}) {
    auto c = check(root);
    ASSERT_TRUE(c.ok()) << root << ": " << c.status();
    ASSERT_TRUE(c->has_value()) << root;
    EXPECT_EQ(**c, "") << root;
  }
  // Normalized: empty and "." components dropped, ".." that stays inside kept for the
  // privhelper to resolve physically.
  const std::vector<std::pair<std::string, std::string>> accepted = {
      {"packages/app", "packages/app"}, {"packages//app/", "packages/app"},
      {"./a/./b", "a/b"},               {"a/../b", "a/../b"},
      {"a/..", "a/.."},                 {"..a/b..", "..a/b.."},
      {"caf\xc3\xa9", "caf\xc3\xa9"},  {std::string(kMaxWorkspaceCwdBytes, 'a'),
                                        std::string(kMaxWorkspaceCwdBytes, 'a')}};
  for (const auto& [in, out] : accepted) {
    auto c = check(in);
    ASSERT_TRUE(c.ok()) << in << ": " << c.status();
    EXPECT_EQ(c->value_or("(unset)"), out) << in;
  }
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"/etc", "absolute"},
      {"/", "absolute"},
      {"..", "leaves the workspace"},
      {"../..", "leaves the workspace"},
      {"a/../..", "leaves the workspace"},
      {"./../x", "leaves the workspace"},
      {"a/b/../../../etc", "leaves the workspace"},
      {std::string("a\0b", 3), "NUL"},
      {"\xff", "UTF-8"},
      {std::string(kMaxWorkspaceCwdBytes + 1, 'a'), "longer"}};
  for (const auto& [in, why] : refused) {
    auto c = check(in);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << in;
    EXPECT_NE(c.status().message().find(why), absl::string_view::npos) << in << ": " << c.status();
    EXPECT_NE(c.status().message().find("workspaceCwd"), absl::string_view::npos) << c.status();
  }
  // Both at once is ambiguous.
  auto both = check("sub", "/workspace/sub");
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(both.status().message().find("cwd must be empty"), absl::string_view::npos);
}

TEST(RequestChecksTest, NormalizedAbsolutePaths) {
  for (std::string p : {"/", "/a", "/a/b", "/a.b/..c"}) EXPECT_TRUE(IsNormalizedAbsolutePath(p)) << p;
  for (std::string p :
       std::vector<std::string>{"", "a", "/a/", "//", "/a//b", "/./a", "/a/..", std::string("/a\0b", 4)})
    EXPECT_FALSE(IsNormalizedAbsolutePath(p)) << p;
}

}  // namespace
}  // namespace paseo
