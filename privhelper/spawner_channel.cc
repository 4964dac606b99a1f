// See spawner_channel.h.
#include "privhelper/spawner_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kj/debug.h>

#include "absl/strings/str_cat.h"
#include "common/rpc_errors.h"

namespace paseo {
namespace {

using spawner::Type;

struct Pipe {
  kj::AutoCloseFd read, write;
};

std::optional<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return std::nullopt;
  Pipe p{kj::AutoCloseFd(fds[0]), kj::AutoCloseFd(fds[1])};
  return p;
}

// The broker's ends are blocking, as a runsc exec's pipes are: only the privhelper's own end of
// each pipe (a separate open file description) stays non-blocking for the event loop.
void MakeBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); }

constexpr uint kOwned = kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP |
                        kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC |
                        kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK;

// A wait status the spawner reported, as a ProcessExit; nullopt if it is neither an exit nor a
// death by a signal a process can die of.
std::optional<ProcessExit> DecodeWaitStatus(uint32_t raw) {
  int status = static_cast<int>(raw);
  if (WIFEXITED(status) && (status & 0xff) == 0 && (raw >> 16) == 0)
    return ProcessExit::Exited(WEXITSTATUS(status));
  if (WIFSIGNALED(status) && WTERMSIG(status) >= 1 && WTERMSIG(status) <= 64 && (raw >> 16) == 0)
    return ProcessExit::Signaled(WTERMSIG(status));
  return std::nullopt;
}

std::string Lowercased(const char* text) {
  std::string s = text;
  if (!s.empty()) s[0] = static_cast<char>(tolower(static_cast<unsigned char>(s[0])));
  return s;
}

}  // namespace

void SpawnerChannel::LogErrors::taskFailed(kj::Exception&& e) {
  KJ_LOG(ERROR, "spawner channel task failed", e);
}

SpawnerChannel::SpawnerChannel(kj::LowLevelAsyncIoProvider& io, kj::AutoCloseFd to_spawner,
                               kj::AutoCloseFd from_spawner,
                               kj::Function<void(std::string)> on_down)
    : io_(io), on_down_(kj::mv(on_down)) {
  auto hello = kj::newPromiseAndFulfiller<void>();
  hello_fulfiller_ = kj::mv(hello.fulfiller);
  hello_ = hello.promise.fork();
  fcntl(to_spawner.get(), F_SETFL, fcntl(to_spawner.get(), F_GETFL) | O_NONBLOCK);
  fcntl(from_spawner.get(), F_SETFL, fcntl(from_spawner.get(), F_GETFL) | O_NONBLOCK);
  to_ = io_.wrapOutputFd(to_spawner.release(), kOwned);
  from_ = io_.wrapInputFd(from_spawner.release(), kOwned);
  read_loop_ = ReadLoop().eagerlyEvaluate([this](kj::Exception&& e) {
    Down(absl::StrCat("cannot read from it: ", e.getDescription().cStr()), true);
  });
}

SpawnerChannel::~SpawnerChannel() noexcept(false) {
  Down("the sandbox is being deleted", false);
}

// ---------------------------------------------------------------- the channel

void SpawnerChannel::Send(std::string frame) {
  if (state_ == State::kDown) return;
  // Bounded whatever the spawner does: one frame (a start may be large) always fits.
  if (!outbox_.empty() && outbox_bytes_ + frame.size() > kMaxOutboxBytes) {
    // Down after this turn: Send runs inside continuations of a process's own promises (its
    // input pump), which Down destroys.
    if (!overflowed_) {
      overflowed_ = true;
      deferred_.add(kj::evalLater([this, queued = outbox_bytes_] {
        Down(absl::StrCat("it stopped reading (", queued, " bytes queued for it)"), true);
      }));
    }
    return;
  }
  outbox_bytes_ += frame.size();
  outbox_.push_back(kj::mv(frame));
  if (sending_) return;
  sending_ = true;
  // evalNow: a write that fails at once (EPIPE) throws, and must end the loop, not the caller.
  write_loop_ = kj::evalNow([this] { return WriteLoop(); })
                    .eagerlyEvaluate([this](kj::Exception&& e) {
                      Down(absl::StrCat("cannot write to it: ", e.getDescription().cStr()), true);
                    });
}

