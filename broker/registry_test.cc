// The registry's decisions without any I/O: who sees which sandbox, which state allows which
// operation, and the create/delete races the RPC layer relies on it to settle.
#include "broker/registry.h"

#include <gtest/gtest.h>

#include <capnp/message.h>

namespace paseo {
namespace {

class RegistryTest : public ::testing::Test {
 protected:
  ~RegistryTest() noexcept override {}
  RegistryTest() {
    auto deployments = message_.initRoot<helper::BrokerPolicy>().initDeployments(2);
    deployments[0].setId("work");
    deployments[0].initAllowedUids(1).set(0, 1000);
    auto profiles = deployments[0].initProfiles(2);
    profiles.set(0, "default");
    profiles.set(1, "big");
    deployments[0].setOutputBufferBytes(1 << 20);
    auto sizes = deployments[0].initProfileBufferBytes(2);
    sizes.set(0, 1 << 20);
    sizes.set(1, 4 << 20);
    deployments[1].setId("team");
    deployments[1].initAllowedGids(1).set(0, 500);
    deployments[1].initProfiles(1).set(0, "default");
    registry_.emplace(message_.getRoot<helper::BrokerPolicy>().asReader());
  }

  Registry& registry() { return *registry_; }
  SandboxRecord* Create(const Peer& peer, const std::string& deployment = "work") {
    auto sb = registry().BeginCreate(peer, {deployment, "", {}, ""}, 42);
    EXPECT_TRUE(sb.ok()) << sb.status();
    return sb.ok() ? registry().FinishCreate(sb->sandbox->id) : nullptr;
  }
  absl::StatusOr<BegunCreate> BeginKeyed(const Peer& peer, const std::string& key,
                                         const std::string& deployment = "work") {
    return registry().BeginCreate(peer, {deployment, "", {}, key}, 42);
  }
  static kj::Own<ProcessRecord> Process(const SandboxRecord& sb, const std::string& id) {
    auto p = kj::refcounted<ProcessRecord>();
    p->id = id;
    p->sandbox_id = sb.id;
    return p;
  }

