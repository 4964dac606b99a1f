// The broker's registry: every sandbox and process it knows, their states, and the decisions
// about them -- who may see or use what (authorization.h), which state allows which operation.
// It owns its containers; the RPC servers ask it and never touch them. No I/O happens here.
//
//   Registry registry(policy);
//   ASSIGN_OR_RETURN(BegunCreate begun, registry.BeginCreate(peer, {"work", "", {}}, now));
//   if (begun.created) {
//     ... ask the privhelper to create begun.sandbox->id ...
//     registry.FinishCreate(begun.sandbox->id);    // or AbortCreate(...) if that failed
//   }
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "broker/authorization.h"
#include "broker/process_io.h"
#include "common/request_checks.h"
#include "schema/helper.capnp.h"

namespace paseo {

enum class SandboxState {
  kCreating,    // the privhelper is creating it; invisible to listings, nothing can start
  kRunning,     // usable
  kUnattached,  // adopted after a full restart (policy keep): usable, earlier output gone
  kPaused,      // frozen (runsc pause): nothing starts until resumed; resumes to resumes_to
  kOomKilled,   // the host's OOM killer stopped it: output readable, only delete is useful
  kStopped,     // it stopped by itself (its sentry or gofer exited): the same, with stop_reason
  kDeleting,    // the privhelper is deleting it
};

// The state's name in the public API (api.capnp SandboxInfo.state).
const char* StateName(SandboxState state);

struct SandboxRecord {
  std::string id;
  std::string deployment_id;
  std::string profile;
  uid_t owner_uid = 0;
  int64_t created_ms = 0;
  std::vector<std::pair<std::string, std::string>> labels;
  SandboxState state = SandboxState::kCreating;
  // The client's name for it (api.capnp SandboxSpec.key), unique in its deployment; empty: none.
  std::string key;
  // What a paused sandbox is again once resumed (kRunning or kUnattached).
  SandboxState resumes_to = SandboxState::kRunning;
  // Why it stopped by itself (kStopped, kOomKilled); kept through a delete that fails.
  std::string stop_reason;
  bool oom_killed = false;
  uint64_t buffer_bytes = 8 << 20;  // output kept per stream (the profile's outputBufferBytes)
  std::vector<std::string> process_order;
  std::map<std::string, kj::Own<ProcessRecord>> processes;
};

// What a client asks for when it creates a sandbox, as far as the registry decides it.
struct CreateRequest {
  std::string deployment_id;
  std::string profile;  // empty: the deployment's default
  std::vector<LabelView> labels;
  std::string key;  // empty: none
};

// What BeginCreate decided: a new sandbox in kCreating (`created`), or the existing one the
// request's key names (it may itself still be kCreating: the caller waits for that create).
struct BegunCreate {
  SandboxRecord* sandbox = nullptr;
  bool created = true;
};

class Registry {
 public:
  explicit Registry(helper::BrokerPolicy::Reader policy) : policy_(policy) {}

  // --- who may use what
  std::optional<helper::DeploymentPolicy::Reader> Deployment(const std::string& id) const;
  bool MayUseDeployment(const Peer& peer, const std::string& deployment_id) const;
  std::vector<std::string> DeploymentsFor(const Peer& peer) const;
  // permission-denied for a peer that may use no deployment at all.
  absl::Status RequireSomeDeployment(const Peer& peer) const;
  // The output kept per stream for a sandbox of `profile` in `deployment_id`.
  uint64_t BufferBytes(const std::string& deployment_id, const std::string& profile) const;

  // --- sandboxes
  // Checks the request and registers a new sandbox in kCreating with a fresh id, owned by
  // `peer`. The caller then has the privhelper create it and calls FinishCreate or AbortCreate.
  // With a key another sandbox of the deployment has, nothing is registered: that sandbox is
  // returned (created = false) if `peer`'s uid created it; already-exists if another uid did;
  // failed-precondition while it is being deleted (the key is free once it is gone).
  absl::StatusOr<BegunCreate> BeginCreate(const Peer& peer, const CreateRequest& request,
                                          int64_t now_ms);
  // kCreating -> kRunning. Null if it is gone.
  SandboxRecord* FinishCreate(const std::string& id);
  void AbortCreate(const std::string& id);

  // The sandbox if it exists and `peer` may use its deployment; not-found otherwise (the same
  // answer for "absent" and "not yours", so ids cannot be probed).
  absl::StatusOr<SandboxRecord*> Visible(const Peer& peer, const std::string& id);
  // The sandbox of `deployment_id` created with `key`; not-found if there is none, it is still
  // being created, or `peer` may not use the deployment.
  absl::StatusOr<SandboxRecord*> FindByKey(const Peer& peer, const std::string& deployment_id,
                                           const std::string& key);
  // Every sandbox `peer` may see, except those still being created, ordered by id.
  std::vector<const SandboxRecord*> List(const Peer& peer) const;

  // Marks a visible sandbox kDeleting and returns the state it had. Refused while it is being
  // created or deleted, and without `force` while a process still runs.
  absl::StatusOr<SandboxState> BeginDelete(const Peer& peer, const std::string& id, bool force);
  // The privhelper deleted it: every process still running ends as unknown, and it is gone.
  void FinishDelete(const std::string& id);
  // The privhelper could not delete it: it is usable again in its earlier state.
  void AbortDelete(const std::string& id, SandboxState before);

  // Whether the privhelper must be asked to pause (resume) a visible sandbox: false if it is
  // paused (not paused) already; failed-precondition in a state that cannot be paused (resumed).
  absl::StatusOr<bool> BeginPause(const Peer& peer, const std::string& id);
  absl::StatusOr<bool> BeginResume(const Peer& peer, const std::string& id);
  // The privhelper paused (resumed) it: a running or adopted sandbox becomes kPaused (a paused
  // one what it was before). Any other state -- it stopped or is being deleted meanwhile -- stays.
  void FinishPause(const std::string& id);
  void FinishResume(const std::string& id);

  // A process may start only in a running (or adopted) sandbox: failed-precondition otherwise,
  // with the state and, for a stopped one, why.

  absl::StatusOr<SandboxRecord*> ForNewProcess(const Peer& peer, const std::string& id);
  // Adds a started process to its sandbox; not-found if the sandbox went meanwhile.
  absl::Status AddProcess(kj::Own<ProcessRecord> process);
  absl::StatusOr<ProcessRecord*> VisibleProcess(const Peer& peer, const std::string& sandbox_id,
                                                const std::string& process_id);

  // The privhelper says the sandbox stopped by itself (`oom_killed`: the host's OOM killer did
  // it; a process of it ending oom-killed says the same). A running or adopted sandbox becomes
  // kStopped (kOomKilled); one being deleted stays kDeleting and comes back stopped if the delete
  // fails. The first reason stays, except that an OOM kill is the more specific one.
  void MarkStopped(const std::string& id, const std::string& reason, bool oom_killed);

  // Rebuilding after a broker restart: adds a sandbox as it is.
  SandboxRecord& Restore(std::unique_ptr<SandboxRecord> sandbox);
  SandboxRecord* Find(const std::string& id);
  size_t size() const { return sandboxes_.size(); }

 private:
  helper::BrokerPolicy::Reader policy_;
  std::map<std::string, std::unique_ptr<SandboxRecord>> sandboxes_;
  // (deployment, key) -> sandbox id, for every sandbox with a key, from BeginCreate until it is
  // gone (AbortCreate, FinishDelete).
  std::map<std::pair<std::string, std::string>, std::string> keys_;
  void Unindex(const SandboxRecord& sb);
};

}  // namespace paseo
