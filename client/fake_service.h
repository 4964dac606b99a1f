// In-process fakes of the public API for the client's unit tests: a Supervisor whose sandboxes
// and processes answer from scripted state and record what the client asked, served over a real
// Unix socket so client::Connection runs exactly as against the service. No root, no runsc.
//
//   FakeService service;
//   service.script.stdout_data = "hello";
//   UnixSocketServer server(io, dir.path() + "/s.sock", service.NewSupervisor());
//   Connection conn(io, dir.path() + "/s.sock");
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/io.h>

#include "absl/status/status.h"
#include "common/process_exit.h"
#include "schema/api.capnp.h"

namespace paseo::client {

// What a fake process did. Its streams are delivered to a subscriber in small chunks.
struct FakeProcessScript {
  std::string stdout_data;  // the pty stream's bytes too, for a tty process
  std::string stderr_data;
  // The first lost_bytes of each stream are no longer kept: a subscriber from below that
  // gets gap() first, and the data above starts at offset lost_bytes.
  uint64_t lost_bytes = 0;
  bool tty = false;
  ProcessExit exit = ProcessExit::Exited(0);
  // `cat`: input is written back on stdout, and the streams end at closeInput.
  bool echo_input = false;
  // Still writing: info() counts only this many stdout bytes; a subscriber gets them all.
  std::optional<uint64_t> stdout_bytes_at_info;
  // A broker crash: once the first subscriber of disconnect_stream has been sent the bytes
  // before this offset (at most the stream's end), FakeService::crash runs (e.g.
  // UnixSocketServer::DropConnections) and that delivery stops without end(). Later
  // subscribers get the whole stream.
  std::optional<uint64_t> disconnect_at;
  api::Stream disconnect_stream = api::Stream::STDOUT;
  // The first this many signal() calls fail like the privhelper's before runsc has reported
  // the process's pid: "unavailable: process is still starting; retry".
  int signals_while_starting = 0;
};

struct FakeProcess {
  std::string id;
  FakeProcessScript script;
  std::vector<std::string> argv, env;
  std::string cwd;
  bool tty = false;
  uint16_t rows = 0, cols = 0;
  // What the client did to it.
  std::string input;
  bool input_closed = false;
  std::vector<int> signals;
  int refused_signals = 0;  // refused while "still starting" (script.signals_while_starting)
  std::vector<std::pair<uint16_t, uint16_t>> resizes;
  std::vector<std::pair<api::Stream, uint64_t>> subscriptions;  // stream, fromOffset
  // ProcessSpec.key, .output, .workspaceCwd as started; `released` once Process.release ran.
  std::string key;
  api::OutputMode output = api::OutputMode::DROP_OLDEST;
  std::string workspace_cwd;
  bool released = false;
  // Echo mode: the live stdout subscribers and who waits for the end.
  std::vector<api::OutputSink::Client> sinks;
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> waiters;
};

struct FakeSandbox {
  std::string id;
  std::string deployment, profile;
  std::vector<std::tuple<std::string, std::string, api::AccessMode>> workspaces;
  std::vector<std::string> credentials;
  std::map<std::string, FakeProcess> processes;
  bool deleted = false;
  std::optional<bool> delete_force;  // the force flag of the delete, once deleted
  std::string key;                   // SandboxSpec.key
  bool paused = false;
  std::vector<std::pair<std::string, std::string>> labels;  // SandboxSpec.labels
  // Ports connect() reaches (others are permission-denied), and what it was asked, in order.
  std::vector<uint16_t> inbound_ports = {8080};
  std::vector<uint16_t> connects;
  // What inspect() reports when not paused, and its stateReason.
  std::string state = "running";
  std::string state_reason;
  std::string network_address;  // empty: network "none"
};

class FakeService {
 public:
  FakeService();
  ~FakeService();

  // A new connection's bootstrap capability.
  api::Supervisor::Client NewSupervisor();

  // A sandbox that already exists (made by an earlier `run --keep`), and a process in it.
  FakeSandbox& AddSandbox(const std::string& id);
  FakeProcess& AddProcess(const std::string& sandbox_id, const std::string& process_id,
                          const FakeProcessScript& script);
  // The live sandbox of `deployment` created with `key` (never for an empty key).
  FakeSandbox* FindByKey(const std::string& deployment, const std::string& key);

  // What info() answers.
  std::string version = "paseo-sandbox fake";
  uint32_t peer_uid = 1000;
  std::vector<std::string> deployments = {"alpha"};
  // If set, createSandbox fails with it (a client sees "<reason>: <message>").
  std::optional<absl::Status> refuse_create;
  // If set, startProcess fails with it.
  std::optional<absl::Status> refuse_start;
  // Sandboxes whose delete fails (failed-precondition).
  std::vector<std::string> undeletable;
  // Sandbox.connect to an allowed port: the fake makes a socketpair, answers one end and gives
  // the other to this (the "server inside the sandbox"; a test runs it on a thread, since the
  // CLI's relay blocks). Unset: the connection is unavailable ("nothing listening").
  std::function<void(kj::AutoCloseFd)> serve_port;
  // The script of every process startProcess starts.
  FakeProcessScript script;
  // What a script's disconnect_at does (set by the test).
  std::function<void()> crash;
  // Supervisor.stats: each call is one second later than the one before, in which every
  // sandbox used half a core (sampledAtNs = calls x 1e9, cpuNs = calls x 5e8).
  uint64_t stats_calls = 0;

  // Every sandbox ever created or added, by id, deleted ones included.
  std::map<std::string, FakeSandbox> sandboxes;
  // Failures of the fake's own deliveries (a sink that threw); a test expects none.
  std::vector<std::string> errors;

  class Supervisor;
  class Sandbox;
  class Process;
  struct Deliveries;

 private:
  kj::Own<Deliveries> deliveries_;
  int next_id_ = 1;
};

// Listens on a Unix socket at `path` and serves `bootstrap` to every connection, on the calling
// thread's event loop (the client's own wait() turns it).
class UnixSocketServer {
 public:
  UnixSocketServer(kj::AsyncIoContext& io, const std::string& path,
                   capnp::Capability::Client bootstrap);
  ~UnixSocketServer() noexcept(false);

  // Ends every connection, as a broker crash does; the socket still accepts (as the
  // privhelper's does while it restarts the broker).
  void DropConnections();
  // Stops accepting and removes the socket: the service is gone.
  void StopListening();

 private:
  struct Accepted;
  struct Errors final : public kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override {}
  };
  kj::Promise<void> AcceptLoop();

  std::string path_;
  kj::LowLevelAsyncIoProvider& low_;
  capnp::Capability::Client bootstrap_;
  kj::Own<kj::ConnectionReceiver> listener_;
  Errors errors_;
  kj::Own<kj::TaskSet> connections_;  // each task owns its connection until it disconnects
  kj::Promise<void> serving_;
};

// A fresh directory for sockets, removed with what is in it. Under $TEST_TMPDIR when a socket
// path there fits in sun_path (108 bytes), else under /tmp.
class SocketDir {
 public:
  SocketDir();
  ~SocketDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace paseo::client
