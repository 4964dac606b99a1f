// Process I/O in the broker: a process's record (its two output logs, its input queue, how it
// ended), the pumps that move its output pipes into the logs, and delivery of one stream to
// one subscriber. Bytes only move here; who may touch a process is decided by the registry.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/io.h>
#include <kj/time.h>

#include "absl/status/statusor.h"
#include "broker/output_log.h"
#include "common/process_exit.h"
#include "schema/api.capnp.h"

namespace paseo {

// Ordered, bounded writes to a process's stdin. Each queued call is written as whole chunks in
// the order the calls arrived (a tty frame, at most PIPE_BUF, reaches the pipe whole or not at
// all); bytes accepted but not yet written, plus a fixed cost per queued call, count against
// kMaxQueuedBytes, so a client that ignores flow control cannot grow the broker.
class InputQueue : public kj::Refcounted {
 public:
  static constexpr size_t kMaxQueuedBytes = 16 << 20;
  static constexpr size_t kQueuedCallBytes = 1024;  // what each queued call costs besides its bytes

  void Attach(kj::Own<kj::AsyncOutputStream> stream);
  bool open() const { return stream_ != nullptr; }
  size_t queued() const { return queued_; }

  // Queues `chunks` behind earlier writes; resolves when they are written. Refused
  // (failed-precondition) when the input is closed, (unavailable) past the bound. The promise
  // fails with failed-precondition if the process stops reading (its pipe closed).
  absl::StatusOr<kj::Promise<void>> Write(std::vector<std::string> chunks,
                                          absl::string_view closed_reason);
  // Resolves once everything queued before it is written, then drops the stream: the process
  // reads end-of-file (once every other copy of the pipe is closed too).
  kj::Promise<void> Close();
  // Drops the stream and what is queued now (the process ended).
  void Drop();

 private:
  struct Stream : public kj::Refcounted {
    explicit Stream(kj::Own<kj::AsyncOutputStream> s) : out(kj::mv(s)) {}
    kj::Own<kj::AsyncOutputStream> out;
  };
  static kj::Promise<void> WriteChunks(kj::AsyncOutputStream& out,
                                       kj::Own<std::vector<std::string>> chunks, size_t next);

  // Shared with the writes queued on it, so a write in flight when the process ends (or its
  // input is closed) never outlives the stream it writes to.
  kj::Maybe<kj::Own<Stream>> stream_;
  kj::Promise<void> chain_ = kj::READY_NOW;  // serializes writes
  size_t queued_ = 0;
};

// Drops the failures of tasks nobody waits for (an end call to a subscriber that went away).
kj::TaskSet::ErrorHandler& IgnoreTaskErrors();

struct ProcessRecord : public kj::Refcounted {
  std::string id;
  std::string sandbox_id;
  std::string key;  // api.capnp ProcessSpec.key; empty if none
  std::vector<std::string> argv;
  bool tty = false;
  api::OutputMode output = api::OutputMode::DROP_OLDEST;
  bool input_closed = false;  // tty: closeInput sent the EOF frame; the pipe stays for resize
  kj::Own<OutputLog> stdout_log;  // a tty process's single stream is kept here (`pty`)
  kj::Own<OutputLog> stderr_log;
  kj::Own<InputQueue> input = kj::refcounted<InputQueue>();
  ProcessExit exit;
  kj::Promise<void> pumps = nullptr;

  // Released (Process.release, or by the service): gone from its sandbox; a client still
  // holding it gets not-found.
  bool released = false;
  // Each stream has been delivered to its end to some subscriber (OutputSink.end returned).
  // A tty process has one stream (pty, kept as stdout).
  bool stdout_drained = false, stderr_drained = false;
  // Called once when the process becomes drained (the broker considers releasing it).
  std::function<void()> on_drained;
  // End calls in flight, owned here rather than by their subscription: a client that drops
  // its subscription as soon as end() reaches it must still count as having read to the end
  // (its Finish can overtake the end call's Return).
  kj::TaskSet end_calls{IgnoreTaskErrors()};
  // When the broker learned of its end and of its drain (for ReleaseRules, registry.h).
  std::optional<kj::TimePoint> ended_at, drained_at;

  OutputLog& log(api::Stream s) { return s == api::Stream::STDERR ? *stderr_log : *stdout_log; }
  bool ended() const { return exit.ended(); }
  bool drained() const { return stdout_drained && (tty || stderr_drained); }
  void MarkDrained(api::Stream stream);
  // Records how it ended (once), releases its stdin and wakes every waiter.
  void SetExit(ProcessExit how);
  kj::Promise<void> WhenEnded();

 private:
  // One forked promise for every waiter: a waiter that goes away (a cancelled wait()) drops
  // only its branch, so waiting costs nothing that outlives the waiter (regression: each
  // cancelled wait left a fulfiller behind until the process ended).
  kj::Maybe<kj::ForkedPromise<void>> ended_;
  kj::Own<kj::PromiseFulfiller<void>> end_;
};

// Starts moving the process's output pipes into its logs (splice: a byte is in the pipe or in
// the log, never only in broker memory) and records its end when `exited` resolves (a failure
// counts as an unknown end). The record owns the pumps.
void StartPumps(kj::UnixEventPort& events, ProcessRecord& p, kj::AutoCloseFd stdout_fd,
                kj::AutoCloseFd stderr_fd, kj::Promise<ProcessExit> exited);

// Delivers one stream to one subscriber: gap if `from` is older than what is kept, kept bytes,
// live bytes, then end. Each step waits for the sink's flow control, so every subscriber has
// its own pace and a stuck one stalls nobody.
kj::Promise<void> Deliver(kj::Own<ProcessRecord> p, api::Stream stream, uint64_t from,
                          api::OutputSink::Client sink);

}  // namespace paseo
