// A private Docker Engine for the Docker deployment suite (testing/docker_test.cc): Debian's
// dockerd with its own data root, exec root, socket and cgroup parent, no bridge and no
// iptables, started inside the test's own mount and network namespaces; images are built
// locally from a tarball (no registry is reachable), and everything is removed at the end.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "testing/harness.h"

namespace paseo::testing {

// Runs argv (argv[0] a path) with `input` on stdin (then closed), collecting stdout and
// stderr; SIGKILLs it at `deadline` (exit_code -1, err ends with "(killed at the deadline)").
CliResult RunArgv(const std::vector<std::string>& argv, const std::string& input = "",
                  std::chrono::milliseconds deadline = std::chrono::seconds(120),
                  const std::vector<std::string>& env = {});

// A command left running while a test does other things: started like RunArgv, its stdin
// kept open until CloseInput, its output read as it comes.
class RunningCommand {
 public:
  // `in_child` as for SpawnStdio (e.g. to become another uid).
  RunningCommand(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                 std::function<int()> in_child = nullptr);
  ~RunningCommand();  // SIGKILLs and reaps it if it still runs
  RunningCommand(const RunningCommand&) = delete;
  RunningCommand& operator=(const RunningCommand&) = delete;

  void Write(const std::string& bytes);
  void CloseInput();
  // Reads until stdout contains `needle` or `deadline` passes; whether it did.
  bool ReadUntil(const std::string& needle, std::chrono::milliseconds deadline);
  // Reads to the end (SIGKILL at `deadline`) and reaps it.
  CliResult Finish(std::chrono::milliseconds deadline = std::chrono::seconds(120));
  pid_t pid() const { return pid_; }

 private:
  bool ReadSome(int timeout_ms);  // false once both streams ended
  pid_t pid_ = -1;
  int in_ = -1;
  int fds_[2] = {-1, -1};
  CliResult result_;
};

class DockerEngine {
 public:
  // Starts dockerd. An error says why Docker cannot run here (no dockerd installed, no
  // overlay or cgroup support, ...): the caller skips with it. Must be called after the
  // harness made the process's namespaces (a Service exists).
  static absl::StatusOr<std::unique_ptr<DockerEngine>> Start();
  // Removes every container, stops dockerd and its containerd, unmounts and removes its data;
  // returns what had to be killed or could not be removed (empty when it all went cleanly).
  std::vector<std::string> Stop();
  ~DockerEngine();  // Stop(), if not done yet
  DockerEngine(const DockerEngine&) = delete;
  DockerEngine& operator=(const DockerEngine&) = delete;

  // `docker -H <our socket> args...`.
  CliResult Docker(const std::vector<std::string>& args,
                   std::chrono::milliseconds deadline = std::chrono::seconds(120)) const;
  // The argv that runs `docker args...` against this engine (for callers that spawn it).
  std::vector<std::string> DockerArgv(const std::vector<std::string>& args) const;
  // The environment the docker CLI runs with (its config directory is ours, not root's).
  std::vector<std::string> DockerEnv() const;

  // Builds image `tag` FROM scratch with ADD of a tarball holding `files` (host path, path in
  // the image; mode kept, owner root), a /tmp, /etc/passwd and /etc/group naming uid 1000, and
  // `cmd` as its CMD (none if empty).
  absl::Status BuildImage(const std::string& tag,
                          const std::vector<std::pair<std::string, std::string>>& files,
                          const std::vector<std::string>& cmd = {}) const;
  // The engine's address, as DOCKER_HOST takes it (for docker-compose).
  std::string Host() const { return "unix://" + dir_ + "/run/docker.sock"; }

  // What dockerd logged (for failure messages).
  std::string Log() const;
  // Processes still running from this engine's exec root (after the destructor's clean-up:
  // none).
  std::vector<pid_t> Processes() const;

 private:
  DockerEngine() = default;
  absl::Status Launch();
  std::string CgroupParent() const;  // containers' cgroups, removed at the end
  std::string dir_;
  std::string docker_;  // the CLI
  pid_t dockerd_pid_ = -1;
};

}  // namespace paseo::testing
