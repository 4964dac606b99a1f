// See lifecycle.h.
#include "runtime/lifecycle.h"

#include <chrono>
#include <csignal>
#include <utility>
#include <vector>

#include <kj/exception.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/client.h"
#include "common/process_exit.h"
#include "common/request_checks.h"
#include "common/rpc_errors.h"
#include "common/search_path.h"
#include "runtime/git_source.h"

namespace paseo::runtime {
namespace {

// Runs `fn` (which waits on RPCs) and turns an RPC error into a status carrying its
// "<reason>: <message>" text.
template <typename Fn>
absl::Status Rpc(Fn&& fn) {
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions(std::forward<Fn>(fn));
  KJ_IF_MAYBE(e, error) {
    std::string text = client::ErrorText(*e);
    if (absl::StartsWith(text, "not-found:")) return absl::NotFoundError(text);
    return absl::UnavailableError(text);
  }
  return absl::OkStatus();
}

Found ToFound(api::Sandbox::Client sandbox, api::SandboxInfo::Reader info) {
  Found f{kj::mv(sandbox), info.getId(), info.getState(), info.getStateReason(), {}, {}, {},
          {}, {}, {}, 0};
  for (auto label : info.getLabels()) f.labels[label.getKey()] = label.getValue();
  for (auto t : info.getPaths().getToolDirectories()) f.tool_directories.emplace_back(t.cStr());
  f.profile = info.getProfile().cStr();
  f.created_ms = info.getCreatedAtUnixMs();
  f.network_mode = info.getNetwork().getMode().cStr();
  for (auto rule : info.getNetwork().getAllowNames()) {
    std::vector<uint16_t> ports;
    for (uint16_t p : rule.getPorts()) ports.push_back(p);
    f.allow_names.emplace_back(rule.getName().cStr(), std::move(ports));
  }
  for (auto k : info.getPaths().getKept()) f.kept.emplace_back(k.cStr());
  return f;
}

std::string Label(const Found& f, const char* key) {
  auto it = f.labels.find(key);
  return it == f.labels.end() ? "" : it->second;
}

bool IsReady(const std::string& state) {
  return state == "running" || state == "running-unattached";
}

// Why a sandbox in `found`'s state cannot serve the workspace (empty if it can).
std::string NotUsable(const Found& found) {
  if (IsReady(found.state) || found.state == "paused") return "";
  std::string why = absl::StrCat("the workspace's sandbox ", found.id, " is ", found.state);
  if (!found.state_reason.empty()) absl::StrAppend(&why, " (", found.state_reason, ")");
  return why + "; destroy the workspace and create it again";
}

absl::Status Foreign(const std::string& workspace_id) {
  return absl::PermissionDeniedError(absl::StrCat(
      "workspace ", workspace_id, " is owned by another Paseo instance (its sandbox's ",
      kInstanceLabel, " label differs from this runtimeInstanceId); refusing to touch it"));
}

absl::Status Missing(const std::string& workspace_id) {
  return absl::NotFoundError(absl::StrCat("workspace ", workspace_id, " has no sandbox"));
}

// The workspace's own sandbox, or an error (missing, foreign).
absl::StatusOr<Found> FindOwned(Session& s, const std::string& workspace_id) {
  auto found = FindWorkspace(s, workspace_id);
  if (!found.ok()) return found.status();
  if (!found->has_value()) return Missing(workspace_id);
  absl::Status owned = CheckOwned(s, **found, workspace_id);
  if (!owned.ok()) return owned;
  return std::move(**found);
}

absl::Status CheckLabelValue(const char* key, const std::string& value) {
  if (value.size() > kMaxLabelBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        key, " would be longer than ", kMaxLabelBytes, " bytes; not supported"));
  return absl::OkStatus();
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Describe(const ProcessExit& exit) {
  switch (exit.kind) {
    case ProcessExit::kExited: return absl::StrCat("exit status ", exit.value);
    case ProcessExit::kSignaled: return absl::StrCat("killed by signal ", exit.value);
    case ProcessExit::kOomKilled: return "out of memory";
    default: return "could not be started";
  }
}

// The tail of one output stream, kept by the caller (on its stack) for as long as it reads it:
// the sink object itself goes whenever the broker drops its reference.
struct Tail {
  std::string bytes;
  kj::Own<kj::PromiseFulfiller<void>> ended;
};
class TailSink final : public api::OutputSink::Server {
 public:
  explicit TailSink(Tail& tail) : tail_(tail) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto data = context.getParams().getData();
    tail_.bytes.append(reinterpret_cast<const char*>(data.begin()), data.size());
    if (tail_.bytes.size() > kMaxTail) tail_.bytes.erase(0, tail_.bytes.size() - kMaxTail);
    return kj::READY_NOW;
  }
  kj::Promise<void> gap(GapContext) override { return kj::READY_NOW; }
  kj::Promise<void> end(EndContext) override {
    tail_.ended->fulfill();
    return kj::READY_NOW;
  }

