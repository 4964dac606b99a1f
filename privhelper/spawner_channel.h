// SpawnerChannel: the privhelper's end of one sandbox's spawner (the shim's `spawner` mode,
// sandbox/spawner.cc), which starts that sandbox's processes at fork/exec cost instead of a
// `runsc exec` each (docs/decisions.md). The channel demultiplexes the spawner's frames
// (common/spawner_frames.h) into the same per-process pipes a `runsc exec` would have had, so
// the broker's side -- its pipes, the privhelper's kept copies for a broker restart, offsets,
// output modes -- does not change.
//
// Everything the spawner says comes from inside the sandbox and is believed only as far as the
// sandbox is: pids, exit statuses and output describe that sandbox's own processes. The channel
// accepts a frame only for a process id it issued, in the order a process lives (started or
// failed, output, end of each stream, exit), within the credit it granted; any violation, an
// end of the channel or a failed write ends it (`down`): every process it still runs is reported
// ended (ProcessExit::Unknown, with a line on its error stream saying why) and the owner
// (SandboxHost) falls back to `runsc exec` for new processes. What the privhelper holds per
// process is bounded by the credit windows, whatever the spawner sends.
//
//   SpawnerChannel channel(io, kj::mv(to_spawner), kj::mv(from_spawner),
//                          [](std::string why) { ... });
//   channel.Hello().then(...);  // the spawner said hello (or the channel went down)
//   ASSIGN_OR_RETURN(SpawnerChannel::Started p, channel.Start(request));
#pragma once

#include <deque>
#include <vector>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <kj/async-io.h>
#include <kj/async.h>
#include <kj/function.h>
#include <kj/io.h>

#include "absl/status/statusor.h"
#include "common/process_exit.h"
#include "common/spawner_frames.h"

namespace paseo {

struct SpawnerChannelOptions {
  // What a later reattach must present (spawner_frames.h kKey); sent after the hello of a
  // first channel, and as the first frame (kAttach) of a reattached one.
  std::string key;
  // The channel is a reattach (`shim attach`) to a spawner that may hold processes.
  bool reattach = false;
  // Paces the acknowledgement of what the broker took from a pipe that went quiet (without
  // it, acknowledgements ride only on grants).
  kj::Timer* timer = nullptr;
  // How long a reattached spawner has to answer a kResume (with `timer`): the broker starts
  // only once every held process is resumed, so a spawner that never answers would keep the
  // whole service from serving. Past it the channel fails: that sandbox's processes end.
  kj::Duration resume_patience = 10 * kj::SECONDS;
};

class SpawnerChannel {
 public:
  using Options = SpawnerChannelOptions;
  // `to_spawner`: the write end of the spawner's stdin; `from_spawner`: the read end of its
  // stdout. `on_down` runs once, when the channel goes down for any reason but destruction.
  SpawnerChannel(kj::LowLevelAsyncIoProvider& io, kj::AutoCloseFd to_spawner,
                 kj::AutoCloseFd from_spawner, kj::Function<void(std::string)> on_down,
                 Options options = {});
  // Reports every process still running as ended (Unknown).
  ~SpawnerChannel() noexcept(false);

  enum class State { kStarting, kUp, kDown };
  State state() const { return state_; }
  // Resolves once the state is no longer kStarting: the spawner said hello and listed what it
  // holds (or the channel went down).
  kj::Promise<void> Hello() { return hello_.addBranch(); }

  // A process a reattached spawner still holds (Options.reattach): known by its old name, its
  // output held until Resume says from where it continues.
  struct Held {
    uint32_t id;
    std::string name;
    bool merged;        // a tty relay
    bool input_closed;  // its stdin is closed: the broker gets no stdin for it
    kj::Promise<ProcessExit> exit;
  };
  // What the spawner said it holds (once, after Hello). Names are checked by `valid_name`.
  std::vector<Held> TakeHeld();
  struct Resumed {
    kj::AutoCloseFd stdin_w, stdout_r, stderr_r;  // the broker's ends; stdin absent if closed
    uint64_t stdout_start, stderr_start;  // the offset of the first byte each pipe carries
  };
  // Continues a held process whose streams the broker's logs hold up to `out` and `err`: the
  // spawner sends from there, or from its oldest kept byte if that is later (a gap the caller
  // records). failed-precondition if it is not held; the promise fails if the channel goes
  // down first.
  absl::StatusOr<kj::Promise<Resumed>> Resume(uint32_t id, uint64_t out, uint64_t err);
  // Tells the spawner to kill its processes and exit (kExitSpawner): as the sandbox's init, it
  // ends the sandbox. The channel then goes down when the spawner's end closes.
  void ExitSpawner();
  const std::string& down_reason() const { return down_reason_; }