kj::Promise<void> SpawnerChannel::WriteLoop() {
  if (outbox_.empty() || state_ == State::kDown) {
    sending_ = false;
    return kj::READY_NOW;
  }
  const std::string& front = outbox_.front();
  return to_->write(front.data(), front.size()).then([this] {
    outbox_bytes_ -= outbox_.front().size();
    outbox_.pop_front();
    return WriteLoop();
  });
}

kj::Promise<void> SpawnerChannel::ReadLoop() {
  auto buf = kj::heapArray<char>(256 * 1024);
  auto read = from_->tryRead(buf.begin(), 1, buf.size());
  return read.then([this, buf = kj::mv(buf)](size_t n) -> kj::Promise<void> {
    if (state_ == State::kDown) return kj::READY_NOW;
    if (n == 0) {
      Down("it ended", true);
      return kj::READY_NOW;
    }
    reader_.Feed(std::string_view(buf.begin(), n));
    bool error = false;
    while (auto frame = reader_.Next(&error)) {
      absl::Status applied = Apply(*frame);
      if (!applied.ok()) {
        Down(absl::StrCat("it broke the protocol: ", applied.message()), true);
        return kj::READY_NOW;
      }
      if (state_ == State::kDown) return kj::READY_NOW;
    }
    if (error) {
      Down("it broke the protocol: a frame longer than allowed", true);
      return kj::READY_NOW;
    }
    return ReadLoop();
  });
}

absl::Status SpawnerChannel::Apply(const spawner::Frame& frame) {
  std::optional<spawner::UpEvent> event = spawner::DecodeUp(frame);
  if (!event)
    return absl::InvalidArgumentError(
        absl::StrCat("malformed frame of type ", static_cast<int>(frame.type)));
  if (event->type == Type::kHello) {
    if (state_ != State::kStarting) return absl::InvalidArgumentError("a second hello");
    if (event->value != spawner::kVersion)
      return absl::InvalidArgumentError(absl::StrCat("protocol version ", event->value));
    state_ = State::kUp;
    hello_fulfiller_->fulfill();
    return absl::OkStatus();
  }
  if (state_ != State::kUp) return absl::InvalidArgumentError("a frame before hello");
  return ApplyToProcess(*event);
}