 private:
  static constexpr size_t kMaxTail = 2000;
  Tail& tail_;
};

// Runs argv in the sandbox's workspace (the service's default env for its user, plus `env`)
// and waits for its end, at most `deadline` (then it is killed): its exit, and what it wrote to
// stdout and stderr (the last bytes). `key` names the process (ProcessSpec.key).
struct Ran {
  ProcessExit exit;
  std::string output;
  bool timed_out = false;
};
absl::StatusOr<Ran> RunInWorkspace(Session& s, api::Sandbox::Client& sandbox,
                                   const std::vector<std::string>& argv,
                                   const std::vector<std::string>& env,
                                   const std::string& workspace_cwd = ".",
                                   const std::string& key = "",
                                   kj::Duration deadline = 60 * kj::SECONDS) {
  Ran ran;
  auto out_ended = kj::newPromiseAndFulfiller<void>();
  auto err_ended = kj::newPromiseAndFulfiller<void>();
  Tail out{"", kj::mv(out_ended.fulfiller)};
  Tail err{"", kj::mv(err_ended.fulfiller)};
  absl::Status st = Rpc([&] {
    auto start = sandbox.startProcessRequest();
    auto spec = start.initSpec();
    auto a = spec.initArgv(static_cast<unsigned>(argv.size()));
    for (unsigned i = 0; i < a.size(); ++i) a.set(i, argv[i]);
    auto e = spec.initEnv(static_cast<unsigned>(env.size()));
    for (unsigned i = 0; i < e.size(); ++i) e.set(i, env[i]);
    spec.setWorkspaceCwd(workspace_cwd);
    spec.setKey(key);
    spec.setOutput(api::OutputMode::LOSSLESS);
    auto process = start.send().getProcess();
    process.closeInputRequest().send().detach([](kj::Exception&&) {});
    auto sub_out = process.subscribeRequest();
    sub_out.setStream(api::Stream::STDOUT);
    sub_out.setSink(kj::heap<TailSink>(out));
    auto sub_err = process.subscribeRequest();
    sub_err.setStream(api::Stream::STDERR);
    sub_err.setSink(kj::heap<TailSink>(err));
    auto subscribed_out = sub_out.send();
    auto subscribed_err = sub_err.send();
    auto waited = process.waitRequest().send().then(
        [](auto result) -> kj::Maybe<ProcessExit> { return FromCapnp(result.getStatus()); });
    auto timeout = s.timer.afterDelay(deadline).then([]() -> kj::Maybe<ProcessExit> {
      return nullptr;
    });
    KJ_IF_MAYBE (exit, waited.exclusiveJoin(kj::mv(timeout)).wait(s.wait_scope)) {
      ran.exit = *exit;
    } else {
      ran.timed_out = true;
      auto kill = process.signalRequest();
      kill.setSignal(SIGKILL);
      kill.send().wait(s.wait_scope);
      ran.exit = FromCapnp(process.waitRequest().send().wait(s.wait_scope).getStatus());
    }
    // Bounded: output a descendant keeps writing must not hold the create. A sink the broker
    // let go of without end() is the end too.
    auto ended = [&](kj::Promise<void> p) {
      p.catch_([](kj::Exception&&) {})
          .exclusiveJoin(s.timer.afterDelay(5 * kj::SECONDS))
          .wait(s.wait_scope);
    };
    ended(kj::mv(out_ended.promise));
    ended(kj::mv(err_ended.promise));
  });
  if (!st.ok()) return st;
  ran.output = out.bytes + err.bytes;
  return ran;
}

// The clone's and checkout's process keys, and the repository-local config entry the last step
// writes: a sandbox over a git source is ready only once it is there (a create that was
// interrupted, or one still cloning for a concurrent caller, leaves it unset).
constexpr char kCloneKey[] = "paseo/git-clone";
constexpr char kCheckoutKey[] = "paseo/git-checkout";
constexpr char kMaterializedKey[] = "paseo.materialized";
constexpr kj::Duration kCloneDeadline = 10 * kj::MINUTES;
constexpr kj::Duration kCheckoutDeadline = 2 * kj::MINUTES;

absl::Status CloneInto(Session& s, Found& made, const GitSource& git) {
  GitRemote remote = *ParseGitUrl(git.url);  // checked before the sandbox was made
  if (made.network_mode != "sandbox") {
    return absl::FailedPreconditionError(absl::StrCat(
        "git source ", git.url, ": profile ", made.profile,
        " has no network (network.mode \"", made.network_mode, "\"); a git source is cloned "
        "inside the sandbox, through its own network: use a profile with network mode "
        "\"sandbox\" that allows ", remote.host, " on port ", remote.port));
  }
  if (!AllowsRemote(made.allow_names, remote)) {
    std::vector<std::string> allowed;
    for (const auto& [name, ports] : made.allow_names)
      allowed.push_back(absl::StrCat(name, ":", absl::StrJoin(ports, ",")));
    return absl::PermissionDeniedError(absl::StrCat(
        "git source ", git.url, ": profile ", made.profile, " does not allow ", remote.host,
        " on port ", remote.port, " (its network.allowNames: ",
        allowed.empty() ? "none" : absl::StrJoin(allowed, " "), ")"));
  }
  struct Step {
    const char* name;
    std::vector<std::string> argv;
    const char* key;
    kj::Duration deadline;
  };
  for (const Step& step : {Step{"clone", GitCloneArgv(git), kCloneKey, kCloneDeadline},
                           Step{"checkout", GitCheckoutArgv(git), kCheckoutKey, kCheckoutDeadline}}) {
    auto ran = RunInWorkspace(s, made.sandbox, step.argv, GitEnvironment(), ".", step.key,
                              step.deadline);
    if (!ran.ok())
      return absl::Status(ran.status().code(), absl::StrCat("git source ", git.url, ": ",
                                                            step.name, ": ", ran.status().message()));
    if (ran->timed_out)
      return absl::DeadlineExceededError(absl::StrCat(
          "git source ", git.url, ": ", step.name, " did not finish within ",
          step.deadline / kj::SECONDS, " s; stopped"));
    if (ran->exit.kind != ProcessExit::kExited || ran->exit.value != 0) {
      std::string said = ran->output;
      while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
      return absl::FailedPreconditionError(absl::StrCat(
          "git source ", git.url, " (revision ", git.revision, "): `", absl::StrJoin(step.argv, " "),
          "` failed in the sandbox (", Describe(ran->exit), ")", said.empty() ? "" : ": ", said));
    }
  }
  if (git.subdirectory) {
    // Checked by the service as any workspaceCwd: a directory beneath the workspace, reached
    // without a symlink out of it.
    auto ran = RunInWorkspace(s, made.sandbox, {"true"}, {}, *git.subdirectory);
    if (!ran.ok() || ran->exit.kind != ProcessExit::kExited || ran->exit.value != 0)
      return absl::FailedPreconditionError(absl::StrCat(
          "git source ", git.url, ": revision ", git.revision, " has no directory ",
          *git.subdirectory, ran.ok() ? "" : absl::StrCat(" (", ran.status().message(), ")")));
  }
  auto marked = RunInWorkspace(s, made.sandbox,
                               {"git", "config", "--local", kMaterializedKey, "true"}, {});
  if (!marked.ok()) return marked.status();
  if (marked->exit.kind != ProcessExit::kExited || marked->exit.value != 0)
    return absl::InternalError(absl::StrCat("git source ", git.url, ": could not record the "
                                            "finished clone: ", marked->output));
  return absl::OkStatus();
}

// Whether an existing sandbox over a git source holds the finished clone. Waits while its
// creator (a concurrent create) is still cloning; false once nobody is and the clone is not
// finished (its creator was interrupted).
absl::StatusOr<bool> AwaitMaterialized(Session& s, Found& found) {
  int64_t started = NowMs();
  for (;;) {
    auto ran = RunInWorkspace(s, found.sandbox, {"git", "config", "--get", kMaterializedKey}, {});
    if (!ran.ok()) return ran.status();
    if (ran->exit.kind == ProcessExit::kExited && ran->exit.value == 0 &&
        absl::StartsWith(ran->output, "true"))
      return true;
    bool cloning = false;
    for (const char* key : {kCloneKey, kCheckoutKey}) {
      absl::Status st = Rpc([&] {
        auto req = found.sandbox.findProcessRequest();
        req.setKey(key);
        auto res = req.send().wait(s.wait_scope);
        cloning |= !res.getReleased() && res.getInfo().getStatus().isRunning();
      });
      if (!st.ok() && !absl::IsNotFound(st)) return st;
    }
    // A creator that has not started its clone yet: one round trip after its create.
    bool young = NowMs() - found.created_ms < 10 * 1000;
    if (!cloning && !young) return false;
    if (NowMs() - started > (kCloneDeadline + kCheckoutDeadline) / kj::MILLISECONDS)
      return absl::DeadlineExceededError("the workspace's clone did not finish in time");
    s.timer.afterDelay(500 * kj::MILLISECONDS).wait(s.wait_scope);
  }
}

// Where Paseo works in the workspace (placement.cwd): /workspace, or a git source's
// subdirectory of it (its paseo.cwd label).
std::string PlacementCwd(const Found& found) {
  std::string cwd = Label(found, kCwdLabel);
  return cwd.empty() ? kWorkspaceDestination : cwd;
}

absl::StatusOr<std::string> CreateResponse(const std::string& workspace_id, const Found& found,
                                           bool fresh) {
  std::string why = NotUsable(found);
  if (!why.empty()) return absl::FailedPreconditionError(why);
  Lifecycle lifecycle = found.state == "paused" ? Lifecycle::kPaused : Lifecycle::kReady;
  return StateResponse(workspace_id, lifecycle, PlacementCwd(found), fresh);
}

}  // namespace