  struct Started {
    uint32_t id;  // for Signal
    kj::AutoCloseFd stdin_w, stdout_r, stderr_r;  // the broker's ends, as from a runsc exec
    kj::Promise<ProcessExit> exit;
  };
  // Given the process's ends of its stdin, stdout and stderr (the same fd twice for a terminal)
  // when the spawner could not enter its working directory: starts it another way (runsc exec)
  // and returns its exit, or an error (then the process ends as one that could not start).
  using ChdirRefused =
      kj::Function<absl::StatusOr<kj::Promise<ProcessExit>>(int in, int out, int err)>;
  // Starts a process (only while kUp). invalid-argument if the command does not fit in a frame
  // (the caller uses runsc exec for it); resource-exhausted without pipes.
  absl::StatusOr<Started> Start(const spawner::StartRequest& request,
                                kj::Maybe<ChdirRefused> chdir_refused = nullptr);
  // failed-precondition once the process has ended (or the channel is down).
  absl::Status Signal(uint32_t id, int sig);
  // Ends the channel (a protocol violation, the spawner's runsc exec ended, ...).
  void Fail(std::string reason);
  // The broker let go of an ended process: its pipes close now, even if something in the sandbox
  // still holds the in-sandbox ends (a daemon it left behind); what still arrives for it is
  // dropped and credited. Only running processes count against kMaxProcesses.
  void Release(uint32_t id);

  // Bounds (tests read them): processes the channel tracks at once.
  static constexpr size_t kMaxProcesses = 8192;
  // Frames queued for a spawner that does not read them (it was stopped, or something else
  // writes its channel and withholds reading): past this the channel goes down.
  static constexpr size_t kMaxOutboxBytes = 1 << 20;
  // Output credit beyond each stream's initial window, summed over the channel's streams: what
  // the privhelper may hold for this sandbox is at most kInitialOutputWindow per stream plus
  // this, whatever the spawner sends and whoever stops reading.
  static constexpr size_t kMaxExtraCredit = 8 << 20;
  // How long a quiet pipe waits before the spawner hears what the broker took from it.
  static constexpr kj::Duration kAckDelay = 200 * kj::MILLISECONDS;
  // The extra credit handed out now (tests check it against the bound).
  size_t extra_credit() const { return extra_credit_; }

 private:
  struct Stream {
    kj::Own<kj::AsyncOutputStream> pipe;  // null once closed
    int raw = -1;                          // pipe's fd (for FIONREAD), valid while pipe is
    // The stream offset of the next byte written into the pipe, and the most recent `logged`
    // said to the spawner (everything before it left the pipe, so it is in the broker's log).
    uint64_t written = 0;
    uint64_t acked = 0;
    bool ack_pending = false;  // an acknowledgement is scheduled (Options.timer)
    std::deque<std::string> queue;
    size_t queued = 0;  // bytes in `queue`
    uint32_t allowed = spawner::kInitialOutputWindow;  // what the spawner may still send unasked
    // allowed + queued is kept at or below this when credit is granted. It doubles each time the
    // broker has taken everything from a stream whose spawner ran out of credit (until the
    // process ends: a stream that then stalls holds it, within the channel's budget).
    uint32_t window = spawner::kInitialOutputWindow;
    bool starved = false;  // the spawner said it ran out of credit since the window last grew
    bool writing = false;
    bool ended = false;   // the spawner said end-of-file: close once the queue is written
    bool broken = false;  // nobody reads it any more: discard
    kj::Promise<void> write = nullptr;
  };
  struct Proc {
    uint32_t id = 0;
    bool started = false;  // kStarted seen
    bool merged = false;   // a tty relay: stderr joins stdout, the stderr pipe is closed at once
    bool released = false;  // the broker let go of it (Release)
    // Reattached: held until resumed (no pipes, nothing may arrive for it before kResumed).
    bool held = false;
    bool drop_oldest = false;
    std::string name;
    bool input_closed = false;
    uint64_t asked_out = 0, asked_err = 0;  // the offsets the resume asked for
    kj::Own<kj::PromiseFulfiller<Resumed>> resumed;  // waiting for kResumed
    kj::AutoCloseFd resume_in, resume_out, resume_err;  // the broker's ends, until then
    Stream out, err;
    kj::Own<kj::AsyncInputStream> stdin_r;  // null once at end-of-file or the process ended
    uint32_t input_credit = spawner::kInputWindow;
    kj::Own<kj::PromiseFulfiller<void>> credit_waiter;
    kj::Promise<void> input = nullptr;
    std::optional<ProcessExit> exit;  // reported, delivered once the output before it is written
    kj::Own<kj::PromiseFulfiller<ProcessExit>> exit_fulfiller;
    // Until it started: copies of the process's ends of its pipes, and who takes it over if
    // the spawner cannot enter its working directory.
    kj::AutoCloseFd child_in, child_out, child_err;
    kj::Maybe<ChdirRefused> chdir_refused;
  };
  // The process could not enter its working directory: `chdir_refused` starts it instead.
  bool HandOver(Proc& p);

