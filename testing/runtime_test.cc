// Root smoke suite for paseo-sandbox-runtime (runtime/): the real binary, run the way Paseo's
// daemon runs it (a lifecycle request on stdin and one response line on stdout; exec with the
// spawn envelope on fd 3 and events on fd 4), against the real privhelper, broker and runsc.
// It pins the basics end to end; the contract in full is //testing:conformance_test's.
//
// The service has its own deployment `paseo` (added before it starts): clients uid 0 (this
// process), agents 4242, workspace root base/ws-paseo, and a tool root base/paseo-tools that its
// profile mounts at /opt/paseo/bin, holding a fake `paseo-workspace-helper`.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spawn.h"
#include "gtest/gtest.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

constexpr uid_t kAgent = 4242;
constexpr char kInstance[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
constexpr char kOtherInstance[] = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
constexpr char kStarted[] = R"({"type":"started","protocolVersion":1})" "\n";
constexpr char kEof[] = R"({"type":"eof","protocolVersion":1})" "\n";

Service* g_service = nullptr;

void LayOut(const std::string& base) {
  // The workspace root and the project Paseo names as its directory source, beneath it. The
  // client (root) reaches them through group 0: privhelper/peer_access.h judges root like any uid.
  for (const char* d : {"/ws-paseo", "/ws-paseo/proj", "/ws-paseo/proj/sub"}) {
    std::string dir = base + d;
    Check(mkdir(dir.c_str(), 0775) == 0 && chown(dir.c_str(), kAgent, 0) == 0 &&
              chmod(dir.c_str(), 0775) == 0,
          "mkdir " + dir);
  }
  Check(symlink("/etc", (base + "/ws-paseo/proj/esc").c_str()) == 0, "symlink esc");
  // Paseo's helper, as an operator installs it: in a tool root the deployment registers.
  Check(mkdir((base + "/paseo-tools").c_str(), 0755) == 0, "mkdir paseo-tools");
  WriteText(base + "/paseo-tools/paseo-workspace-helper",
            "#!/bin/sh\necho \"workspace-helper $0 $* in $(pwd)\"\n");
  Check(chmod((base + "/paseo-tools/paseo-workspace-helper").c_str(), 0755) == 0, "chmod helper");
  WriteText(base + "/etc/profiles/paseo.json",
            R"({"name": "paseo", "tools": [{"name": "paseo", "destination": "/opt/paseo/bin"}]})");
  WriteText(base + "/etc/deployments/paseo.json",
            absl::StrCat(R"({"id": "paseo", "allowedUids": [0], "profiles": ["paseo"],
                "runAs": {"uid": 4242, "gid": 4242},
                "workspaceRoots": [{"hostPath": ")", base, R"(/ws-paseo"}],
                "toolRoots": [{"name": "paseo", "hostPath": ")", base, R"(/paseo-tools"}]})"));
}

std::string Options() {
  return absl::StrCat(R"({"socket":")", g_service->socket(), R"(","deployment":"paseo"})");
}

std::string Request(const std::string& instance = kInstance, const std::string& input = "") {
  return absl::StrCat(R"({"protocolVersion":1,"runtimeInstanceId":")", instance, "\"",
                      input.empty() ? "" : ",\"input\":" + input, ",\"options\":", Options(),
                      "}\n");
}

std::string CreateRequest(const std::string& workspace_id, const std::string& instance = kInstance) {
  return Request(instance, absl::StrCat(R"({"workspaceId":")", workspace_id,
                                        R"(","project":{"projectId":"p","source":{"kind":"directory","path":")",
                                        g_service->base(), R"(/ws-paseo/proj"}},"placement":{"kind":"existing"}})"));
}

std::string Quoted(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) absl::StrAppend(&out, i ? "," : "", "\"", items[i], "\"");
  return out + "]";
}

