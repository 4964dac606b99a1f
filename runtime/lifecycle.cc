// See lifecycle.h.
#include "runtime/lifecycle.h"

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
  Found f{kj::mv(sandbox), info.getId(), info.getState(), info.getStateReason(), {}, {}, {}};
  for (auto label : info.getLabels()) f.labels[label.getKey()] = label.getValue();
  for (auto t : info.getPaths().getToolDirectories()) f.tool_directories.emplace_back(t.cStr());
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

absl::StatusOr<std::string> CreateResponse(const std::string& workspace_id, const Found& found,
                                           bool fresh) {
  std::string why = NotUsable(found);
  if (!why.empty()) return absl::FailedPreconditionError(why);
  Lifecycle lifecycle = found.state == "paused" ? Lifecycle::kPaused : Lifecycle::kReady;
  return StateResponse(workspace_id, lifecycle, kWorkspaceDestination, fresh);
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
  if (std::holds_alternative<GitSource>(input.source)) {
    return absl::UnimplementedError(
        "git sources need a sandbox network; not supported yet (use a directory source)");
  }
  const std::string& path = std::get<DirectorySource>(input.source).path;
  for (auto [key, value] : {std::pair<const char*, const std::string&>{kInstanceLabel, s.instance},
                            {kWorkspaceLabel, workspace_id},
                            {kSourceLabel, path}}) {
    absl::Status st = CheckLabelValue(key, value);
    if (!st.ok()) return st;
  }
  auto key = SandboxKey(workspace_id);
  if (!key.ok()) return key.status();

  // Idempotence: an existing sandbox is adopted only if it is ours and over the same source.
  auto adopt = [&](const Found& found, bool fresh) -> absl::StatusOr<std::string> {
    absl::Status owned = CheckOwned(s, found, workspace_id);
    if (!owned.ok()) return owned;
    if (Label(found, kSourceLabel) != path) {
      return absl::FailedPreconditionError(absl::StrCat(
          "workspace ", workspace_id, " already exists over another source (",
          Label(found, kSourceLabel), "); destroy it first"));
    }
    return CreateResponse(workspace_id, found, fresh);
  };
  auto existing = FindWorkspace(s, workspace_id);
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return adopt(**existing, false);

  std::optional<Found> made;
  bool created = false;
  absl::Status st = Rpc([&] {
    auto req = s.supervisor.createSandboxRequest();
    auto spec = req.initSpec();
    spec.setDeploymentId(s.deployment);
    if (s.options.profile) spec.setProfile(*s.options.profile);
    spec.setKey(*key);
    auto ws = spec.initWorkspaces(1)[0];
    ws.setPath(path);
    ws.setDestination(kWorkspaceDestination);
    ws.setMode(api::AccessMode::READ_WRITE);
    auto labels = spec.initLabels(3);
    labels[0].setKey(kInstanceLabel);
    labels[0].setValue(s.instance);
    labels[1].setKey(kWorkspaceLabel);
    labels[1].setValue(workspace_id);
    labels[2].setKey(kSourceLabel);
    labels[2].setValue(path);
    auto creds = spec.initCredentials(static_cast<unsigned>(s.options.credentials.size()));
    for (unsigned i = 0; i < s.options.credentials.size(); ++i)
      creds.set(i, s.options.credentials[i]);
    auto res = req.send().wait(s.wait_scope);
    created = res.getCreated();
    made = ToFound(res.getSandbox(), res.getInfo());
  });
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat("create: ", st.message()));
  // Not created: a concurrent create with the same key won; adopt it like any existing one.
  if (!created) return adopt(*made, false);
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
                         kWorkspaceDestination, LifecycleEnvironment(f));
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
  return StateResponse(workspace_id, Lifecycle::kReady, kWorkspaceDestination, std::nullopt);
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
