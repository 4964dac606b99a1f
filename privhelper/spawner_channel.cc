// See spawner_channel.h.
#include "privhelper/spawner_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <kj/debug.h>

#include "absl/strings/str_cat.h"
#include "common/ids.h"
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
                               kj::Function<void(std::string)> on_down, Options options)
    : io_(io), on_down_(kj::mv(on_down)), options_(kj::mv(options)) {
  auto hello = kj::newPromiseAndFulfiller<void>();
  hello_fulfiller_ = kj::mv(hello.fulfiller);
  hello_ = hello.promise.fork();
  fcntl(to_spawner.get(), F_SETFL, fcntl(to_spawner.get(), F_GETFL) | O_NONBLOCK);
  fcntl(from_spawner.get(), F_SETFL, fcntl(from_spawner.get(), F_GETFL) | O_NONBLOCK);
  to_fd_ = to_spawner.get();
  to_ = io_.wrapOutputFd(to_spawner.release(), kOwned);
  from_ = io_.wrapInputFd(from_spawner.release(), kOwned);
  // A reattach proves itself first: the spawner takes a channel only with its key.
  if (options_.reattach) Send(spawner::Encode(Type::kAttach, 0, options_.key));
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
        // failed-precondition: a spawner of another version, which is no violation.
        Down(applied.code() == absl::StatusCode::kFailedPrecondition
                 ? std::string(applied.message())
                 : absl::StrCat("it broke the protocol: ", applied.message()),
             true);
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
    if (state_ != State::kStarting || hello_seen_) return absl::InvalidArgumentError("a second hello");
    if (event->value != spawner::kVersion) {
      // Another version's frames cannot be read: its processes go (Down's kDropAll means the
      // same in every version), the sandbox stays.
      refused_version_ = true;
      return absl::FailedPreconditionError(absl::StrCat(
          "it speaks spawner protocol version ", event->value, ", this privhelper ",
          spawner::kVersion, "; its processes were ended"));
    }
    hello_seen_ = true;
    if (!options_.reattach && !options_.key.empty()) Send(spawner::Encode(Type::kKey, 0, options_.key));
    return absl::OkStatus();
  }
  if (!hello_seen_) return absl::InvalidArgumentError("a frame before hello");
  if (state_ == State::kStarting) {
    if (event->type == Type::kHeld) return ApplyHeld(*event);
    if (event->type != Type::kHeldEnd) return absl::InvalidArgumentError("a frame before its list");
    state_ = State::kUp;
    hello_fulfiller_->fulfill();
    return absl::OkStatus();
  }
  if (event->type == Type::kHeld || event->type == Type::kHeldEnd)
    return absl::InvalidArgumentError("a list after the list");
  return ApplyToProcess(*event);
}

absl::Status SpawnerChannel::ApplyHeld(const spawner::UpEvent& e) {
  if (!options_.reattach) return absl::InvalidArgumentError("held processes on a new channel");
  const spawner::HeldProcess& h = e.held;
  if (procs_.size() >= kMaxProcesses) return absl::InvalidArgumentError("too many held processes");
  if (e.id == 0 || e.id == UINT32_MAX || procs_.count(e.id))
    return absl::InvalidArgumentError(absl::StrCat("held process id ", e.id));
  if (!IsValidId(h.name)) return absl::InvalidArgumentError("a held process's name");
  for (const auto& [id, proc] : procs_) {
    if (proc->name == h.name) return absl::InvalidArgumentError("a held process's name, twice");
  }
  // Only what the spawner can have kept: the privhelper's memory does not depend on its word.
  if (h.out_end - h.out_base > spawner::kMaxRetainedBytes ||
      h.err_end - h.err_base > spawner::kMaxRetainedBytes ||
      (h.merged && (h.err_end != 0 || !h.err_eof)))
    return absl::InvalidArgumentError("a held process's streams");
  auto proc = kj::heap<Proc>();
  Proc& p = *proc;
  p.id = e.id;
  p.held = true;
  p.started = true;
  p.merged = h.merged;
  p.drop_oldest = h.drop_oldest;
  p.name = h.name;
  p.input_closed = h.input_closed;
  auto exit = kj::newPromiseAndFulfiller<ProcessExit>();
  p.exit_fulfiller = kj::mv(exit.fulfiller);
  held_.push_back(Held{e.id, h.name, h.merged, h.input_closed, kj::mv(exit.promise)});
  next_id_ = std::max(next_id_, e.id + 1);
  procs_.emplace(e.id, kj::mv(proc));
  return absl::OkStatus();
}