absl::Status SpawnerChannel::ApplyToProcess(const spawner::UpEvent& e) {
  auto it = procs_.find(e.id);
  if (it == procs_.end()) {
    // Credit for input sent to a process just as it ended is harmless; anything else about an
    // id this channel never issued, or has finished with, is a lie.
    if (e.type == Type::kInputCredit && e.id != 0 && e.id < next_id_) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("a frame for unknown process ", e.id));
  }
  Proc& p = *it->second;
  bool live = p.started && !p.exit;
  switch (e.type) {
    case Type::kStarted:
      if (p.started) return absl::InvalidArgumentError("started twice");
      p.started = true;
      StartInput(p);
      p.child_in = nullptr;
      p.child_out = nullptr;
      p.child_err = nullptr;
      p.chdir_refused = nullptr;
      return absl::OkStatus();
    case Type::kFailed: {
      if (p.started) return absl::InvalidArgumentError("failed after it started");
      uint32_t error = e.value & 0xffff;
      if (e.stream == 1 && (error == EACCES || error == EPERM) && HandOver(p))
        return absl::OkStatus();
      // As `runsc exec` does for a program it cannot start: a message on its error stream and
      // no exit status of its own.
      const char* what = e.stream == 1 ? "cannot enter the working directory for" : "cannot run";
      std::string msg = absl::StrCat("paseo-sandbox: ", what, " the process: ",
                                     Lowercased(strerror(static_cast<int>(e.value & 0xffff))), "\n");
      Stream& s = p.merged ? p.out : p.err;
      s.queued += msg.size();
      s.queue.push_back(kj::mv(msg));
      p.out.ended = true;
      p.err.ended = true;
      p.started = true;
      p.exit = ProcessExit::Unknown();
      PumpOutput(p, p.out, spawner::kStdout);
      PumpOutput(p, p.err, spawner::kStderr);
      p.input = nullptr;
      p.stdin_r = nullptr;
      MaybeFinish(p);
      return absl::OkStatus();
    }
    case Type::kOutput:
    case Type::kEnd: {
      if (!p.started) return absl::InvalidArgumentError("output before start");
      if (p.merged && e.stream == spawner::kStderr)
        return absl::InvalidArgumentError("stderr of a terminal process");
      Stream& s = e.stream == spawner::kStdout ? p.out : p.err;
      if (s.ended) return absl::InvalidArgumentError("output after end-of-file");
      if (e.type == Type::kEnd) {
        s.ended = true;
      } else {
        if (e.data.size() > s.allowed) return absl::InvalidArgumentError("output beyond credit");
        s.allowed -= static_cast<uint32_t>(e.data.size());
        // The spawner ran out of credit (its hint; it can only widen its own window, within
        // the channel's budget): a round trip, not the reader, may be what it waits for.
        if (e.starved) s.starved = true;
        s.queued += e.data.size();
        s.queue.push_back(e.data);
      }
      PumpOutput(p, s, e.stream);
      return absl::OkStatus();
    }
    case Type::kExit: {
      if (!live) return absl::InvalidArgumentError("exit of a process not running");
      std::optional<ProcessExit> exit = DecodeWaitStatus(e.value);
      if (!exit) return absl::InvalidArgumentError(absl::StrCat("wait status ", e.value));
      p.exit = *exit;
      // Nothing is relayed to a process that has ended (the spawner closed its stdin).
      p.input = nullptr;
      p.stdin_r = nullptr;
      MaybeFinish(p);
      return absl::OkStatus();
    }
    case Type::kInputCredit: {
      if (uint64_t{p.input_credit} + e.value > spawner::kInputWindow)
        return absl::InvalidArgumentError("input credit beyond what was sent");
      p.input_credit += e.value;
      if (p.credit_waiter.get() != nullptr && p.input_credit > 0) p.credit_waiter->fulfill();
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError("a frame the spawner does not send");
  }
}

// ---------------------------------------------------------------- processes

bool SpawnerChannel::HandOver(Proc& p) {
  KJ_IF_MAYBE(refused, p.chdir_refused) {
    int err = p.merged ? p.child_out.get() : p.child_err.get();
    auto exit = (*refused)(p.child_in.get(), p.child_out.get(), err);
    if (!exit.ok()) {
      KJ_LOG(WARNING, "cannot start a process the spawner could not", exit.status().ToString());
      return false;
    }
    // Its pipes are the runsc exec's now: this channel lets go of its ends, and the exit is
    // the runsc exec's.
    p.chdir_refused = nullptr;
    p.child_in = nullptr;
    p.child_out = nullptr;
    p.child_err = nullptr;
    p.input = nullptr;
    p.stdin_r = nullptr;
    for (Stream* s : {&p.out, &p.err}) {
      s->pipe = nullptr;
      s->ended = true;
    }
    p.started = true;
    p.exit = ProcessExit::Unknown();  // nothing more comes from the spawner for it
    deferred_.add(exit->then([f = kj::mv(p.exit_fulfiller)](ProcessExit x) mutable {
      f->fulfill(kj::mv(x));
    }));
    MaybeFinish(p);
    return true;
  }
  return false;
}

