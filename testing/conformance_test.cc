// Runs the Paseo contract conformance suite (testing/conformance, Node's test runner) against
// the real paseo-sandbox-runtime, a real privhelper and broker (testing/harness.h) and runsc.
//
// The service gets one more deployment, "conformance": its client is uid 0 (this test, and the
// runtime it starts, as Paseo's daemon would), agents run as 4242, workspaces live under
// <base>/ws-conf, and its profile keeps a small output window (4 MiB), so the lossless test's
// 256 MiB cannot pass through without the writer waiting. onRestart is "keep": a Paseo
// workspace outlives a service restart.
//
// The Node side reaches the service through environment variables (testing/conformance/
// driver.mjs) and asks for restarts over a Unix socket this test serves while node runs:
// a line "restart-broker" (SIGKILL the broker; the privhelper starts a new one) or
// "restart-service" (SIGKILL the privhelper and with it the broker, then start a new one);
// the reply is "ok ..." once done. Node's test files run one at a time.
//
// The profile places a tool root at /opt/paseo/bin holding a stand-in paseo-workspace-helper (a
// shell script that prints "helper ARGS", its own path and its cwd), as docs/paseo.md tells an
// operator to install Paseo's.
//
// Arguments (bazel test --test_arg=...): --protocol=2 checks contract version 2 (the runtime
// runs with --protocol-version 2; //testing:conformance_v2_test sets it by its environment); the others choose test files
// (e.g. lossless.test.mjs); default all.
#include <chrono>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "testing/harness.h"
#include "testing/test_internet.h"

