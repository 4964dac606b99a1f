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