absl::StatusOr<SpawnerChannel::Started> SpawnerChannel::Start(const spawner::StartRequest& request,
                                                              kj::Maybe<ChdirRefused> chdir_refused) {
  if (state_ != State::kUp) return absl::UnavailableError("the spawner is not running");
  size_t running = 0;
  for (const auto& [id, proc] : procs_) running += proc->exit ? 0 : 1;
  if (running >= kMaxProcesses) return absl::ResourceExhaustedError("too many processes");
  // Ids are never reused in a channel (a late frame for an old one would land on a new one):
  // after 2^32 - 1 starts the sandbox's processes are runsc execs.
  if (next_id_ == UINT32_MAX) return absl::UnavailableError("the spawner has used every id");
  uint32_t id = next_id_;
  std::optional<std::string> frame = spawner::EncodeStart(id, request);
  if (!frame) return absl::InvalidArgumentError("command too large for the spawner");
  if (!outbox_.empty() && outbox_bytes_ + frame->size() > kMaxOutboxBytes) {
    Down(absl::StrCat("it stopped reading (", outbox_bytes_, " bytes queued for it)"), true);
    return absl::UnavailableError("the spawner went down");
  }
  auto in = MakePipe();
  auto out = MakePipe();
  auto err = MakePipe();
  if (!in || !out || !err) return absl::ResourceExhaustedError("out of pipes");
  MakeBlocking(in->write.get());
  MakeBlocking(out->read.get());
  MakeBlocking(err->read.get());
  // Output pipes as large as a stream's widest window, so a window's worth is written in one go
  // (the kernel may refuse past the user's pipe quota: then 64 KiB, and only slower).
  fcntl(out->write.get(), F_SETPIPE_SZ, spawner::kMaxOutputWindow);
  fcntl(err->write.get(), F_SETPIPE_SZ, spawner::kMaxOutputWindow);
  ++next_id_;
  auto proc = kj::heap<Proc>();
  Proc& p = *proc;
  p.id = id;
  p.merged = request.merge_stderr;
  KJ_IF_MAYBE(refused, chdir_refused) {
    // New open file descriptions of the same pipes, blocking as a runsc exec's stdio is (gVisor
    // shows the program a host fd's flags): not dups of the privhelper's non-blocking ones.
    auto reopen = [](int fd, int mode) {
      return kj::AutoCloseFd(open(absl::StrCat("/proc/self/fd/", fd).c_str(), mode | O_CLOEXEC));
    };
    p.child_in = reopen(in->read.get(), O_RDONLY);
    p.child_out = reopen(out->write.get(), O_WRONLY);
    if (!p.merged) p.child_err = reopen(err->write.get(), O_WRONLY);
    if (p.child_in.get() >= 0 && p.child_out.get() >= 0 && (p.merged || p.child_err.get() >= 0))
      p.chdir_refused = kj::mv(*refused);
  }
  p.stdin_r = io_.wrapInputFd(in->read.release(), kOwned);
  p.out.pipe = io_.wrapOutputFd(out->write.release(), kOwned);
  if (p.merged) {
    err->write = nullptr;  // the broker's stderr is at end-of-file from the start
    p.err.ended = true;
  } else {
    p.err.pipe = io_.wrapOutputFd(err->write.release(), kOwned);
  }
  auto exit = kj::newPromiseAndFulfiller<ProcessExit>();
  p.exit_fulfiller = kj::mv(exit.fulfiller);
  procs_.emplace(id, kj::mv(proc));
  Send(kj::mv(*frame));
  // Its input is relayed once it started (StartInput): until then it may still be handed over.
  return Started{id, kj::mv(in->write), kj::mv(out->read), kj::mv(err->read),
                 kj::mv(exit.promise)};
}

void SpawnerChannel::StartInput(Proc& p) {
  uint32_t id = p.id;
  p.input = PumpInput(p).eagerlyEvaluate([this, id](kj::Exception&& e) {
    // The broker's stdin pipe failed: the process sees end-of-file.
    KJ_LOG(WARNING, "a spawned process's input failed", e);
    Send(spawner::Encode(Type::kCloseInput, id, ""));
  });
}