absl::StatusOr<std::string> ResolveDeployment(kj::WaitScope& wait_scope,
                                              api::Supervisor::Client& supervisor,
                                              const Options& options) {
  if (options.deployment) return *options.deployment;
  // Paseo's Docker image sets it for every client in the container (docker/README.md).
  if (std::string env = client::DefaultDeployment(); !env.empty()) return env;
  std::vector<std::string> deployments;
  absl::Status st = Rpc([&] {
    auto info = supervisor.infoRequest().send().wait(wait_scope);
    for (auto d : info.getDeployments()) deployments.emplace_back(d.cStr());
  });
  if (!st.ok()) return st;
  if (deployments.size() == 1) return deployments[0];
  return absl::FailedPreconditionError(absl::StrCat(
      "options.deployment is not set and this user may use ", deployments.size(),
      " deployments (", absl::StrJoin(deployments, ", "),
      "); set options.deployment in Paseo's workspaceRuntimes entry or "
      "$PASEO_SANDBOX_DEPLOYMENT"));
}

absl::StatusOr<std::string> SandboxKey(const std::string& workspace_id) {
  std::string key = absl::StrCat(kKeyPrefix, workspace_id);
  absl::Status st = CheckKey("workspace id", capnp::Text::Reader(key.c_str(), key.size()));
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "workspace id \"", workspace_id, "\" cannot name a sandbox (", st.message(),
        "; the key paseo/<id> must be at most ", kMaxKeyBytes, " bytes of UTF-8)"));
  }
  return key;
}