  capnp::MallocMessageBuilder message_;
  std::optional<Registry> registry_;
  Peer owner_{1000, {1000}};
  Peer colleague_{1001, {1001, 500}};
  Peer stranger_{1002, {1002}};
};

TEST_F(RegistryTest, ANewSandboxIsCreatingThenRunningWithItsProfileAndBuffer) {
  auto begun = registry().BeginCreate(owner_, {"work", "big", {}, ""}, 42);
  ASSERT_TRUE(begun.ok()) << begun.status();
  SandboxRecord* sb = begun->sandbox;
  EXPECT_TRUE(begun->created);
  EXPECT_EQ(sb->state, SandboxState::kCreating);
  EXPECT_EQ(sb->profile, "big");
  EXPECT_EQ(sb->buffer_bytes, 4u << 20);
  EXPECT_EQ(sb->owner_uid, 1000u);
  EXPECT_EQ(sb->created_ms, 42);
  EXPECT_TRUE(registry().List(owner_).empty()) << "a sandbox being created is not listed";
  EXPECT_EQ(registry().FinishCreate(sb->id), sb);
  EXPECT_EQ(sb->state, SandboxState::kRunning);
  EXPECT_STREQ(StateName(sb->state), "running");
  ASSERT_EQ(registry().List(owner_).size(), 1u);
  EXPECT_EQ(Create(owner_)->profile, "default") << "an empty profile is the deployment's first";
}

TEST_F(RegistryTest, CreateRefusalsChangeNothing) {
  EXPECT_EQ(registry().BeginCreate(stranger_, {"work", "", {}, ""}, 0).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry().BeginCreate(owner_, {"team", "", {}, ""}, 0).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry().BeginCreate(owner_, {"nope", "", {}, ""}, 0).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(registry().BeginCreate(owner_, {"work", "other", {}, ""}, 0).status().code(),
            absl::StatusCode::kPermissionDenied);
  std::string big(kMaxLabelBytes + 1, 'x'), k = "k";
  CreateRequest labelled{"work", "", {{capnp::Text::Reader(k), capnp::Text::Reader(big)}}, ""};
  EXPECT_EQ(registry().BeginCreate(owner_, labelled, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry().size(), 0u);
}

TEST_F(RegistryTest, AnAbortedCreateLeavesNothing) {
  auto sb = registry().BeginCreate(owner_, {"work", "", {}, ""}, 0);
  ASSERT_TRUE(sb.ok());
  std::string id = sb->sandbox->id;
  registry().AbortCreate(id);
  EXPECT_EQ(registry().Find(id), nullptr);
  EXPECT_EQ(registry().FinishCreate(id), nullptr);
}

TEST_F(RegistryTest, VisibilityFollowsTheDeploymentNotTheCreator) {
  SandboxRecord* mine = Create(owner_);
  SandboxRecord* team = Create(colleague_, "team");
  EXPECT_TRUE(registry().Visible(owner_, mine->id).ok());
  // Absent and not-yours give the same answer, so ids cannot be probed.
  auto hidden = registry().Visible(stranger_, mine->id);
  auto absent = registry().Visible(stranger_, "sb-doesnotexist");
  EXPECT_EQ(hidden.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry().Visible(owner_, team->id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry().Visible(colleague_, team->id).ok()) << "by supplementary group";
  EXPECT_EQ(registry().List(colleague_).size(), 1u);
  EXPECT_TRUE(registry().List(stranger_).empty());
  EXPECT_FALSE(registry().RequireSomeDeployment(stranger_).ok());
  EXPECT_TRUE(registry().RequireSomeDeployment(colleague_).ok());
}

TEST_F(RegistryTest, DeleteRacesAreSettledByState) {
  SandboxRecord* sb = Create(owner_);
  std::string id = sb->id;
  auto first = registry().BeginDelete(owner_, id, false);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(*first, SandboxState::kRunning);
  EXPECT_EQ(registry().BeginDelete(owner_, id, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry().ForNewProcess(owner_, id).status().code(),
            absl::StatusCode::kFailedPrecondition);
  registry().AbortDelete(id, *first);
  EXPECT_EQ(sb->state, SandboxState::kRunning);
  ASSERT_TRUE(registry().BeginDelete(owner_, id, false).ok());
  registry().FinishDelete(id);
  EXPECT_EQ(registry().Visible(owner_, id).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistryTest, ASandboxBeingCreatedCannotBeDeletedOrUsed) {
  auto sb = registry().BeginCreate(owner_, {"work", "", {}, ""}, 0);
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(registry().BeginDelete(owner_, sb->sandbox->id, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry().ForNewProcess(owner_, sb->sandbox->id).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(RegistryTest, DeleteWithoutForceWaitsForRunningProcesses) {
  SandboxRecord* sb = Create(owner_);
  ASSERT_TRUE(registry().AddProcess(Process(*sb, "p-1")).ok());
  auto refused = registry().BeginDelete(owner_, sb->id, false);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("p-1"), std::string::npos);
  kj::Own<ProcessRecord> kept = kj::addRef(*sb->processes.at("p-1"));
  ASSERT_TRUE(registry().BeginDelete(owner_, sb->id, true).ok());
  registry().FinishDelete(sb->id);
  EXPECT_EQ(kept->exit.kind, ProcessExit::kUnknown) << "a deleted sandbox's processes end";
}

TEST_F(RegistryTest, ProcessesAreFoundOnlyThroughAVisibleSandbox) {
  SandboxRecord* sb = Create(owner_);
  ASSERT_TRUE(registry().AddProcess(Process(*sb, "p-1")).ok());
  EXPECT_TRUE(registry().VisibleProcess(owner_, sb->id, "p-1").ok());
  EXPECT_EQ(registry().VisibleProcess(owner_, sb->id, "p-2").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry().VisibleProcess(stranger_, sb->id, "p-1").status().code(),
            absl::StatusCode::kNotFound);
  auto orphan = kj::refcounted<ProcessRecord>();
  orphan->id = "p-3";
  orphan->sandbox_id = "sb-gone";
  EXPECT_EQ(registry().AddProcess(kj::mv(orphan)).code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistryTest, StatesAreShownByName) {
  EXPECT_STREQ(StateName(SandboxState::kOomKilled), "oom-killed");
  EXPECT_STREQ(StateName(SandboxState::kStopped), "stopped");
  EXPECT_STREQ(StateName(SandboxState::kUnattached), "running-unattached");
}

// Regression (attack run, item 5): a sandbox whose sentry was SIGKILLed stayed `running`, and
// exec into it reached runsc, which failed with its own message (exit 255 in the CLI).
TEST_F(RegistryTest, AStoppedSandboxRefusesNewProcessesWithWhyAndDeletesWithoutForce) {
  SandboxRecord* sb = Create(owner_);
  ASSERT_TRUE(registry().AddProcess(Process(*sb, "p-1")).ok());
  kj::Own<ProcessRecord> kept = kj::addRef(*sb->processes.at("p-1"));
  registry().MarkStopped(sb->id, "its gVisor kernel (runsc-sandbox) exited (killed by signal 9)",
                         false);
  EXPECT_EQ(sb->state, SandboxState::kStopped);
  ASSERT_EQ(registry().List(owner_).size(), 1u) << "still listed, to be seen and deleted";
  auto refused = registry().ForNewProcess(owner_, sb->id);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "sandbox " + sb->id +
                " is stopped: its gVisor kernel (runsc-sandbox) exited (killed by signal 9)");
  // Its processes are gone even if their waits have not answered yet.
  auto before = registry().BeginDelete(owner_, sb->id, /*force=*/false);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(*before, SandboxState::kStopped);
  registry().FinishDelete(sb->id);
  EXPECT_EQ(kept->exit.kind, ProcessExit::kUnknown);
}

TEST_F(RegistryTest, AnOomKilledSandboxRefusesNewProcessesToo) {
  SandboxRecord* sb = Create(owner_);
  registry().MarkStopped(sb->id, kOomKilledSandboxReason, true);
  EXPECT_EQ(sb->state, SandboxState::kOomKilled);
  auto refused = registry().ForNewProcess(owner_, sb->id);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "sandbox " + sb->id + " is oom-killed: " + kOomKilledSandboxReason);
}

TEST_F(RegistryTest, TheFirstReasonStaysExceptForTheMoreSpecificOomKill) {
  SandboxRecord* sb = Create(owner_);
  registry().MarkStopped(sb->id, "first", false);
  registry().MarkStopped(sb->id, "second", false);
  EXPECT_EQ(sb->stop_reason, "first");
  registry().MarkStopped(sb->id, "oom", true);
  EXPECT_EQ(sb->state, SandboxState::kOomKilled);
  EXPECT_EQ(sb->stop_reason, "oom");
  registry().MarkStopped(sb->id, "third", false);
  EXPECT_EQ(sb->state, SandboxState::kOomKilled);
  EXPECT_EQ(sb->stop_reason, "oom");
}

TEST_F(RegistryTest, AStopDuringADeleteIsKeptIfTheDeleteFails) {
  SandboxRecord* sb = Create(owner_);
  auto before = registry().BeginDelete(owner_, sb->id, false);
  ASSERT_TRUE(before.ok());
  registry().MarkStopped(sb->id, "its gVisor kernel (runsc-sandbox) exited", false);
  EXPECT_EQ(sb->state, SandboxState::kDeleting) << "a stop report does not undo a delete";
  registry().AbortDelete(sb->id, *before);
  EXPECT_EQ(sb->state, SandboxState::kStopped) << "it is dead: not running again";
  EXPECT_EQ(sb->stop_reason, "its gVisor kernel (runsc-sandbox) exited");
  // A sandbox still being created is not reported on (the broker waits only after create).
  auto creating = registry().BeginCreate(owner_, {"work", "", {}, ""}, 0);
  ASSERT_TRUE(creating.ok());
  registry().MarkStopped(creating->sandbox->id, "x", false);
  EXPECT_EQ(creating->sandbox->state, SandboxState::kCreating);
}

// ---------------------------------------------------------------- keys

TEST_F(RegistryTest, AKeyNamesOneSandboxPerDeploymentAndItsCreatorGetsItBack) {
  auto first = BeginKeyed(owner_, "ws-1");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->created);
  EXPECT_EQ(first->sandbox->key, "ws-1");
  // While it is being created, a second create gets the same record (the broker waits on it),
  // and findSandbox does not see it yet.
  auto during = BeginKeyed(owner_, "ws-1");
  ASSERT_TRUE(during.ok());
  EXPECT_FALSE(during->created);
  EXPECT_EQ(during->sandbox, first->sandbox);
  EXPECT_EQ(registry().FindByKey(owner_, "work", "ws-1").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_NE(registry().FinishCreate(first->sandbox->id), nullptr);

  auto again = BeginKeyed(owner_, "ws-1");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->sandbox->id, first->sandbox->id);
  EXPECT_EQ(registry().size(), 1u) << "the key counts nothing extra";
  auto found = registry().FindByKey(owner_, "work", "ws-1");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->id, first->sandbox->id);
  // Another deployment has its own keys.
  auto team = BeginKeyed(colleague_, "ws-1", "team");
  ASSERT_TRUE(team.ok());
  EXPECT_TRUE(team->created);
}

TEST_F(RegistryTest, AnotherUidsKeyIsAlreadyExistsAndFindingNeedsTheDeployment) {
  Peer outsider{1005, {1000}};  // neither in allowedUids nor in group 500
  auto mine = BeginKeyed(colleague_, "shared", "team");
  ASSERT_TRUE(mine.ok());
  registry().FinishCreate(mine->sandbox->id);
  Peer teammate{1003, {1003, 500}};  // in the team group too, another uid
  auto theirs = BeginKeyed(teammate, "shared", "team");
  EXPECT_EQ(theirs.status().code(), absl::StatusCode::kAlreadyExists);
  // The teammate may use the deployment, so it may find the sandbox (deployment rules).
  EXPECT_TRUE(registry().FindByKey(teammate, "team", "shared").ok());
  // Someone who may not use the deployment learns nothing.
  EXPECT_EQ(registry().FindByKey(stranger_, "team", "shared").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry().FindByKey(outsider, "team", "shared").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry().FindByKey(colleague_, "team", "none").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(registry().size(), 1u);
}

TEST_F(RegistryTest, AKeyIsFreeAgainOnceItsSandboxIsGone) {
  auto first = BeginKeyed(owner_, "ws");
  ASSERT_TRUE(first.ok());
  std::string id = first->sandbox->id;
  registry().FinishCreate(id);
  ASSERT_TRUE(registry().BeginDelete(owner_, id, false).ok());
  // Being deleted: neither returned nor replaced yet.
  auto during = BeginKeyed(owner_, "ws");
  EXPECT_EQ(during.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(during.status().message()).find("being deleted"), std::string::npos);
  registry().FinishDelete(id);
  EXPECT_EQ(registry().FindByKey(owner_, "work", "ws").status().code(),
            absl::StatusCode::kNotFound);
  auto fresh = BeginKeyed(owner_, "ws");
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fresh->created);
  EXPECT_NE(fresh->sandbox->id, id);
  // An aborted create frees it as well.
  registry().AbortCreate(fresh->sandbox->id);
  auto third = BeginKeyed(owner_, "ws");
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->created);
}

TEST_F(RegistryTest, KeysAreCheckedAndRestoredOnesAreIndexed) {
  EXPECT_EQ(BeginKeyed(owner_, std::string(257, 'k')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BeginKeyed(owner_, "\xff").status().code(), absl::StatusCode::kInvalidArgument);
  auto restored = std::make_unique<SandboxRecord>();
  restored->id = "sb-restored";
  restored->deployment_id = "work";
  restored->owner_uid = 1000;
  restored->key = "kept";
  restored->state = SandboxState::kUnattached;
  registry().Restore(std::move(restored));
  auto found = registry().FindByKey(owner_, "work", "kept");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ((*found)->id, "sb-restored");
  auto again = BeginKeyed(owner_, "kept");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created);
}

// ---------------------------------------------------------------- pause

TEST_F(RegistryTest, PauseAndResumeKeepWhatTheSandboxWas) {
  SandboxRecord* sb = Create(owner_);
  ASSERT_EQ(registry().BeginPause(owner_, sb->id).value_or(false), true);
  registry().FinishPause(sb->id);
  EXPECT_EQ(sb->state, SandboxState::kPaused);
  EXPECT_STREQ(StateName(sb->state), "paused");
  EXPECT_EQ(registry().BeginPause(owner_, sb->id).value_or(true), false) << "paused already";
  auto refused = registry().ForNewProcess(owner_, sb->id);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message()).find("paused"), std::string::npos);
  ASSERT_EQ(registry().BeginResume(owner_, sb->id).value_or(false), true);
  registry().FinishResume(sb->id);
  EXPECT_EQ(sb->state, SandboxState::kRunning);
  EXPECT_EQ(registry().BeginResume(owner_, sb->id).value_or(true), false) << "running already";
  EXPECT_TRUE(registry().ForNewProcess(owner_, sb->id).ok());

  // An adopted sandbox is adopted again after a resume.
  sb->state = SandboxState::kUnattached;
  registry().FinishPause(sb->id);
  registry().FinishResume(sb->id);
  EXPECT_EQ(sb->state, SandboxState::kUnattached);
  // Others cannot, and a stopped one is refused.
  EXPECT_EQ(registry().BeginPause(stranger_, sb->id).status().code(),
            absl::StatusCode::kNotFound);
  registry().MarkStopped(sb->id, "gone", false);
  EXPECT_EQ(registry().BeginPause(owner_, sb->id).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry().BeginResume(owner_, sb->id).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(RegistryTest, APausedSandboxCanBeDeletedAndStopsLikeAnyOther) {
  SandboxRecord* sb = Create(owner_);
  registry().FinishPause(sb->id);
  auto before = registry().BeginDelete(owner_, sb->id, false);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(*before, SandboxState::kPaused);
  registry().FinishPause(sb->id);  // a pause answered during the delete changes nothing
  EXPECT_EQ(sb->state, SandboxState::kDeleting);
  registry().AbortDelete(sb->id, *before);
  EXPECT_EQ(sb->state, SandboxState::kPaused);
  registry().MarkStopped(sb->id, "its gVisor kernel (runsc-sandbox) exited", false);
  EXPECT_EQ(sb->state, SandboxState::kStopped);
}

}  // namespace
}  // namespace paseo