kj::Promise<void> SpawnerChannel::PumpInput(Proc& p) {
  if (p.input_credit == 0) {
    auto wait = kj::newPromiseAndFulfiller<void>();
    p.credit_waiter = kj::mv(wait.fulfiller);
    return wait.promise.then([this, &p] { return PumpInput(p); });
  }
  size_t want = std::min<size_t>(p.input_credit, spawner::kMaxInputChunk);
  auto buf = kj::heapArray<char>(want);
  auto read = p.stdin_r->tryRead(buf.begin(), 1, want);
  // `p` outlives this promise: it is p.input, which goes with p.
  return read.then([this, &p, buf = kj::mv(buf)](size_t n) -> kj::Promise<void> {
    if (n == 0) {
      Send(spawner::Encode(Type::kCloseInput, p.id, ""));
      return kj::READY_NOW;
    }
    p.input_credit -= static_cast<uint32_t>(n);
    Send(spawner::Encode(Type::kInput, p.id, std::string_view(buf.begin(), n)));
    return PumpInput(p);
  });
}

void SpawnerChannel::PumpOutput(Proc& p, Stream& s, uint8_t which) {
  if (s.writing) return;  // the running chain takes what was queued
  if (s.broken || s.pipe.get() == nullptr) {
    // Nobody reads it: what arrives is dropped, and credited so the spawner keeps draining.
    bool dropped = !s.queue.empty();
    s.queue.clear();
    s.queued = 0;
    if (dropped) Refill(p, s, which, false);
    MaybeFinish(p);
    return;
  }
  if (s.queue.empty()) {
    if (s.ended) s.pipe = nullptr;  // end-of-file for the broker
    MaybeFinish(p);
    return;
  }
  s.writing = true;
  // `p` and `s` outlive the chain: it is s.write, which goes with them.
  // evalNow: a write that fails at once (EPIPE) throws; that is the handler's, not the caller's.
  s.write = kj::evalNow([this, &p, &s, which] { return WriteQueued(p, s, which); })
                .eagerlyEvaluate([this, &p, &s, which](kj::Exception&&) {
    // EPIPE: the broker and the privhelper's kept copy are both gone.
    s.writing = false;
    s.broken = true;
    s.pipe = nullptr;
    PumpOutput(p, s, which);
  });
}

kj::Promise<void> SpawnerChannel::WriteQueued(Proc& p, Stream& s, uint8_t which) {
  if (s.queue.empty()) {
    s.writing = false;
    if (s.ended) s.pipe = nullptr;
    MaybeFinish(p);
    return kj::READY_NOW;
  }
  const std::string& chunk = s.queue.front();
  return s.pipe->write(chunk.data(), chunk.size()).then([this, &p, &s, which] {
    s.queued -= s.queue.front().size();
    s.queue.pop_front();
    // Written into the broker's pipe: the spawner may send more.
    Refill(p, s, which, true);
    return WriteQueued(p, s, which);
  });
}

size_t SpawnerChannel::Extra(const Stream& s) {
  size_t held = std::max<size_t>(s.window, size_t{s.allowed} + s.queued);
  return held > spawner::kInitialOutputWindow ? held - spawner::kInitialOutputWindow : 0;
}

void SpawnerChannel::Refill(Proc& p, Stream& s, uint8_t which, bool flowing) {
  if (s.ended) return;
  size_t before = Extra(s);
  size_t outstanding = size_t{s.allowed} + s.queued;
  // The broker took everything and the spawner had run out of credit: the window, not the
  // reader, is what limits this stream. Doubling it adds at most the old window to the extra.
  if (flowing && s.queued == 0 && s.starved && s.window < spawner::kMaxOutputWindow) {
    s.starved = false;
    size_t room = kMaxExtraCredit - std::min(kMaxExtraCredit, extra_credit_);
    size_t grow = std::min<size_t>({s.window, spawner::kMaxOutputWindow - s.window, room});
    s.window += static_cast<uint32_t>(grow);
  }
  if (outstanding < s.window) {
    uint32_t grant = static_cast<uint32_t>(s.window - outstanding);
    s.allowed += grant;
    Send(spawner::EncodeGrant(Type::kGrant, p.id, which, grant));
  }
  extra_credit_ = extra_credit_ - before + Extra(s);
}

void SpawnerChannel::ForgetCredit(Proc& p) {
  extra_credit_ -= std::min(extra_credit_, Extra(p.out) + Extra(p.err));
}