absl::StatusOr<std::optional<Found>> FindWorkspace(Session& s, const std::string& workspace_id) {
  auto key = SandboxKey(workspace_id);
  if (!key.ok()) return key.status();
  std::optional<Found> found;
  absl::Status st = Rpc([&] {
    auto req = s.supervisor.findSandboxRequest();
    req.setDeploymentId(s.deployment);
    req.setKey(*key);
    auto res = req.send().wait(s.wait_scope);
    found = ToFound(res.getSandbox(), res.getInfo());
  });
  if (absl::IsNotFound(st)) return std::optional<Found>();
  if (!st.ok()) return st;
  return found;
}

absl::Status CheckOwned(const Session& s, const Found& found, const std::string& workspace_id) {
  if (Label(found, kInstanceLabel) != s.instance) return Foreign(workspace_id);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Create(Session& s, const std::string& workspace_id,
                                   const LifecycleRequest& request) {
  if (!request.input) return absl::InvalidArgumentError("create: the request has no input");
  const CreateInput& input = *request.input;
  if (input.workspace_id != workspace_id) {
    return absl::InvalidArgumentError(absl::StrCat("create: input.workspaceId \"",
                                                   input.workspace_id, "\" is not --workspace-id \"",
                                                   workspace_id, "\""));
  }
  const GitSource* git = std::get_if<GitSource>(&input.source);
  if (git != nullptr) {
    absl::Status checked = CheckGitSource(*git);
    if (!checked.ok()) return checked;
  }
  // What the sandbox's paseo.source label says: the directory, or the git URL and revision.
  const std::string path =
      git != nullptr ? GitSourceLabel(*git) : std::get<DirectorySource>(input.source).path;
  for (auto [key, value] : {std::pair<const char*, const std::string&>{kInstanceLabel, s.instance},
                            {kWorkspaceLabel, workspace_id},
                            {kSourceLabel, path}}) {
    absl::Status st = CheckLabelValue(key, value);
    if (!st.ok()) return st;
  }
  auto key = SandboxKey(workspace_id);
  if (!key.ok()) return key.status();

  // Idempotence: an existing sandbox is adopted only if it is ours and over the same source,
  // and for a git source only once its clone is finished.
  bool abandoned = false;
  auto adopt = [&](Found& found, bool fresh) -> absl::StatusOr<std::string> {
    absl::Status owned = CheckOwned(s, found, workspace_id);
    if (!owned.ok()) return owned;
    if (Label(found, kSourceLabel) != path) {
      return absl::FailedPreconditionError(absl::StrCat(
          "workspace ", workspace_id, " already exists over another source (",
          Label(found, kSourceLabel), "); destroy it first"));
    }
    if (git != nullptr && NotUsable(found).empty()) {
      auto done = AwaitMaterialized(s, found);
      if (!done.ok()) return done.status();
      if (!*done) {
        abandoned = true;
        return absl::AbortedError("its clone was abandoned");
      }
    }
    return CreateResponse(workspace_id, found, fresh);
  };
  auto existing = FindWorkspace(s, workspace_id);
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) {
    auto adopted = adopt(**existing, false);
    if (!abandoned) return adopted;
    // Its creator was interrupted mid-clone: what is there is not the source. Start again.
    absl::Status gone = Rpc([&] {
      auto del = (*existing)->sandbox.deleteRequest();
      del.setForce(true);
      del.send().wait(s.wait_scope);
    });
    if (!gone.ok() && !absl::IsNotFound(gone)) return gone;
  }

  std::optional<Found> made;
  bool created = false;
  absl::Status st = Rpc([&] {
    auto req = s.supervisor.createSandboxRequest();
    auto spec = req.initSpec();
    spec.setDeploymentId(s.deployment);
    if (s.options.profile) spec.setProfile(*s.options.profile);
    spec.setKey(*key);
    auto ws = spec.initWorkspaces(1)[0];
    // A git source is cloned into a directory of the sandbox's own, removed with it.
    if (git != nullptr) ws.setEmpty(true);
    else ws.setPath(path);
    ws.setDestination(kWorkspaceDestination);
    ws.setMode(api::AccessMode::READ_WRITE);
    bool sub = git != nullptr && git->subdirectory.has_value();
    auto labels = spec.initLabels(sub ? 4 : 3);
    labels[0].setKey(kInstanceLabel);
    labels[0].setValue(s.instance);
    labels[1].setKey(kWorkspaceLabel);
    labels[1].setValue(workspace_id);
    labels[2].setKey(kSourceLabel);
    labels[2].setValue(path);
    if (sub) {
      labels[3].setKey(kCwdLabel);
      labels[3].setValue(absl::StrCat(kWorkspaceDestination, "/", *git->subdirectory));
    }
    auto creds = spec.initCredentials(static_cast<unsigned>(s.options.credentials.size()));
    for (unsigned i = 0; i < s.options.credentials.size(); ++i)
      creds.set(i, s.options.credentials[i]);
    auto res = req.send().wait(s.wait_scope);
    created = res.getCreated();
    made = ToFound(res.getSandbox(), res.getInfo());
  });
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("create: ", st.message()));
  // Not created: a concurrent create with the same key won; adopt it like any existing one.
  if (!created) {
    auto adopted = adopt(*made, false);
    if (abandoned)
      return absl::FailedPreconditionError(absl::StrCat(
          "workspace ", workspace_id, ": a concurrent create's clone was abandoned; retry"));
    return adopted;
  }
  if (git != nullptr) {
    // Cloned through the sandbox's own network policy; a refusal or a failed clone deletes the
    // sandbox (and with it its workspace), so nothing is left behind.
    absl::Status cloned = CloneInto(s, *made, *git);
    if (!cloned.ok()) {
      absl::Status gone = Rpc([&] {
        auto del = made->sandbox.deleteRequest();
        del.setForce(true);
        del.send().wait(s.wait_scope);
      });
      if (!gone.ok() && !absl::IsNotFound(gone))
        return absl::Status(cloned.code(), absl::StrCat(cloned.message(), "; and deleting its "
                                                        "sandbox failed: ", gone.message()));
      return cloned;
    }
  }
  return CreateResponse(workspace_id, *made, true);
}