std::vector<SpawnerChannel::Held> SpawnerChannel::TakeHeld() { return std::move(held_); }

absl::StatusOr<kj::Promise<SpawnerChannel::Resumed>> SpawnerChannel::Resume(uint32_t id,
                                                                            uint64_t out,
                                                                            uint64_t err) {
  if (state_ != State::kUp)
    return absl::UnavailableError(absl::StrCat("the sandbox's spawner went down (", down_reason_, ")"));
  auto it = procs_.find(id);
  if (it == procs_.end() || !it->second->held || it->second->resumed.get() != nullptr)
    return absl::FailedPreconditionError("the process is not held by a reattached spawner");
  Proc& p = *it->second;
  auto in = MakePipe();
  auto o = MakePipe();
  auto e = MakePipe();
  if (!in || !o || !e) return absl::ResourceExhaustedError("out of pipes");
  MakeBlocking(in->write.get());
  MakeBlocking(o->read.get());
  MakeBlocking(e->read.get());
  fcntl(o->write.get(), F_SETPIPE_SZ, spawner::kMaxOutputWindow);
  fcntl(e->write.get(), F_SETPIPE_SZ, spawner::kMaxOutputWindow);
  p.out.raw = o->write.get();
  p.out.pipe = io_.wrapOutputFd(o->write.release(), kOwned);
  if (p.merged) {
    e->write = nullptr;
    p.err.ended = true;
  } else {
    p.err.raw = e->write.get();
    p.err.pipe = io_.wrapOutputFd(e->write.release(), kOwned);
  }
  if (p.input_closed) {
    in->write = nullptr;
    in->read = nullptr;
  } else {
    p.stdin_r = io_.wrapInputFd(in->read.release(), kOwned);
  }
  p.resume_in = kj::mv(in->write);
  p.resume_out = kj::mv(o->read);
  p.resume_err = kj::mv(e->read);
  p.asked_out = out;
  p.asked_err = err;
  // No credit until the spawner says where it continues.
  p.out.allowed = 0;
  p.err.allowed = 0;
  auto paf = kj::newPromiseAndFulfiller<Resumed>();
  p.resumed = kj::mv(paf.fulfiller);
  Send(spawner::EncodeOffsets(Type::kResume, id, out, err));
  if (options_.timer != nullptr) {
    deferred_.add(options_.timer->afterDelay(options_.resume_patience).then([this, id] {
      auto it = procs_.find(id);
      if (state_ != State::kUp || it == procs_.end() || it->second->resumed.get() == nullptr ||
          !it->second->resumed->isWaiting())
        return;
      Fail(absl::StrCat("it did not answer the resume of process ", id, " within ",
                        options_.resume_patience / kj::MILLISECONDS, " ms"));
    }));
  }
  return kj::mv(paf.promise);
}