std::string Envelope(const std::string& exec_id, const std::vector<std::string>& argv,
                     const std::string& stdio = R"({"kind":"pipes"})", const std::string& cwd = "") {
  return absl::StrCat(R"({"type":"spawn","protocolVersion":1,"runtimeInstanceId":")", kInstance,
                      R"(","argv":)", Quoted(argv), cwd.empty() ? "" : ",\"cwd\":\"" + cwd + "\"",
                      R"(,"env":{"PATH":"/usr/bin:/bin"},"purpose":{"kind":"agent"},"options":)",
                      Options(), R"(,"execId":")", exec_id, R"(","stdio":)", stdio, "}\n");
}

std::string Runtime() { return Runfile("runtime/paseo-sandbox-runtime"); }

struct Pipe {
  int r = -1, w = -1;
  Pipe() { Check(pipe2(&r, O_CLOEXEC) == 0, "pipe2"); }
  ~Pipe() {
    Close(r);
    Close(w);
  }
  static void Close(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
};

// Reads what `fd` has until EOF or `ms` pass.
std::string ReadFor(int fd, int ms) {
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return out;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// One newline-terminated line of `fd` (waiting at most `ms`); "" at EOF or the deadline.
std::string ReadLineFor(int fd, int ms) {
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (line.empty() || line.back() != '\n') {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, left) <= 0) return "";
    char c;
    if (read(fd, &c, 1) != 1) return "";
    line.push_back(c);
  }
  return line;
}

// An operation of the runtime: its wait status, stdout and stderr.
struct Ran {
  int status = -1;
  std::string out, err;
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

Ran RunOp(const std::vector<std::string>& args, const std::string& stdin_text = "") {
  Pipe in, out, err;
  SpawnRequest req;
  req.path = Runtime();
  req.argv = {req.path};
  req.argv.insert(req.argv.end(), args.begin(), args.end());
  req.fds = {{0, in.r}, {1, out.w}, {2, err.w}};
  auto pid = Spawn(req);
  Check(pid.ok(), "spawn the runtime");
  Pipe::Close(in.r);
  Pipe::Close(out.w);
  Pipe::Close(err.w);
  Check(write(in.w, stdin_text.data(), stdin_text.size()) == static_cast<ssize_t>(stdin_text.size()),
        "write the request");
  Pipe::Close(in.w);
  Ran ran;
  ran.out = ReadFor(out.r, 60000);
  ran.err = ReadFor(err.r, 5000);
  EXPECT_TRUE(WaitPidWithin(*pid, 60, &ran.status)) << "the runtime hung: " << absl::StrJoin(args, " ");
  return ran;
}

// `paseo-sandbox-runtime exec`, spawned as Paseo's daemon spawns it: fds 0-4, with fd 3 and
// fd 4 pipes of this process.
class Exec {
 public:
  // `envelope` is written to fd 3 at once; for pipes fd 3 is then closed.
  Exec(const std::string& workspace_id, const std::string& envelope, bool keep_control = false) {
    SpawnRequest req;
    req.path = Runtime();
    req.argv = {req.path, "exec", "--workspace-id", workspace_id};
    req.fds = {{0, in_.r}, {1, out_.w}, {2, err_.w}, {3, control_.r}, {4, events_.w}};
    auto pid = Spawn(req);
    Check(pid.ok(), "spawn the runtime");
    pid_ = *pid;
    for (Pipe* p : {&in_, &control_}) Pipe::Close(p->r);
    for (Pipe* p : {&out_, &err_, &events_}) Pipe::Close(p->w);
    Control(envelope);
    if (!keep_control) Pipe::Close(control_.w);
  }
  ~Exec() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      WaitPid(pid_);
    }
  }

  void Stdin(const std::string& text) {
    ASSERT_EQ(write(in_.w, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  void CloseStdin() { Pipe::Close(in_.w); }
  void Control(const std::string& line) {
    Check(write(control_.w, line.data(), line.size()) == static_cast<ssize_t>(line.size()),
          "write fd 3");
  }
  void Kill(int sig) { ASSERT_EQ(kill(pid_, sig), 0); }
  std::string Event(int ms = 30000) { return ReadLineFor(events_.r, ms); }
  std::string Stdout(int ms = 30000) { return ReadFor(out_.r, ms); }
  std::string StdoutLine(int ms = 30000) { return ReadLineFor(out_.r, ms); }

  // Waits for the wrapper to end (closing what the test still holds); the rest of fd 4 and
  // its stderr are in events_rest() and stderr().
  int Wait() {
    Pipe::Close(in_.w);
    Pipe::Close(control_.w);
    events_rest_ = ReadFor(events_.r, 60000);
    stderr_ = ReadFor(err_.r, 5000);
    int status = -1;
    EXPECT_TRUE(WaitPidWithin(pid_, 60, &status)) << "the exec wrapper hung";
    pid_ = -1;
    return status;
  }
  const std::string& events_rest() const { return events_rest_; }
  const std::string& stderr() const { return stderr_; }

 private:
  Pipe in_, out_, err_, control_, events_;
  pid_t pid_ = -1;
  std::string events_rest_, stderr_;
};

std::string ExitCode(int code) {
  return absl::StrCat(R"({"type":"exit","protocolVersion":1,"code":)", code, R"(,"signal":null})" "\n");
}
std::string ExitSignal(const std::string& name) {
  return absl::StrCat(R"({"type":"exit","protocolVersion":1,"code":null,"signal":")", name, "\"}\n");
}
std::string Inspection(const std::string& workspace_id, const std::string& lifecycle) {
  return absl::StrCat(
      R"({"type":"inspection","protocolVersion":1,"inspection":{"status":")", lifecycle,
      R"(","state":{"workspaceId":")",
      workspace_id, R"(","lifecycle":")", lifecycle,
      // What the daemon merges over every workload's env: the profile's tool dir in front of
      // the default PATH, and what is kept (the workspace).
      R"(","lifecycleEnvironment":{"PATH":"/opt/paseo/bin:/usr/local/sbin:/usr/local/bin:)",
      R"(/usr/sbin:/usr/bin:/sbin:/bin","PASEO_SANDBOX_KEPT":"/workspace"}},)",
      R"("placement":{"cwd":"/workspace"}}})" "\n");
}
constexpr char kMissing[] = R"({"type":"inspection","protocolVersion":1,"inspection":{"status":"missing"}})" "\n";
constexpr char kOk[] = R"({"type":"ok","protocolVersion":1})" "\n";

class RuntimeTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_EQ(g_service->LeaksAfter(10), std::vector<std::string>{}); }
};

TEST_F(RuntimeTest, DescribeDeclaresPipesPtyAndReconcile) {
  Ran r = RunOp({"describe"});
  EXPECT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out, R"({"protocolVersion":1,"modes":["pipes","pty"],"reconcile":true})" "\n");
}

// The whole life of one workspace, in the order Paseo's daemon drives it.
TEST_F(RuntimeTest, AWorkspaceFromCreateToDestroy) {
  const std::string ws = "ws-life";
  Ran r = RunOp({"inspect", "--workspace-id", ws}, Request());
  EXPECT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out, kMissing);

  r = RunOp({"create", "--workspace-id", ws}, CreateRequest(ws));
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out, absl::StrCat(R"({"type":"state","protocolVersion":1,"state":{"workspaceId":")", ws,
                                R"(","lifecycle":"ready"},"placement":{"cwd":"/workspace"},"materializedFreshContent":true})" "\n"));
  // Idempotent: the same sandbox again, not fresh.
  r = RunOp({"create", "--workspace-id", ws}, CreateRequest(ws));
  EXPECT_EQ(r.code(), 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, R"("materializedFreshContent":false)")) << r.out;
  // Another Paseo instance's request is refused.
  r = RunOp({"create", "--workspace-id", ws}, CreateRequest(ws, kOtherInstance));
  EXPECT_EQ(r.code(), 1);
  EXPECT_TRUE(absl::StrContains(r.err, "another Paseo instance")) << r.err;

  r = RunOp({"inspect", "--workspace-id", ws}, Request());
  EXPECT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out, Inspection(ws, "ready"));

  {  // Pipes: stdout bytes, and exactly started, eof, exit 0.
    Exec e(ws, Envelope("e-echo", {"echo", "hello from the sandbox"}));
    int status = e.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << e.stderr();
    EXPECT_EQ(e.events_rest(), absl::StrCat(kStarted, kEof, ExitCode(0)));
    EXPECT_EQ(e.Stdout(1000), "hello from the sandbox\n");
  }
  {  // stdin passes through; its EOF ends cat.
    Exec e(ws, Envelope("e-cat", {"cat"}));
    EXPECT_EQ(e.Event(), kStarted);
    e.Stdin("line one\n");
    EXPECT_EQ(e.StdoutLine(), "line one\n");
    e.Stdin("line two\n");
    e.CloseStdin();
    int status = e.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << e.stderr();
    EXPECT_EQ(e.events_rest(), absl::StrCat(kEof, ExitCode(0)));
    EXPECT_EQ(e.Stdout(1000), "line two\n");
  }
  {  // An exit code is mirrored, stderr goes to fd 2, the cwd is workspace-relative.
    Exec e(ws, Envelope("e-exit3", {"sh", "-c", "pwd; echo oops >&2; exit 3"}, R"({"kind":"pipes"})",
                        "sub"));
    int status = e.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status << e.stderr();
    EXPECT_EQ(e.events_rest(), absl::StrCat(kStarted, kEof, ExitCode(3)));
    EXPECT_EQ(e.Stdout(1000), "/workspace/sub\n");
    EXPECT_TRUE(absl::StrContains(e.stderr(), "oops\n")) << e.stderr();
  }
  {  // Death by a signal is mirrored: the wrapper dies by the same signal.
    Exec e(ws, Envelope("e-kill", {"sh", "-c", "kill -TERM $$"}));
    int status = e.Wait();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status << e.stderr();
    EXPECT_EQ(e.events_rest(), absl::StrCat(kStarted, kEof, ExitSignal("SIGTERM")));
  }
  {  // A terminal: tty names a pts, a resize is applied and acknowledged.
    Exec e(ws, Envelope("e-pty", {"sh", "-c", "tty; read x; stty size"},
                        R"({"kind":"pty","rows":24,"cols":80,"term":"xterm"})"),
           /*keep_control=*/true);
    EXPECT_EQ(e.Event(), kStarted);
    std::string tty = e.StdoutLine();
    EXPECT_TRUE(absl::StartsWith(tty, "/dev/pts/")) << tty;
    e.Control(R"({"type":"resize","protocolVersion":1,"id":7,"rows":40,"cols":120})" "\n");
    EXPECT_EQ(e.Event(), R"({"type":"resized","protocolVersion":1,"id":7})" "\n");
    e.Stdin("go\n");
    std::string rest = e.Stdout(3000);
    EXPECT_TRUE(absl::StrContains(rest, "40 120")) << rest;
    int status = e.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << e.stderr();
    EXPECT_EQ(e.events_rest(), absl::StrCat(kEof, ExitCode(0)));
  }
  {  // signal: returns once the workload is gone; again, it is already gone.
    Exec e(ws, Envelope("e-sleep", {"sleep", "1000"}));
    EXPECT_EQ(e.Event(), kStarted);
    auto t0 = std::chrono::steady_clock::now();
    r = RunOp({"signal", "--workspace-id", ws, "--exec-id", "e-sleep", "--signal", "SIGTERM"},
              Request());
    EXPECT_EQ(r.code(), 0) << r.err;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    // Gone means the exec has ended: its wrapper reports it without waiting any longer.
    EXPECT_EQ(e.Event(2000), kEof);
    EXPECT_EQ(e.Event(2000), ExitSignal("SIGTERM"));
    r = RunOp({"signal", "--workspace-id", ws, "--exec-id", "e-sleep", "--signal", "SIGKILL"},
              Request());
    EXPECT_EQ(r.code(), 0) << r.err;
    int status = e.Wait();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status << e.stderr();
  }
  {  // Over pipes Paseo signals the wrapper itself: it forwards the signal and mirrors the death.
    Exec e(ws, Envelope("e-forward", {"sleep", "1000"}));
    EXPECT_EQ(e.Event(), kStarted);
    e.Kill(SIGINT);
    int status = e.Wait();
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << status << e.stderr();
    EXPECT_EQ(e.events_rest(), absl::StrCat(kEof, ExitSignal("SIGINT")));
  }
  {  // Paseo's helper is on the workload PATH by its bare name.
    Exec e(ws, Envelope("e-helper", {"paseo-workspace-helper", "watch"}));
    int status = e.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << e.stderr();
    EXPECT_EQ(e.Stdout(1000),
              "workspace-helper /opt/paseo/bin/paseo-workspace-helper watch in /workspace\n");
  }
  {  // A cwd that leaves the workspace starts nothing: an error event, exit 1.
    Exec e(ws, Envelope("e-escape", {"true"}, R"({"kind":"pipes"})", "esc"));
    int status = e.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
    EXPECT_TRUE(absl::StartsWith(e.events_rest(), R"({"type":"error","protocolVersion":1,"message":")"))
        << e.events_rest();
    EXPECT_TRUE(absl::StrContains(e.events_rest(), "leaves the workspace")) << e.events_rest();
  }

  r = RunOp({"pause", "--workspace-id", ws}, Request());
  EXPECT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out, kOk);
  r = RunOp({"inspect", "--workspace-id", ws}, Request());
  EXPECT_EQ(r.out, Inspection(ws, "paused"));
  r = RunOp({"resume", "--workspace-id", ws}, Request());
  EXPECT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out, absl::StrCat(R"({"type":"state","protocolVersion":1,"state":{"workspaceId":")", ws,
                                R"(","lifecycle":"ready"},"placement":{"cwd":"/workspace"}})" "\n"));
  r = RunOp({"inspect", "--workspace-id", ws}, Request());
  EXPECT_EQ(r.out, Inspection(ws, "ready"));

  r = RunOp({"destroy", "--workspace-id", ws}, Request());
  EXPECT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out, kOk);
  r = RunOp({"inspect", "--workspace-id", ws}, Request());
  EXPECT_EQ(r.out, kMissing);
  r = RunOp({"destroy", "--workspace-id", ws}, Request());  // idempotent
  EXPECT_EQ(r.code(), 0) << r.err;
}