absl::StatusOr<std::string> Inspect(Session& s, const std::string& workspace_id) {
  auto found = FindWorkspace(s, workspace_id);
  if (!found.ok()) return found.status();
  if (!found->has_value() || (*found)->state == "deleting") return InspectionMissing();
  const Found& f = **found;
  absl::Status owned = CheckOwned(s, f, workspace_id);
  if (!owned.ok()) return InspectionError(owned.message());
  std::string why = NotUsable(f);
  if (!why.empty()) return InspectionError(why);
  return InspectionState(workspace_id, f.state == "paused" ? Lifecycle::kPaused : Lifecycle::kReady,
                         PlacementCwd(f), LifecycleEnvironment(f));
}

std::vector<std::pair<std::string, std::string>> LifecycleEnvironment(const Found& found) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!found.tool_directories.empty())
    out.emplace_back("PATH", SearchPath(found.tool_directories, {}));
  if (!found.kept.empty()) out.emplace_back("PASEO_SANDBOX_KEPT", absl::StrJoin(found.kept, ":"));
  return out;
}

absl::StatusOr<std::string> Pause(Session& s, const std::string& workspace_id) {
  auto found = FindOwned(s, workspace_id);
  if (!found.ok()) return found.status();
  absl::Status st = Rpc([&] { found->sandbox.pauseRequest().send().wait(s.wait_scope); });
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("pause: ", st.message()));
  return OkResponse();
}