absl::Status SpawnerChannel::ApplyResumed(Proc& p, const spawner::UpEvent& e) {
  if (!p.held || p.resumed.get() == nullptr || !p.resumed->isWaiting())
    return absl::InvalidArgumentError("resumed without a resume");
  // Never before what the broker has (that would repeat bytes), never past what it asked plus
  // what the spawner can have dropped.
  auto check = [](uint64_t asked, uint64_t start) {
    return start >= asked && start - asked <= (uint64_t{1} << 62);
  };
  if (!check(p.asked_out, e.out_offset) || !check(p.asked_err, e.err_offset) ||
      (p.merged && e.err_offset != p.asked_err))
    return absl::InvalidArgumentError("resumed at an offset before the one asked");
  p.held = false;
  for (Stream* s : {&p.out, &p.err}) {
    uint64_t start = s == &p.out ? e.out_offset : e.err_offset;
    s->written = start;
    s->acked = start;
    if (s->ended) continue;
    s->allowed = spawner::kInitialOutputWindow;
  }
  if (p.stdin_r.get() != nullptr) StartInput(p);
  p.resumed->fulfill(Resumed{kj::mv(p.resume_in), kj::mv(p.resume_out), kj::mv(p.resume_err),
                             e.out_offset, e.err_offset});
  return absl::OkStatus();
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
  if (e.type == Type::kResumed) return ApplyResumed(p, e);
  // Held: nothing comes for it until it is resumed.
  if (p.held) return absl::InvalidArgumentError("a frame for a process not resumed");
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
  p.out.raw = out->write.get();
  p.out.pipe = io_.wrapOutputFd(out->write.release(), kOwned);
  if (p.merged) {
    err->write = nullptr;  // the broker's stderr is at end-of-file from the start
    p.err.ended = true;
  } else {
    p.err.raw = err->write.get();
    p.err.pipe = io_.wrapOutputFd(err->write.release(), kOwned);
  }
  p.name = request.name;
  p.drop_oldest = request.drop_oldest;
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
    s.written += s.queue.front().size();
    s.queued -= s.queue.front().size();
    s.queue.pop_front();
    // Written into the broker's pipe: the spawner may send more.
    Refill(p, s, which, true);
    if (s.queue.empty()) AckLater(p.id, which);
    return WriteQueued(p, s, which);
  });
}

uint64_t SpawnerChannel::Logged(const Stream& s) {
  if (s.raw < 0 || s.pipe.get() == nullptr) return s.acked;
  int queued = 0;
  if (ioctl(s.raw, FIONREAD, &queued) != 0 || queued < 0) return s.acked;
  // A write in flight may have put part of a chunk in the pipe that `written` does not count
  // yet: then this is lower than the truth, never higher.
  uint64_t left = std::min<uint64_t>(s.written, static_cast<uint64_t>(queued));
  return std::max(s.acked, s.written - left);
}

void SpawnerChannel::AckLater(uint32_t id, uint8_t which) {
  auto it = procs_.find(id);
  if (options_.timer == nullptr || it == procs_.end()) return;
  Stream& s = which == spawner::kStdout ? it->second->out : it->second->err;
  if (s.ack_pending || s.acked == s.written) return;
  s.ack_pending = true;
  deferred_.add(options_.timer->afterDelay(kAckDelay).then([this, id, which] {
    auto it = procs_.find(id);
    if (it == procs_.end() || state_ != State::kUp) return;
    Stream& s = which == spawner::kStdout ? it->second->out : it->second->err;
    s.ack_pending = false;
    uint64_t logged = Logged(s);
    if (logged > s.acked) {
      s.acked = logged;
      Send(spawner::EncodeGrant(id, which, 0, logged));
    }
    // The broker has not taken all of it yet: look again later.
    if (s.acked < s.written) AckLater(id, which);
  }));
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
    s.acked = Logged(s);
    Send(spawner::EncodeGrant(p.id, which, grant, s.acked));
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
    // The spawner keeps it (for a reattach) until the broker lets go of it: Release tells it.
    if (!it->second->released) finished_.insert(id);
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
  if (finished_.erase(id)) {
    if (state_ == State::kUp) Send(spawner::Encode(Type::kRelease, id, ""));
    return;
  }
  auto it = procs_.find(id);
  if (it == procs_.end() || !it->second->exit) return;
  Proc& p = *it->second;
  // The spawner forgets it too (it keeps every process until then, for a reattach), sending
  // the ends of its streams it has not sent.
  if (state_ == State::kUp) Send(spawner::Encode(Type::kRelease, id, ""));
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
  // A spawner taken down keeps its processes for a reattach unless told otherwise: they are
  // reported ended here, so they must not run on unseen. Only between frames (a frame written in
  // part would garble it); a spawner that withholds reading loses nothing by not hearing it.
  if (notify && !told_to_exit_ && !sending_ && to_fd_ >= 0) {
    std::string drop = spawner::Encode(Type::kDropAll, 0, "");
    (void)!write(to_fd_, drop.data(), drop.size());
  }
  state_ = State::kDown;
  down_reason_ = reason;
  for (auto& [id, proc] : procs_) {
    if (proc->resumed.get() != nullptr && proc->resumed->isWaiting())
      proc->resumed->reject(KJ_EXCEPTION(DISCONNECTED, "the spawner went down", reason));
  }
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