namespace paseo::testing {
namespace {

constexpr char kDeployment[] = "conformance";
constexpr char kProfile[] = "conformance";
constexpr char kToolDir[] = "/opt/paseo/bin";

// The agent rootfs (PASEO_AGENT_ROOTFS, <out>/<version>) for the profiles that run git and the
// agent CLIs; without it, the suites that need them say they are skipped.
std::string AgentRootfs() {
  const char* rootfs = getenv("PASEO_AGENT_ROOTFS");
  return rootfs != nullptr ? rootfs : "";
}
std::string AgentVersion() {
  std::string r = AgentRootfs();
  return r.substr(r.rfind('/') + 1);
}

// The test's CA and a certificate it signed for the fake model APIs' names (openssl CLI), in
// `dir`; the sandbox gets only ca.pem (a read-only tool root at /opt/test-ca).
void MakeCertificates(const std::string& dir) {
  std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::string script =
      "set -e; cd '" + dir + "'; exec >openssl.log 2>&1\n"
      "openssl req -x509 " + ec + " -keyout ca.key -out ca.pem -days 2 -subj '/CN=paseo test CA'"
      " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign\n"
      "openssl req " + ec + " -keyout server.key -out server.csr -subj '/CN=api.anthropic.com'\n"
      "printf 'subjectAltName=DNS:api.anthropic.com,DNS:api.openai.com\\n"
      "basicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > server.ext\n"
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile server.ext -out server.pem\n"
      "chmod 0644 ca.pem\n";
  if (std::system(script.c_str()) != 0) Die("openssl failed: " + ReadFile(dir + "/openssl.log"));
}

// Bare repositories for git sources, served by testing/git-http-server.mjs: public.git,
// slow-public.git (each answer 2 s late) and private-repo.git (which needs the registered
// credential), each with a commit holding
// README and pkg/app/, and a tag v1 on it; main has one more commit after the tag.
void MakeRepositories(const std::string& base) {
  std::string script =
      "set -e; cd '" + base + "'; exec >git.log 2>&1\n"
      "export GIT_CONFIG_NOSYSTEM=1 HOME='" + base + "/git-home'; mkdir -p git-home\n"
      "git init -q -b main git-src; cd git-src\n"
      "echo 'conformance repo' > README; mkdir -p pkg/app; echo app > pkg/app/main.txt\n"
      "git add .; git -c user.email=t@example -c user.name=t commit -qm first; git tag v1\n"
      "echo more >> README; git -c user.email=t@example -c user.name=t commit -qam second\n"
      "cd ..; mkdir -p git-repos\n"
      "git clone -q --bare git-src git-repos/public.git\n"
      "git clone -q --bare git-src git-repos/private-repo.git\n"
      "git clone -q --bare git-src git-repos/slow-public.git\n";
  if (std::system(script.c_str()) != 0) Die("git setup failed: " + ReadFile(base + "/git.log"));
}

constexpr char kGitUser[] = "paseo";
constexpr char kGitToken[] = "conformance-token-0f1e2d";

ServiceOptions ConformanceService() {
  ServiceOptions options;
  options.helper_json_extra = ", \"onRestart\": \"keep\"";
  bool agent = !AgentRootfs().empty();
  if (agent) {
    options.extra_rootfs = AgentRootfs();
    options.helper_json_extra +=
        R"(, "network": {"pool": "10.97.0.0/24", "dnsUpstreams": ["203.0.113.53"]})";
  }
  options.before_start = [agent](const std::string& base) {
    std::string root = base + "/ws-conf";
    Check(mkdir(root.c_str(), 0775) == 0, "mkdir ws-conf");
    // The client is uid 0, judged by mode bits like any uid: it gets in through group 0.
    Check(chown(root.c_str(), 4242, 0) == 0 && chmod(root.c_str(), 0775) == 0, "chown ws-conf");
    std::string helper_root = base + "/paseo-helper";
    Check(mkdir(helper_root.c_str(), 0755) == 0, "mkdir paseo-helper");
    WriteText(helper_root + "/paseo-workspace-helper",
              "#!/bin/sh\necho \"helper $*\"\necho \"$0\"\npwd\n");
    Check(chmod((helper_root + "/paseo-workspace-helper").c_str(), 0755) == 0, "chmod helper");
    std::string profiles = std::string("\"") + kProfile + "\"";
    std::string tool_roots = "{\"name\": \"paseo-helper\", \"hostPath\": \"" + helper_root + "\"}";
    std::string credential_roots;
    std::string tools =
        std::string("{\"name\": \"paseo-helper\", \"destination\": \"") + kToolDir + "\"}";
    if (agent) {
      // Credential directories an agent keeps in its home (read-write: it refreshes tokens),
      // and the git credential (read-only) in git's own place for its `store` helper.
      for (const char* name : {"claude", "codex", "git"}) {
        std::string dir = base + "/cred-" + name;
        Check(mkdir(dir.c_str(), 0700) == 0 && chown(dir.c_str(), 4242, 4242) == 0,
              "mkdir cred");
      }
      WriteText(base + "/cred-git/credentials", std::string("http://") + kGitUser + ":" +
                                                    kGitToken + "@git.example:8180\n");
      Check(chown((base + "/cred-git/credentials").c_str(), 4242, 4242) == 0, "chown cred");
      WriteText(base + "/cred-claude/.credentials.json",
                R"({"claudeAiOauth": {"accessToken": "conformance-access", "refreshToken": "r"}})");
      Check(chown((base + "/cred-claude/.credentials.json").c_str(), 4242, 4242) == 0, "chown");
      std::string ca = base + "/test-ca";
      Check(mkdir(ca.c_str(), 0755) == 0, "mkdir test-ca");
      MakeCertificates(ca);
      MakeRepositories(base);
      tool_roots += ", {\"name\": \"test-ca\", \"hostPath\": \"" + ca + "\"}";
      credential_roots = ", \"credentialRoots\": [{\"name\": \"claude\", \"hostPath\": \"" + base +
                         "/cred-claude\"}, {\"name\": \"codex\", \"hostPath\": \"" + base +
                         "/cred-codex\"}, {\"name\": \"git\", \"hostPath\": \"" + base +
                         "/cred-git\"}]";
      // One profile reaches the git server and the model APIs; one only the model APIs.
      std::string common = "\"rootfsVersion\": \"" + AgentVersion() +
                           "\", \"outputBufferBytes\": 4194304, \"tools\": [" + tools +
                           ", {\"name\": \"test-ca\", \"destination\": \"/opt/test-ca\"}], "
                           "\"credentials\": [{\"name\": \"claude\", \"destination\": "
                           "\"/home/agent/.claude\", \"writable\": true}, {\"name\": \"codex\", "
                           "\"destination\": \"/home/agent/.codex\", \"writable\": true}, "
                           "{\"name\": \"git\", \"destination\": \"/home/agent/.config/git\"}]";
      std::string apis = "{\"name\": \"api.anthropic.com\", \"ports\": [443]}, "
                         "{\"name\": \"api.openai.com\", \"ports\": [443]}";
      WriteText(base + "/etc/profiles/conformance-agent.json",
                "{\"name\": \"conformance-agent\", " + common +
                    ", \"network\": {\"mode\": \"sandbox\", \"allowNames\": [" + apis +
                    ", {\"name\": \"git.example\", \"ports\": [8180]}]}}");
      WriteText(base + "/etc/profiles/conformance-nogit.json",
                "{\"name\": \"conformance-nogit\", " + common +
                    ", \"network\": {\"mode\": \"sandbox\", \"allowNames\": [" + apis + "]}}");
      profiles += ", \"conformance-agent\", \"conformance-nogit\"";
    }
    WriteText(base + "/etc/deployments/conformance.json",
              std::string("{\"id\": \"") + kDeployment +
                  "\", \"allowedUids\": [0], \"workspaceRoots\": [{\"hostPath\": \"" + root +
                  "\"}], \"runAs\": {\"uid\": 4242, \"gid\": 4242}, \"profiles\": [" + profiles +
                  "], \"maxSandboxes\": 64, \"toolRoots\": [" + tool_roots + "]" +
                  credential_roots + "}");
    WriteText(base + "/etc/profiles/conformance.json",
              std::string("{\"name\": \"") + kProfile +
                  "\", \"outputBufferBytes\": 4194304, \"tools\": [" + tools + "]}");
  };
  return options;
}

// A server of the suite's, run in the test internet's namespace (testing/test_internet.h) with
// its stdout to `log`: the git server, the fake model API.
pid_t StartInInternet(const std::vector<std::string>& argv, const std::string& log) {
  int out = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  Check(out >= 0, "open " + log);
  std::string pin = InternetPin();
  std::vector<std::string> env = {"PATH=/usr/bin:/bin"};
  pid_t pid = SpawnStdio(argv, STDIN_FILENO, out, STDERR_FILENO, env, [pin] {
    int fd = open(pin.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return errno;
    return 0;
  });
  close(out);
  // Listening once its first line is written.
  for (int i = 0; i < 200; ++i) {
    if (ReadFile(log).find("listening") != std::string::npos) return pid;
    usleep(50000);
  }
  Die("a test server did not start: " + argv[1] + ": " + ReadFile(log));
  return -1;
}

// The suite's source directory: the runfile package.json is a symlink into the source tree,
// where installer/install-deps ran `npm ci` (node_modules is not a Bazel input).
std::string SuiteDir() {
  std::string link = Runfile("testing/conformance/package.json");
  char real[PATH_MAX];
  Check(realpath(link.c_str(), real) != nullptr, "realpath " + link);
  std::string dir = real;
  dir = dir.substr(0, dir.rfind('/'));
  if (access((dir + "/node_modules/zod/package.json").c_str(), R_OK) != 0)
    Die(dir + "/node_modules has no zod: run installer/install-deps (npm ci in testing/conformance)");
  return dir;
}

int Listen(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  Check(fd >= 0, "socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  Check(path.size() < sizeof(addr.sun_path), "control socket path too long");
  std::strcpy(addr.sun_path, path.c_str());
  Check(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "bind " + path);
  Check(listen(fd, 4) == 0, "listen");
  return fd;
}

// Kills the broker and waits (at most 30 s) for the privhelper's next one.
std::string RestartBroker(Service& svc) {
  pid_t old = svc.broker_pid();
  if (old <= 0) return "error: no broker";
  kill(old, SIGKILL);
  for (int i = 0; i < 300; ++i) {
    pid_t now = svc.broker_pid();
    if (now > 0 && now != old && CanConnect(svc.socket())) return "ok " + std::to_string(now);
    usleep(100000);
  }
  return "error: no new broker within 30 s";
}

std::string RestartService(Service& svc) {
  svc.Crash();
  svc.Restart();  // dies if the new privhelper does not serve
  return "ok " + std::to_string(svc.broker_pid());
}

// Serves one control connection: one command line, one reply line.
void ServeControl(Service& svc, int conn) {
  std::string line;
  char c;
  while (line.size() < 64 && read(conn, &c, 1) == 1 && c != '\n') line += c;
  std::string reply = line == "restart-broker"    ? RestartBroker(svc)
                      : line == "restart-service" ? RestartService(svc)
                                                  : "error: unknown command " + line;
  std::fprintf(stderr, "conformance_test: %s -> %s\n", line.c_str(), reply.c_str());
  reply += "\n";
  (void)!write(conn, reply.data(), reply.size());
  close(conn);
}

// The files named in the arguments, else every *.test.mjs. Under contract version 2,
// $PASEO_CONFORMANCE_V2_LEAVE_OUT (space-separated file names; .ci/run sets lossless.test.mjs,
// 341 s of v2's 455 s in a CI-like run, whose byte path v1's run already checks) leaves files
// out of that default, and says so.
std::vector<std::string> TestFiles(const std::string& dir, const std::string& protocol, int argc,
                                   char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--protocol=", 11) != 0) files.push_back(argv[i]);
  }
  if (files.empty()) {
    const char* leave_out = protocol == "2" ? getenv("PASEO_CONFORMANCE_V2_LEAVE_OUT") : nullptr;
    std::vector<std::string> left_out = absl::StrSplit(leave_out != nullptr ? leave_out : "", ' ',
                                                       absl::SkipEmpty());
    for (const auto& name : ListDir(dir)) {
      if (name.size() <= 9 || name.compare(name.size() - 9, 9, ".test.mjs") != 0) continue;
      if (std::find(left_out.begin(), left_out.end(), name) != left_out.end()) {
        std::fprintf(stderr, "conformance_test: left out (PASEO_CONFORMANCE_V2_LEAVE_OUT): %s\n",
                     name.c_str());
        continue;
      }
      files.push_back(name);
    }
    std::sort(files.begin(), files.end());
  }
  return files;
}

// The contract version to check: --protocol=N (1 or 2), else $PASEO_CONFORMANCE_PROTOCOL (the
// BUILD target's), else 1.
std::string Protocol(int argc, char** argv) {
  const char* from_env = getenv("PASEO_CONFORMANCE_PROTOCOL");
  std::string protocol = from_env != nullptr && *from_env != '\0' ? from_env : "1";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--protocol=", 11) == 0) protocol = argv[i] + 11;
  }
  if (protocol != "1" && protocol != "2") Die("--protocol must be 1 or 2");
  return protocol;
}

int Run(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  std::string protocol = Protocol(argc, argv);
  Service svc(ConformanceService());
  std::string dir = SuiteDir();
  std::string control = svc.base() + "/conformance.sock";
  int listener = Listen(control);

  std::string node = Capture("command -v node");
  // The git server and the fake model APIs, in the test's own internet (the privhelper resolves
  // through its DNS server; nothing leaves the test's namespaces).
  std::vector<pid_t> servers;
  std::string agent_profile;
  if (!AgentRootfs().empty()) {
    absl::Status internet = BuildInternet();
    if (!internet.ok()) Die("the test internet: " + std::string(internet.message()));
    std::string base = svc.base();
    servers.push_back(StartInInternet(
        {node, Runfile("testing/git-http-server.mjs"), "--root", base + "/git-repos", "--host",
         "203.0.113.30", "--port", "8180", "--user", kGitUser, "--token", kGitToken},
        base + "/git-server.jsonl"));
    WriteText(base + "/model-script.json",
              R"({"steps": [{"bash": "echo made-by-the-agent > proof.txt && git add proof.txt && )"
              R"(git -c user.email=agent@example -c user.name=agent commit -qm 'agent proof'"},)"
              R"( {"text": "DONE: proof committed"}]})");
    servers.push_back(StartInInternet(
        {node, Runfile("testing/fake-model-api/server.mjs"), "--cert",
         base + "/test-ca/server.pem", "--key", base + "/test-ca/server.key", "--port", "443",
         "--host", "0.0.0.0", "--script", base + "/model-script.json", "--log",
         base + "/model.jsonl"},
        base + "/model-server.out"));
    agent_profile = "conformance-agent";
  }
  // Every exec in the suite is bounded (driver.mjs); this is only the backstop for a hung file.
  std::vector<std::string> args = {node, "--test", "--test-concurrency=1", "--test-timeout=1200000",
                                   "--test-reporter=spec",
                                   "--test-reporter-destination=stdout"};
  // JUnit for Bazel, so testing/run-tests counts each case.
  if (const char* xml = getenv("XML_OUTPUT_FILE"); xml != nullptr && *xml != '\0') {
    args.push_back("--test-reporter=junit");
    args.push_back(std::string("--test-reporter-destination=") + xml);
  }
  for (const auto& f : TestFiles(dir, protocol, argc, argv)) args.push_back(f);

  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "PASEO_CONFORMANCE_PROTOCOL=", 27) != 0) env.push_back(*e);
  }
  // --test_env=PASEO_CONFORMANCE_RUNTIME=... runs the suite against another build of it.
  const char* runtime = getenv("PASEO_CONFORMANCE_RUNTIME");
  env.push_back(std::string("PASEO_CONFORMANCE_RUNTIME=") +
                (runtime != nullptr ? runtime : Runfile("runtime/paseo-sandbox-runtime")));
  env.push_back("PASEO_CONFORMANCE_SOCKET=" + svc.socket());
  env.push_back(std::string("PASEO_CONFORMANCE_DEPLOYMENT=") + kDeployment);
  env.push_back(std::string("PASEO_CONFORMANCE_PROFILE=") + kProfile);
  env.push_back("PASEO_CONFORMANCE_WORKSPACE_ROOT=" + svc.base() + "/ws-conf");
  env.push_back("PASEO_CONFORMANCE_OUTSIDE=" + svc.base() + "/outside");
  env.push_back("PASEO_CONFORMANCE_CONTROL=" + control);
  env.push_back(std::string("PASEO_CONFORMANCE_TOOL_DIR=") + kToolDir);
  env.push_back("PASEO_CONFORMANCE_PROTOCOL=" + protocol);
  // The agent profiles (empty without the agent rootfs: those suites are skipped).
  env.push_back("PASEO_CONFORMANCE_AGENT_PROFILE=" + agent_profile);
  env.push_back("PASEO_CONFORMANCE_NOGIT_PROFILE=" +
                std::string(agent_profile.empty() ? "" : "conformance-nogit"));
  env.push_back("PASEO_CONFORMANCE_GIT_BASE=http://git.example:8180");
  env.push_back(std::string("PASEO_CONFORMANCE_GIT_TOKEN=") + kGitToken);
  env.push_back("PASEO_CONFORMANCE_GIT_LOG=" + svc.base() + "/git-server.jsonl");
  env.push_back("PASEO_CONFORMANCE_MODEL_LOG=" + svc.base() + "/model.jsonl");
  env.push_back("PASEO_CONFORMANCE_CA=/opt/test-ca/ca.pem");
  env.push_back("PASEO_CONFORMANCE_CREDENTIALS=" + svc.base());
  env.push_back("PASEO_CONFORMANCE_CLI=" + Runfile("client/paseo-sandbox"));
  std::fprintf(stderr, "conformance_test: contract version %s\n", protocol.c_str());

  std::fflush(stdout);
  pid_t pid = SpawnStdio(args, STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO, env,
                         [&dir] { return chdir(dir.c_str()) == 0 ? 0 : errno; });
  int status = 0;
  // A bound on the whole suite (it takes 4-12 min here), well inside CI's time: a hang fails
  // this test instead of eating the run.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(25);
  for (;;) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "conformance_test: the suite ran past 25 minutes; killing it\n");
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    pollfd p = {listener, POLLIN, 0};
    if (poll(&p, 1, 200) == 1) {
      int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn >= 0) ServeControl(svc, conn);
    }
  }
  close(listener);
  for (pid_t server : servers) {
    kill(server, SIGTERM);
    WaitPid(server);
  }
  bool passed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!passed) std::fprintf(stderr, "conformance_test: node --test failed (wait status %d)\n", status);

  // Every workspace the suite made is destroyed by it: nothing may be left.
  auto left = svc.LeaksAfter(10);
  int stop = svc.Stop();
  auto leaks = svc.Leaks();
  leaks.insert(leaks.begin(), left.begin(), left.end());
  for (const auto& l : leaks) std::fprintf(stderr, "conformance_test: leak: %s\n", l.c_str());
  if (!(WIFEXITED(stop) && WEXITSTATUS(stop) == 0))
    std::fprintf(stderr, "conformance_test: privhelper stop status %d\n%s\n", stop, svc.Log().c_str());
  if (!passed || !leaks.empty()) svc.KeepLog();
  svc.RemoveWorkArea();
  return passed && leaks.empty() ? 0 : 1;
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) { return paseo::testing::Run(argc, argv); }
