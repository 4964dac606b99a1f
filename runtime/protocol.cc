// See protocol.h. The field sets follow the contract's zod schemas
// (packages/workspace-runtime-contract/src/index.ts); the output key order follows the byte
// examples (examples/v1.json), which is the order zod's parse gives JSON.stringify.
#include "runtime/protocol.h"

#include <csignal>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/json_writer.h"
#include "runtime/strict_json.h"

namespace paseo::runtime {

namespace {
int g_protocol_version = kOldestProtocolVersion;
}  // namespace

void UseProtocolVersion(int version) { g_protocol_version = version; }
int ProtocolVersion() { return g_protocol_version; }

namespace {

using capnp::JsonValue;

#define RETURN_IF_ERROR(expr)              \
  do {                                     \
    absl::Status _st = (expr);             \
    if (!_st.ok()) return _st;             \
  } while (0)
#define ASSIGN_OR_RETURN(lhs, expr)        \
  auto lhs##_or = (expr);                  \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

absl::Status Invalid(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::StatusOr<std::string> NonEmptyString(const StrictObject& obj, absl::string_view key) {
  ASSIGN_OR_RETURN(s, obj.String(key));
  if (s.empty()) return Invalid(obj.Path(key), "must not be empty");
  return s;
}

// The `kind` of a discriminated union member, checked against the kinds it may take.
absl::StatusOr<std::string> Kind(JsonValue::Reader v, const std::string& path,
                                 const std::vector<absl::string_view>& kinds,
                                 absl::string_view tag = "kind") {
  if (!v.isObject()) return Invalid(path, "expected an object");
  for (auto field : v.getObject()) {
    if (absl::string_view(field.getName().cStr(), field.getName().size()) != tag) continue;
    if (!field.getValue().isString())
      return Invalid(absl::StrCat(path, ".", tag), "expected a string");
    std::string kind = field.getValue().getString().cStr();
    for (auto k : kinds) {
      if (k == kind) return kind;
    }
    return Invalid(absl::StrCat(path, ".", tag), absl::StrCat("unknown value \"", kind, "\""));
  }
  return Invalid(absl::StrCat(path, ".", tag), "required");
}

absl::StatusOr<Options> ParseOptions(const StrictObject& parent) {
  ASSIGN_OR_RETURN(obj, parent.Object("options", {"socket", "deployment", "profile",
                                                  "credentials", "reconnectMs"}));
  Options options;
  ASSIGN_OR_RETURN(socket, obj.OptionalString("socket"));
  ASSIGN_OR_RETURN(deployment, obj.OptionalString("deployment"));
  ASSIGN_OR_RETURN(profile, obj.OptionalString("profile"));
  options.socket = socket;
  options.deployment = deployment;
  options.profile = profile;
  if (options.socket && options.socket->empty())
    return Invalid(obj.Path("socket"), "must not be empty");
  if (options.deployment && options.deployment->empty())
    return Invalid(obj.Path("deployment"), "must not be empty");
  if (obj.Has("credentials")) {
    ASSIGN_OR_RETURN(credentials, obj.StringArray("credentials"));
    options.credentials = std::move(credentials);
  }
  if (obj.Has("reconnectMs")) {
    ASSIGN_OR_RETURN(ms, obj.Int("reconnectMs", 0));
    if (ms > 3600 * 1000) return Invalid(obj.Path("reconnectMs"), "at most 3600000");
    options.reconnect_ms = ms;
  }
  return options;
}

absl::StatusOr<std::variant<DirectorySource, GitSource>> ParseSource(const StrictObject& project) {
  auto v = project.Get("source");
  std::string path = project.Path("source");
  if (!v) return Invalid(path, "required");
  ASSIGN_OR_RETURN(kind, Kind(*v, path, {"directory", "git"}));
  if (kind == "directory") {
    ASSIGN_OR_RETURN(obj, StrictObject::Make(*v, path, {"kind", "path"}));
    ASSIGN_OR_RETURN(dir, obj.String("path"));
    return DirectorySource{std::move(dir)};
  }
  ASSIGN_OR_RETURN(obj, StrictObject::Make(*v, path, {"kind", "url", "revision", "subdirectory"}));
  GitSource git;
  ASSIGN_OR_RETURN(url, obj.String("url"));
  ASSIGN_OR_RETURN(revision, obj.String("revision"));
  ASSIGN_OR_RETURN(subdirectory, obj.OptionalString("subdirectory"));
  git.url = std::move(url);
  git.revision = std::move(revision);
  git.subdirectory = std::move(subdirectory);
  return git;
}

// Every optional string member of `obj` named in `keys`.
absl::Status OptionalStrings(const StrictObject& obj, const std::vector<absl::string_view>& keys) {
  for (auto key : keys) RETURN_IF_ERROR(obj.OptionalString(key).status());
  return absl::OkStatus();
}
absl::Status RequiredStrings(const StrictObject& obj, const std::vector<absl::string_view>& keys) {
  for (auto key : keys) RETURN_IF_ERROR(obj.String(key).status());
  return absl::OkStatus();
}

absl::Status CheckResolvedWorktreeSource(JsonValue::Reader v, const std::string& path) {
  ASSIGN_OR_RETURN(kind, Kind(v, path, {"branch-off", "checkout-branch", "checkout-change-request",
                                        "checkout-github-pr"}));
  if (kind == "branch-off") {
    ASSIGN_OR_RETURN(obj, StrictObject::Make(v, path, {"kind", "baseBranch", "branchName"}));
    return RequiredStrings(obj, {"baseBranch", "branchName"});
  }
  if (kind == "checkout-branch") {
    ASSIGN_OR_RETURN(obj, StrictObject::Make(v, path, {"kind", "branchName"}));
    return RequiredStrings(obj, {"branchName"});
  }
  ASSIGN_OR_RETURN(obj, StrictObject::Make(
                            v, path,
                            {"kind", "forge", "changeRequestNumber", "githubPrNumber", "headRef",
                             "headRepositoryOwner", "baseRefName", "checkoutRefs",
                             "localBranchName", "pushRemoteUrl", "trackOriginHead"}));
  RETURN_IF_ERROR(RequiredStrings(obj, {"headRef", "baseRefName"}));
  RETURN_IF_ERROR(OptionalStrings(
      obj, {"forge", "headRepositoryOwner", "localBranchName", "pushRemoteUrl"}));
  RETURN_IF_ERROR(obj.OptionalNumber("changeRequestNumber").status());
  RETURN_IF_ERROR(obj.OptionalNumber("githubPrNumber").status());
  RETURN_IF_ERROR(obj.OptionalBool("trackOriginHead").status());
  if (auto refs = obj.Get("checkoutRefs")) {
    std::string refs_path = obj.Path("checkoutRefs");
    if (!refs->isArray()) return Invalid(refs_path, "expected an array");
    unsigned i = 0;
    for (auto ref : refs->getArray()) {
      ASSIGN_OR_RETURN(r, StrictObject::Make(ref, absl::StrCat(refs_path, "[", i++, "]"),
                                             {"remoteName", "remoteRef"}));
      RETURN_IF_ERROR(RequiredStrings(r, {"remoteRef"}));
      RETURN_IF_ERROR(OptionalStrings(r, {"remoteName"}));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckPlacement(const StrictObject& input) {
  auto v = input.Get("placement");
  std::string path = input.Path("placement");
  if (!v) return Invalid(path, "required");
  ASSIGN_OR_RETURN(kind, Kind(*v, path, {"existing", "branch", "checkout", "resolved-worktree"}));
  if (kind == "existing") {
    ASSIGN_OR_RETURN(obj, StrictObject::Make(*v, path, {"kind", "relativeCwd"}));
    RETURN_IF_ERROR(OptionalStrings(obj, {"relativeCwd"}));
  } else if (kind == "branch") {
    ASSIGN_OR_RETURN(obj, StrictObject::Make(*v, path, {"kind", "branchName", "baseRef",
                                                        "relativeCwd", "worktreeSlug"}));
    RETURN_IF_ERROR(RequiredStrings(obj, {"branchName", "baseRef"}));
    RETURN_IF_ERROR(OptionalStrings(obj, {"relativeCwd", "worktreeSlug"}));
  } else if (kind == "checkout") {
    ASSIGN_OR_RETURN(obj, StrictObject::Make(*v, path,
                                             {"kind", "ref", "relativeCwd", "worktreeSlug"}));
    RETURN_IF_ERROR(RequiredStrings(obj, {"ref"}));
    RETURN_IF_ERROR(OptionalStrings(obj, {"relativeCwd", "worktreeSlug"}));
  } else {
    ASSIGN_OR_RETURN(obj, StrictObject::Make(*v, path, {"kind", "source", "worktreeSlug",
                                                        "relativeCwd"}));
    RETURN_IF_ERROR(RequiredStrings(obj, {"worktreeSlug"}));
    RETURN_IF_ERROR(OptionalStrings(obj, {"relativeCwd"}));
    auto source = obj.Get("source");
    if (!source) return Invalid(obj.Path("source"), "required");
    RETURN_IF_ERROR(CheckResolvedWorktreeSource(*source, obj.Path("source")));
  }
  return kind;
}

absl::StatusOr<CreateInput> ParseCreateInput(const StrictObject& request) {
  ASSIGN_OR_RETURN(obj, request.Object("input", {"workspaceId", "project", "placement", "purpose",
                                                 "markFirstAgentBranchAutoName",
                                                 "seedPaseoConfigFrom"}));
  CreateInput input;
  ASSIGN_OR_RETURN(workspace_id, obj.String("workspaceId"));
  input.workspace_id = std::move(workspace_id);
  ASSIGN_OR_RETURN(project, obj.Object("project", {"projectId", "source"}));
  ASSIGN_OR_RETURN(project_id, project.String("projectId"));
  input.project_id = std::move(project_id);
  ASSIGN_OR_RETURN(source, ParseSource(project));
  input.source = std::move(source);
  ASSIGN_OR_RETURN(placement, CheckPlacement(obj));
  input.placement_kind = std::move(placement);
  ASSIGN_OR_RETURN(purpose, obj.OptionalString("purpose"));
  if (purpose) {
    if (*purpose != "discovery")
      return Invalid(obj.Path("purpose"), absl::StrCat("unknown value \"", *purpose, "\""));
    input.discovery = true;
  }
  RETURN_IF_ERROR(obj.OptionalBool("markFirstAgentBranchAutoName").status());
  RETURN_IF_ERROR(obj.OptionalString("seedPaseoConfigFrom").status());
  return input;
}

// Parses `text` as one object of `allowed` keys with this process's protocolVersion (checked first, so a
// newer Paseo gets the version diagnostic rather than one about a field it added).
absl::StatusOr<StrictObject> ParseMessage(ParsedJson& parsed, absl::string_view path,
                                          const std::vector<absl::string_view>& allowed) {
  auto root = parsed.root();
  if (root.isObject()) {
    for (auto field : root.getObject()) {
      if (field.getName() != "protocolVersion") continue;
      auto v = field.getValue();
      if (!v.isNumber() || v.getNumber() != ProtocolVersion())
        return UnsupportedVersion(absl::StrCat(path, ".protocolVersion"), Describe(v),
                                  ProtocolVersion());
    }
  }
  ASSIGN_OR_RETURN(obj, StrictObject::Make(root, std::string(path), allowed));
  RETURN_IF_ERROR(obj.ProtocolVersion(ProtocolVersion()));
  return obj;
}

absl::StatusOr<std::string> ParsePurpose(const StrictObject& envelope) {
  auto v = envelope.Get("purpose");
  std::string path = envelope.Path("purpose");
  if (!v) return Invalid(path, "required");
  ASSIGN_OR_RETURN(kind, Kind(*v, path, {"agent", "terminal", "git", "discovery",
                                         "workspace-helper", "workspace-script", "setup",
                                         "archive"}));
  RETURN_IF_ERROR(StrictObject::Make(*v, path, {"kind"}).status());
  return kind;
}

absl::StatusOr<std::optional<PtyStdio>> ParseStdio(const StrictObject& envelope) {
  auto v = envelope.Get("stdio");
  std::string path = envelope.Path("stdio");
  if (!v) return Invalid(path, "required");
  ASSIGN_OR_RETURN(kind, Kind(*v, path, {"pipes", "pty"}));
  if (kind == "pipes") {
    RETURN_IF_ERROR(StrictObject::Make(*v, path, {"kind"}).status());
    return std::optional<PtyStdio>();
  }
  ASSIGN_OR_RETURN(obj, StrictObject::Make(*v, path, {"kind", "rows", "cols", "term"}));
  PtyStdio pty;
  ASSIGN_OR_RETURN(rows, obj.Int("rows", 1));
  ASSIGN_OR_RETURN(cols, obj.Int("cols", 1));
  ASSIGN_OR_RETURN(term, obj.OptionalString("term"));
  pty.rows = rows;
  pty.cols = cols;
  pty.term = std::move(term);
  return std::optional<PtyStdio>(std::move(pty));
}

}  // namespace

absl::StatusOr<LifecycleRequest> ParseLifecycleRequest(absl::string_view text) {
  ASSIGN_OR_RETURN(parsed, ParsedJson::Parse(text));
  ASSIGN_OR_RETURN(obj, ParseMessage(*parsed, "request", {"protocolVersion", "runtimeInstanceId",
                                                          "input", "options", "workspaceIds"}));
  LifecycleRequest request;
  ASSIGN_OR_RETURN(instance, NonEmptyString(obj, "runtimeInstanceId"));
  request.runtime_instance_id = std::move(instance);
  if (obj.Has("input")) {
    ASSIGN_OR_RETURN(input, ParseCreateInput(obj));
    request.input = std::move(input);
  }
  ASSIGN_OR_RETURN(options, ParseOptions(obj));
  request.options = std::move(options);
  if (obj.Has("workspaceIds")) {
    ASSIGN_OR_RETURN(ids, obj.StringArray("workspaceIds"));
    request.workspace_ids = std::move(ids);
  }
  return request;
}

absl::StatusOr<SpawnEnvelope> ParseSpawnEnvelope(absl::string_view text) {
  ASSIGN_OR_RETURN(parsed, ParsedJson::Parse(text));
  ASSIGN_OR_RETURN(obj, ParseMessage(*parsed, "spawn",
                                     {"type", "protocolVersion", "runtimeInstanceId", "argv",
                                      "cwd", "env", "purpose", "options", "execId", "stdio"}));
  ASSIGN_OR_RETURN(type, obj.String("type"));
  if (type != "spawn")
    return Invalid(obj.Path("type"), absl::StrCat("expected \"spawn\", got \"", type, "\""));
  SpawnEnvelope env;
  ASSIGN_OR_RETURN(instance, NonEmptyString(obj, "runtimeInstanceId"));
  env.runtime_instance_id = std::move(instance);
  ASSIGN_OR_RETURN(argv, obj.StringArray("argv"));
  if (argv.empty()) return Invalid(obj.Path("argv"), "must not be empty");
  env.argv = std::move(argv);
  ASSIGN_OR_RETURN(cwd, obj.OptionalString("cwd"));
  env.cwd = std::move(cwd);
  ASSIGN_OR_RETURN(vars, obj.StringMap("env"));
  for (const auto& [name, value] : vars) {
    // A name with "=" would be split differently inside the sandbox; an empty one is no name.
    if (name.empty() || name.find('=') != std::string::npos)
      return Invalid(obj.Path("env"), absl::StrCat("invalid variable name \"", name, "\""));
  }
  env.env = std::move(vars);
  ASSIGN_OR_RETURN(purpose, ParsePurpose(obj));
  env.purpose = std::move(purpose);
  ASSIGN_OR_RETURN(options, ParseOptions(obj));
  env.options = std::move(options);
  ASSIGN_OR_RETURN(exec_id, NonEmptyString(obj, "execId"));
  env.exec_id = std::move(exec_id);
  ASSIGN_OR_RETURN(pty, ParseStdio(obj));
  env.pty = std::move(pty);
  return env;
}

absl::StatusOr<Control> ParseControl(absl::string_view text) {
  ASSIGN_OR_RETURN(parsed, ParsedJson::Parse(text));
  ASSIGN_OR_RETURN(type, Kind(parsed->root(), "control", {"resize", "signal", "spawn"}, "type"));
  if (type == "spawn") return Invalid("control.type", "a second spawn envelope");
  if (type == "resize") {
    ASSIGN_OR_RETURN(obj, ParseMessage(*parsed, "resize",
                                       {"type", "protocolVersion", "id", "rows", "cols"}));
    ResizeControl resize;
    ASSIGN_OR_RETURN(id, obj.Int("id", 0));
    ASSIGN_OR_RETURN(rows, obj.Int("rows", 1));
    ASSIGN_OR_RETURN(cols, obj.Int("cols", 1));
    resize.id = id;
    resize.rows = rows;
    resize.cols = cols;
    return resize;
  }
  ASSIGN_OR_RETURN(obj, ParseMessage(*parsed, "signal", {"type", "protocolVersion", "signal"}));
  ASSIGN_OR_RETURN(name, obj.String("signal"));
  if (SignalNumber(name) == 0) return Invalid(obj.Path("signal"), absl::StrCat("unknown signal \"", name, "\""));
  return SignalControl{std::move(name)};
}

namespace {
struct SignalEntry {
  const char* name;
  int number;
};
// Linux's standard signals under the names Node uses (os.constants.signals).
constexpr SignalEntry kSignals[] = {
    {"SIGHUP", SIGHUP},   {"SIGINT", SIGINT},       {"SIGQUIT", SIGQUIT}, {"SIGILL", SIGILL},
    {"SIGTRAP", SIGTRAP}, {"SIGABRT", SIGABRT},     {"SIGIOT", SIGIOT},   {"SIGBUS", SIGBUS},
    {"SIGFPE", SIGFPE},   {"SIGKILL", SIGKILL},     {"SIGUSR1", SIGUSR1}, {"SIGSEGV", SIGSEGV},
    {"SIGUSR2", SIGUSR2}, {"SIGPIPE", SIGPIPE},     {"SIGALRM", SIGALRM}, {"SIGTERM", SIGTERM},
    {"SIGCHLD", SIGCHLD}, {"SIGSTKFLT", SIGSTKFLT}, {"SIGCONT", SIGCONT}, {"SIGSTOP", SIGSTOP},
    {"SIGTSTP", SIGTSTP}, {"SIGTTIN", SIGTTIN},     {"SIGTTOU", SIGTTOU}, {"SIGURG", SIGURG},
    {"SIGXCPU", SIGXCPU}, {"SIGXFSZ", SIGXFSZ},     {"SIGVTALRM", SIGVTALRM},
    {"SIGPROF", SIGPROF}, {"SIGWINCH", SIGWINCH},   {"SIGIO", SIGIO},     {"SIGPOLL", SIGPOLL},
    {"SIGPWR", SIGPWR},   {"SIGSYS", SIGSYS},
};
}  // namespace

int SignalNumber(absl::string_view name) {
  for (const auto& s : kSignals) {
    if (name == s.name) return s.number;
  }
  return 0;
}

std::string SignalName(int number) {
  for (const auto& s : kSignals) {
    // SIGIOT and SIGPOLL are aliases; Node reports the first name.
    if (s.number == number) return s.name;
  }
  return "";
}

// ------------------------------------------------------------------ output

namespace {

std::string Line(JsonWriter& w) { return w.Take() + "\n"; }

void Header(JsonWriter& w, absl::string_view type) {
  w.BeginObject();
  w.Key("type");
  w.String(type);
  w.Key("protocolVersion");
  w.Int(ProtocolVersion());
}

// v2's placement may carry hostVisiblePath (where the daemon would run git on the host); a
// sandbox's workspace is not the daemon's to touch, so it is never written.
void State(JsonWriter& w, absl::string_view workspace_id, Lifecycle lifecycle,
           absl::string_view cwd,
           const std::vector<std::pair<std::string, std::string>>& lifecycle_environment = {}) {
  w.Key("state");
  w.BeginObject();
  w.Key("workspaceId");
  w.String(workspace_id);
  w.Key("lifecycle");
  w.String(lifecycle == Lifecycle::kReady ? "ready" : "paused");
  if (!lifecycle_environment.empty()) {
    w.Key("lifecycleEnvironment");
    w.BeginObject();
    for (const auto& [name, value] : lifecycle_environment) {
      w.Key(name);
      w.String(value);
    }
    w.EndObject();
  }
  w.EndObject();
  w.Key("placement");
  w.BeginObject();
  w.Key("cwd");
  w.String(cwd);
  w.EndObject();
}

std::string Inspection(absl::string_view status,
                       const std::function<void(JsonWriter&)>& rest = nullptr) {
  JsonWriter w;
  Header(w, "inspection");
  w.Key("inspection");
  w.BeginObject();
  w.Key("status");
  w.String(status);
  if (rest) rest(w);
  w.EndObject();
  w.EndObject();
  return Line(w);
}

std::string Simple(absl::string_view type) {
  JsonWriter w;
  Header(w, type);
  w.EndObject();
  return Line(w);
}

}  // namespace

std::string DescribeResponse() {
  JsonWriter w;
  w.BeginObject();
  w.Key("protocolVersion");
  w.Int(ProtocolVersion());
  w.Key("modes");
  w.StringArray({"pipes", "pty"});
  w.Key("reconcile");
  w.Bool(true);
  if (ProtocolVersion() >= 2) {
    // The daemon refuses a runtime that needs authentication it does not have; ours rests on
    // the socket's SO_PEERCRED, not on anything the daemon presents.
    w.Key("requirements");
    w.BeginObject();
    w.Key("daemonAuthentication");
    w.Bool(false);
    w.EndObject();
  }
  w.EndObject();
  return Line(w);
}

std::string StateResponse(absl::string_view workspace_id, Lifecycle lifecycle,
                          absl::string_view cwd, std::optional<bool> materialized_fresh_content) {
  JsonWriter w;
  Header(w, "state");
  State(w, workspace_id, lifecycle, cwd);
  if (materialized_fresh_content) {
    w.Key("materializedFreshContent");
    w.Bool(*materialized_fresh_content);
  }
  w.EndObject();
  return Line(w);
}

std::string InspectionMissing() { return Inspection("missing"); }

std::string InspectionState(absl::string_view workspace_id, Lifecycle lifecycle,
                            absl::string_view cwd,
                            const std::vector<std::pair<std::string, std::string>>&
                                lifecycle_environment) {
  return Inspection(lifecycle == Lifecycle::kReady ? "ready" : "paused", [&](JsonWriter& w) {
    State(w, workspace_id, lifecycle, cwd, lifecycle_environment);
  });
}

std::string InspectionError(absl::string_view message) {
  return Inspection("error", [&](JsonWriter& w) {
    w.Key("message");
    w.String(message);
  });
}

std::string OkResponse() { return Simple("ok"); }
std::string StartedEvent() { return Simple("started"); }
std::string EofEvent() { return Simple("eof"); }

std::string ResizedEvent(int64_t id) {
  JsonWriter w;
  Header(w, "resized");
  w.Key("id");
  w.Int(id);
  w.EndObject();
  return Line(w);
}

std::string ExitEvent(std::optional<int> code, std::optional<std::string> signal) {
  JsonWriter w;
  Header(w, "exit");
  w.Key("code");
  if (code) w.Int(*code); else w.Null();
  w.Key("signal");
  if (signal) w.String(*signal); else w.Null();
  w.EndObject();
  return Line(w);
}

std::string ErrorEvent(absl::string_view message) {
  JsonWriter w;
  Header(w, "error");
  w.Key("message");
  w.String(message);
  w.EndObject();
  return Line(w);
}

}  // namespace paseo::runtime