  void Send(std::string frame);
  kj::Promise<void> WriteLoop();
  kj::Promise<void> ReadLoop();
  // Applies one frame from the spawner; an error is a protocol violation.
  absl::Status Apply(const spawner::Frame& frame);
  absl::Status ApplyToProcess(const spawner::UpEvent& event);
  kj::Promise<void> PumpInput(Proc& p);
  void StartInput(Proc& p);
  void PumpOutput(Proc& p, Stream& s, uint8_t which);
  kj::Promise<void> WriteQueued(Proc& p, Stream& s, uint8_t which);
  // Grants `s` credit up to its window once some of its queue has left (written or dropped);
  // `flowing`: it was written into the broker's pipe, so the window may grow.
  void Refill(Proc& p, Stream& s, uint8_t which, bool flowing);
  // What `s` holds beyond the initial window (its share of extra_credit_).
  static size_t Extra(const Stream& s);
  void ForgetCredit(Proc& p);
  // Everything before this offset of `s` has left its pipe (the broker has it in its log).
  static uint64_t Logged(const Stream& s);
  // Says Logged() to the spawner once the pipe is quiet for a moment (Options.timer).
  void AckLater(uint32_t id, uint8_t which);
  absl::Status ApplyHeld(const spawner::UpEvent& event);
  absl::Status ApplyResumed(Proc& p, const spawner::UpEvent& event);
  // Delivers the exit once its output is written, and forgets a process that is done.
  void MaybeFinish(Proc& p);
  void Down(std::string reason, bool notify);
  // Forgets a process after the current turn: a continuation of one of its own promises may be
  // running now.
  void Retire(uint32_t id);
  class LogErrors : public kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override;
  };

  kj::LowLevelAsyncIoProvider& io_;
  int to_fd_ = -1;  // to_'s fd, for a last kDropAll when the channel is taken down
  std::vector<Held> held_;
  kj::Own<kj::AsyncOutputStream> to_;
  kj::Own<kj::AsyncInputStream> from_;
  kj::Function<void(std::string)> on_down_;
  Options options_;
  State state_ = State::kStarting;
  std::string down_reason_;
  spawner::FrameReader reader_{spawner::kMaxUpPayload};
  std::deque<std::string> outbox_;
  size_t outbox_bytes_ = 0;
  bool sending_ = false;
  kj::Promise<void> write_loop_ = nullptr;
  kj::Promise<void> read_loop_ = nullptr;
  uint32_t next_id_ = 1;
  kj::Own<kj::PromiseFulfiller<void>> hello_fulfiller_;
  kj::ForkedPromise<void> hello_ = nullptr;
  size_t extra_credit_ = 0;
  bool told_to_exit_ = false;
  bool hello_seen_ = false;
  bool refused_version_ = false;  // its hello named another version (kDropAll was sent)
  bool overflowed_ = false;  // the outbox passed its bound: the channel goes down next turn
  std::map<uint32_t, kj::Own<Proc>> procs_;
  // Processes done here (exit and output delivered) that the broker has not released: the
  // spawner still keeps each, and hears kRelease when the broker lets go (at most as many as
  // the broker keeps ended processes).
  std::set<uint32_t> finished_;
  LogErrors log_errors_;
  kj::TaskSet deferred_{log_errors_};  // declared last: cancelled first
};

}  // namespace paseo
