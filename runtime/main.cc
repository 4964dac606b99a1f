// paseo-sandbox-runtime: Paseo's command workspace runtime (contract version 1 or 2) over the
// paseo-sandbox public API. One operation per run; see docs/paseo.md and command_line.h.
// Exit status: 0 done, 1 the operation failed (diagnostic on stderr), 2 usage error; `exec`
// mirrors its workload (its exit code, or death by the same signal).
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <kj/async-io.h>
#include <kj/async-unix.h>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "runtime/command_line.h"
#include "runtime/exec.h"
#include "runtime/lifecycle.h"
#include "runtime/protocol.h"
#include "runtime/strict_json.h"

namespace paseo::runtime {
namespace {

int Failed(absl::string_view what, const absl::Status& status) {
  fprintf(stderr, "paseo-sandbox-runtime %s: %s\n", std::string(what).c_str(),
          std::string(status.message()).c_str());
  return 1;
}

// All of stdin, at most kMaxMessageBytes plus its newline.
absl::StatusOr<std::string> ReadStdin() {
  std::string text;
  char buf[16384];
  for (;;) {
    ssize_t n = read(0, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(absl::StrCat("reading stdin: ", strerror(errno)));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxMessageBytes + 1)
      return absl::InvalidArgumentError("the request on stdin is too long");
  }
  if (text.empty() || text.back() != '\n')
    return absl::InvalidArgumentError("stdin must carry one JSON request ending in a newline");
  text.pop_back();
  if (text.find('\n') != std::string::npos)
    return absl::InvalidArgumentError("stdin must carry exactly one JSON request on one line");
  return text;
}

// Which request fields an operation takes: input only for create, workspaceIds only for
// reconcile.
absl::Status CheckRequestShape(Operation op, const LifecycleRequest& request) {
  if (request.input && op != Operation::kCreate)
    return absl::InvalidArgumentError("request.input is only for create");
  if (request.workspace_ids && op != Operation::kReconcile)
    return absl::InvalidArgumentError("request.workspaceIds is only for reconcile");
  return absl::OkStatus();
}

int RunLifecycle(const Invocation& inv, const char* name) {
  auto text = ReadStdin();
  if (!text.ok()) return Failed(name, text.status());
  auto request = ParseLifecycleRequest(*text);
  if (!request.ok()) return Failed(name, request.status());
  absl::Status shape = CheckRequestShape(inv.operation, *request);
  if (!shape.ok()) return Failed(name, shape);

  auto io = kj::setupAsyncIo();
  std::string socket = request->options.socket.value_or(client::DefaultSocketPath());
  absl::StatusOr<std::string> response;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() {
    client::Connection conn(io, socket);
    auto deployment = ResolveDeployment(io.waitScope, conn.supervisor(), request->options);
    if (!deployment.ok()) {
      response = deployment.status();
      return;
    }
    Session s{io.waitScope, io.provider->getTimer(), conn.supervisor(), *deployment,
              request->runtime_instance_id, request->options};
    switch (inv.operation) {
      case Operation::kCreate: response = Create(s, inv.workspace_id, *request); break;
      case Operation::kInspect: response = Inspect(s, inv.workspace_id); break;
      case Operation::kPause: response = Pause(s, inv.workspace_id); break;
      case Operation::kResume: response = Resume(s, inv.workspace_id); break;
      case Operation::kDestroy: response = Destroy(s, inv.workspace_id); break;
      case Operation::kReconcile: response = Reconcile(s, *request); break;
      case Operation::kSignal: {
        absl::Status st = SignalExec(s, inv.workspace_id, inv.exec_id, inv.signal);
        response = st.ok() ? absl::StatusOr<std::string>("") : st;
        break;
      }
      default: response = absl::InternalError("not a lifecycle operation");
    }
  });
  KJ_IF_MAYBE(e, error) { response = absl::UnavailableError(client::ErrorText(*e)); }
  if (!response.ok()) return Failed(name, response.status());
  fputs(response->c_str(), stdout);
  return fflush(stdout) == 0 ? 0 : 1;
}

// Ends this process the way the workload ended.
[[noreturn]] void Mirror(const ExecOutcome& outcome) {
  fflush(stdout);
  fflush(stderr);
  if (outcome.failed) _exit(1);
  if (outcome.signal != 0) {
    signal(outcome.signal, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, outcome.signal);
    sigprocmask(SIG_UNBLOCK, &set, nullptr);
    raise(outcome.signal);
    _exit(128 + outcome.signal);  // a signal that does not end a process by default
  }
  _exit(outcome.exit_code.value_or(1) & 0xff);
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto inv = ParseCommandLine(args);
  if (absl::IsUnimplemented(inv.status())) {
    fprintf(stderr, "paseo-sandbox-runtime: %s\n", std::string(inv.status().message()).c_str());
    return 1;
  }
  if (!inv.ok()) {
    fprintf(stderr, "paseo-sandbox-runtime: %s\n%s", std::string(inv.status().message()).c_str(),
            kUsage);
    return 2;
  }
  UseProtocolVersion(inv->protocol_version);
  switch (inv->operation) {
    case Operation::kManageDescribe:
      // The contract's "no operations": a non-zero exit (exit 0 with bad output is an error).
      fprintf(stderr, "paseo-sandbox-runtime manage-describe: no operations\n");
      return 1;
    case Operation::kDescribe:
      fputs(DescribeResponse().c_str(), stdout);
      return fflush(stdout) == 0 ? 0 : 1;
    case Operation::kExec: {
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) kj::UnixEventPort::captureSignal(sig);
      auto io = kj::setupAsyncIo();
      Mirror(RunExec(io, inv->workspace_id, client::DefaultSocketPath(), ExecFds{}));
    }
    default:
      return RunLifecycle(*inv, args[0].c_str());
  }
}

}  // namespace
}  // namespace paseo::runtime

int main(int argc, char** argv) { return paseo::runtime::Main(argc, argv); }
