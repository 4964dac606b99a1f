#include "runtime/command_line.h"

#include <gtest/gtest.h>

namespace paseo::runtime {
namespace {

TEST(CommandLine, ParsesEveryOperation) {
  auto d = ParseCommandLine({"describe"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->operation, Operation::kDescribe);
  EXPECT_EQ(ParseCommandLine({"reconcile"})->operation, Operation::kReconcile);
  for (auto [name, op] : std::vector<std::pair<std::string, Operation>>{
           {"create", Operation::kCreate}, {"inspect", Operation::kInspect},
           {"exec", Operation::kExec}, {"pause", Operation::kPause},
           {"resume", Operation::kResume}, {"destroy", Operation::kDestroy}}) {
    auto inv = ParseCommandLine({name, "--workspace-id", "ws-1"});
    ASSERT_TRUE(inv.ok()) << name;
    EXPECT_EQ(inv->operation, op);
    EXPECT_EQ(inv->workspace_id, "ws-1");
  }
  auto s = ParseCommandLine(
      {"signal", "--signal", "SIGKILL", "--workspace-id", "w", "--exec-id", "e"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->exec_id, "e");
  EXPECT_EQ(s->signal, "SIGKILL");
}

TEST(CommandLine, RefusesUsageErrors) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"run"},
      {"Describe"},
      {"describe", "extra"},
      {"reconcile", "--workspace-id", "w"},
      {"create"},
      {"create", "--workspace-id"},
      {"create", "--workspace-id", ""},
      {"create", "--workspace-id", "a", "--workspace-id", "b"},
      {"create", "--workspace-id", "a", "--exec-id", "e"},
      {"create", "--workspace-id=a"},
      {"create", "-w", "a"},
      {"inspect", "--workspace-id", "a", "extra"},
      {"signal", "--workspace-id", "w", "--exec-id", "e"},
      {"signal", "--workspace-id", "w", "--exec-id", "e", "--signal", "TERM"},
      {"signal", "--workspace-id", "w", "--exec-id", "e", "--signal", "15"},
  };
  for (const auto& args : bad) {
    auto r = ParseCommandLine(args);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << (args.empty() ? "" : args[0]) << " " << args.size();
  }
}

TEST(CommandLine, UndeclaredContractOperationsAreRefusedClearly) {
  for (std::string op : {"release-backing", "merge-to-base"}) {
    auto r = ParseCommandLine({op, "--workspace-id", "w"});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(r.status().message().find("not supported"), std::string::npos);
  }
}

}  // namespace
}  // namespace paseo::runtime

namespace paseo::runtime {
namespace {

TEST(CommandLine, TheProtocolVersionComesFirstAndIsOneUnlessItSaysTwo) {
  EXPECT_EQ(ParseCommandLine({"describe"})->protocol_version, 1);
  EXPECT_EQ(ParseCommandLine({"--protocol-version", "1", "describe"})->protocol_version, 1);
  auto v2 = ParseCommandLine({"--protocol-version", "2", "inspect", "--workspace-id", "w"});
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->protocol_version, 2);
  EXPECT_EQ(v2->operation, Operation::kInspect);
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"--protocol-version"},
           {"--protocol-version", "3", "describe"},
           {"--protocol-version", "02", "describe"},
           {"--protocol-version", "2"},
           {"describe", "--protocol-version", "2"},  // not after the operation
           {"--protocol-version", "2", "--protocol-version", "2", "describe"}}) {
    EXPECT_EQ(ParseCommandLine(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad.size();
  }
}

TEST(CommandLine, ManageDescribeExistsOnlyInVersionTwo) {
  auto v2 = ParseCommandLine({"--protocol-version", "2", "manage-describe"});
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->operation, Operation::kManageDescribe);
  EXPECT_EQ(ParseCommandLine({"manage-describe"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCommandLine({"--protocol-version", "2", "manage-describe", "x"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // v2's optional management operations: none is declared, so each is refused clearly.
  for (std::string op : {"validate-options", "preflight-release-backing", "release-backing"}) {
    EXPECT_EQ(ParseCommandLine({"--protocol-version", "2", op}).status().code(),
              absl::StatusCode::kUnimplemented)
        << op;
  }
}

}  // namespace
}  // namespace paseo::runtime