absl::StatusOr<std::string> Resume(Session& s, const std::string& workspace_id) {
  auto found = FindOwned(s, workspace_id);
  if (!found.ok()) return found.status();
  absl::Status st = Rpc([&] { found->sandbox.resumeRequest().send().wait(s.wait_scope); });
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("resume: ", st.message()));
  return StateResponse(workspace_id, Lifecycle::kReady, PlacementCwd(*found), std::nullopt);
}

absl::StatusOr<std::string> Destroy(Session& s, const std::string& workspace_id) {
  auto found = FindWorkspace(s, workspace_id);
  if (!found.ok()) return found.status();
  if (!found->has_value()) return OkResponse();
  absl::Status owned = CheckOwned(s, **found, workspace_id);
  if (!owned.ok()) return owned;
  absl::Status st = Rpc([&] {
    auto req = (*found)->sandbox.deleteRequest();
    req.setForce(true);
    req.send().wait(s.wait_scope);
  });
  // Deleted meanwhile by a concurrent destroy: the outcome asked for.
  if (absl::IsNotFound(st)) return OkResponse();
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("destroy: ", st.message()));
  return OkResponse();
}

absl::StatusOr<std::string> Reconcile(Session& s, const LifecycleRequest& request) {
  if (!request.workspace_ids) {
    return absl::InvalidArgumentError(
        "reconcile: the request has no workspaceIds (refusing to treat that as an empty list)");
  }
  const auto& known = *request.workspace_ids;
  auto is_known = [&](const std::string& id) {
    return std::find(known.begin(), known.end(), id) != known.end();
  };
  struct Entry {
    std::string id, workspace, instance;
  };
  std::vector<Entry> ours_unknown;
  std::vector<std::string> foreign;
  absl::Status st = Rpc([&] {
    auto list = s.supervisor.listSandboxesRequest().send().wait(s.wait_scope);
    for (auto info : list.getSandboxes()) {
      if (info.getDeploymentId() != s.deployment) continue;
      if (!absl::StartsWith(info.getKey().cStr(), kKeyPrefix)) continue;
      std::string workspace = info.getKey().cStr() + std::string(kKeyPrefix).size();
      std::string instance;
      for (auto label : info.getLabels()) {
        if (label.getKey() == kInstanceLabel) instance = label.getValue();
      }
      if (is_known(workspace)) {
        if (instance != s.instance) foreign.push_back(workspace);
      } else if (instance == s.instance) {
        ours_unknown.push_back({info.getId(), workspace, instance});
      }
    }
  });
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("reconcile: ", st.message()));
  if (!foreign.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "reconcile: workspaces ", absl::StrJoin(foreign, ", "),
        " are owned by another Paseo instance; nothing was changed"));
  }
  for (const auto& e : ours_unknown) {
    absl::Status del = Rpc([&] {
      auto get = s.supervisor.getSandboxRequest();
      get.setId(e.id);
      auto req = get.send().getSandbox().deleteRequest();
      req.setForce(true);
      req.send().wait(s.wait_scope);
    });
    if (!del.ok() && !absl::IsNotFound(del)) {
      return absl::Status(del.code(), absl::StrCat("reconcile: removing the orphaned workspace ",
                                                   e.workspace, ": ", del.message()));
    }
  }
  return OkResponse();
}