void SpawnerChannel::MaybeFinish(Proc& p) {
  bool written = p.out.queue.empty() && p.err.queue.empty() && !p.out.writing && !p.err.writing;
  if (p.exit && written && p.exit_fulfiller.get() != nullptr && p.exit_fulfiller->isWaiting()) {
    p.exit_fulfiller->fulfill(ProcessExit(*p.exit));
  }
  bool closed = p.out.pipe.get() == nullptr && p.err.pipe.get() == nullptr;
  // A released process whose in-sandbox pipes are still held stays known (without fds) until the
  // spawner ends them, so what still arrives for it is dropped and credited, not a violation.
  bool drained = !p.released || (p.out.ended && p.err.ended);
  if (p.exit && written && closed && drained) Retire(p.id);
}

void SpawnerChannel::Retire(uint32_t id) {
  deferred_.add(kj::evalLater([this, id] {
    auto it = procs_.find(id);
    if (it == procs_.end()) return;
    ForgetCredit(*it->second);
    procs_.erase(it);
  }));
}

absl::Status SpawnerChannel::Signal(uint32_t id, int sig) {
  auto it = procs_.find(id);
  if (state_ != State::kUp || it == procs_.end() || it->second->exit)
    return absl::FailedPreconditionError("process has ended");
  Send(spawner::EncodeU32(Type::kSignal, id, static_cast<uint32_t>(sig)));
  return absl::OkStatus();
}

void SpawnerChannel::Fail(std::string reason) { Down(kj::mv(reason), true); }

void SpawnerChannel::ExitSpawner() {
  told_to_exit_ = true;
  Send(spawner::Encode(Type::kExitSpawner, 0, ""));
}

void SpawnerChannel::Release(uint32_t id) {
  auto it = procs_.find(id);
  if (it == procs_.end() || !it->second->exit) return;
  Proc& p = *it->second;
  p.released = true;
  for (Stream* s : {&p.out, &p.err}) {
    s->write = nullptr;  // cancels a write in flight (the broker no longer reads)
    s->writing = false;
    s->broken = true;
    s->pipe = nullptr;
  }
  p.input = nullptr;
  p.stdin_r = nullptr;
  PumpOutput(p, p.out, spawner::kStdout);
  PumpOutput(p, p.err, spawner::kStderr);
}

void SpawnerChannel::Down(std::string reason, bool notify) {
  if (state_ == State::kDown) return;
  state_ = State::kDown;
  down_reason_ = reason;
  if (hello_fulfiller_->isWaiting()) hello_fulfiller_->fulfill();
  // Told to exit, it ending is the expected news, not a warning.
  if (told_to_exit_) {
    KJ_LOG(INFO, "a sandbox's spawner exited", reason);
  } else {
    KJ_LOG(WARNING, "a sandbox's spawner is down", reason);
  }
  std::string notice = absl::StrCat("paseo-sandbox: the sandbox's process spawner went down (",
                                    reason, "); this process was killed with it\n");
  for (auto& [id, proc] : procs_) {
    Proc& p = *proc;
    if (p.exit) continue;
    p.exit = ProcessExit::Unknown();
    p.input = nullptr;
    p.stdin_r = nullptr;
    if (!notify) {
      // Destruction: nothing more can be written; the exit is all that is left to report.
      if (p.exit_fulfiller->isWaiting()) p.exit_fulfiller->fulfill(ProcessExit::Unknown());
      continue;
    }
    Stream& s = p.merged ? p.out : p.err;
    if (!s.ended && !s.broken) {
      s.queued += notice.size();
      s.queue.push_back(notice);
    }
    p.out.ended = true;
    p.err.ended = true;
    PumpOutput(p, p.out, spawner::kStdout);
    PumpOutput(p, p.err, spawner::kStderr);
    MaybeFinish(p);
  }
  if (!notify) return;
  // The spawner sees end-of-file on its channel and kills what it still runs. Closed after this
  // turn: a continuation of the read or write loop may be what called Down.
  deferred_.add(kj::evalLater([this] {
    write_loop_ = nullptr;
    read_loop_ = nullptr;
    to_ = nullptr;
    from_ = nullptr;
  }));
  on_down_(kj::mv(reason));
}

}  // namespace paseo