// Paseo's daemon keeps its exec wrapper running while the supervisor restarts (an upgrade with
// onRestart "keep": privhelper and broker SIGKILLed, a new privhelper reattaches the sandbox's
// spawner): the wrapper reconnects, the command runs on and its real output and exit come.
TEST_F(RuntimeTest, AnExecRidesThroughAPrivhelperRestart) {
  const std::string ws = "ws-restart";
  Ran r = RunOp({"create", "--workspace-id", ws}, CreateRequest(ws));
  ASSERT_EQ(r.code(), 0) << r.err;
  {
    Exec e(ws, Envelope("e-restart", {"sh", "-c", "sleep 5; echo done"}));
    EXPECT_EQ(e.Event(), kStarted);
    g_service->Crash();
    g_service->Restart();
    int status = e.Wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << e.stderr();
    EXPECT_EQ(e.events_rest(), absl::StrCat(kEof, ExitCode(0)));
    EXPECT_EQ(e.Stdout(1000), "done\n");
    EXPECT_TRUE(absl::StrContains(e.stderr(), "reconnected")) << e.stderr();
  }
  r = RunOp({"destroy", "--workspace-id", ws}, Request());
  EXPECT_EQ(r.code(), 0) << r.err;
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  paseo::testing::ServiceOptions options;
  options.before_start = paseo::testing::LayOut;
  // An operator's upgrade setting: AnExecRidesThroughAPrivhelperRestart restarts the service.
  options.helper_json_extra = ", \"onRestart\": \"keep\"";
  return paseo::testing::RunTestsWithOwnService(argc, argv, options, &paseo::testing::g_service);
}