kj::Promise<void> SignalWhenStarted(api::Process::Client process, int signal, kj::Timer& timer,
                                   kj::TimePoint deadline) {
  auto req = process.signalRequest();
  req.setSignal(signal);
  return req.send().ignoreResult().catch_(
      [process, signal, &timer, deadline](kj::Exception&& e) mutable -> kj::Promise<void> {
        // A disconnect is "internal" here, never retried: the caller reconnects or fails.
        if (!absl::IsUnavailable(StatusFromException(e)) || timer.now() >= deadline) return kj::mv(e);
        return timer.afterDelay(20 * kj::MILLISECONDS)
            .then([process = kj::mv(process), signal, &timer, deadline]() mutable {
              return SignalWhenStarted(kj::mv(process), signal, timer, deadline);
            });
      });
}

absl::Status SignalExec(Session& s, const std::string& workspace_id, const std::string& exec_id,
                        const std::string& signal) {
  int number = SignalNumber(signal);
  if (number == 0) return absl::InvalidArgumentError(absl::StrCat("unknown signal ", signal));
  auto found = FindOwned(s, workspace_id);
  if (!found.ok()) return found.status();
  bool done = false;
  std::optional<api::Process::Client> process;
  absl::Status st = Rpc([&] {
    auto req = found->sandbox.findProcessRequest();
    req.setKey(exec_id);
    auto res = req.send().wait(s.wait_scope);
    if (res.getReleased() || FromCapnp(res.getInfo().getStatus()).ended()) {
      done = true;
      return;
    }
    process = res.getProcess();
  });
  if (absl::IsNotFound(st)) {
    return absl::NotFoundError(absl::StrCat("workspace ", workspace_id, " has no execution ",
                                            exec_id, " (not started yet, or never)"));
  }
  if (!st.ok()) return st;
  if (done) return absl::OkStatus();
  bool gone = false;
  st = Rpc([&] {
    kj::TimePoint deadline = s.timer.now() + s.signal_wait_ms * kj::MILLISECONDS;
    // A process that ends between findProcess and signal makes signal fail; wait() decides.
    kj::Promise<void> sent = SignalWhenStarted(*process, number, s.timer, deadline)
                                 .catch_([](kj::Exception&&) {});
    auto waited = sent.then([&]() { return process->waitRequest().send().ignoreResult(); })
                      .then([&]() { gone = true; });
    waited.exclusiveJoin(s.timer.afterDelay(s.signal_wait_ms * kj::MILLISECONDS))
        .wait(s.wait_scope);
  });
  if (!st.ok()) return st;
  if (!gone) {
    return absl::DeadlineExceededError(absl::StrCat("execution ", exec_id, " still runs ",
                                                    s.signal_wait_ms, " ms after ", signal));
  }
  return absl::OkStatus();
}

}  // namespace paseo::runtime
