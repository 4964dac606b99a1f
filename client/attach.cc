// See attach.h.
#include "client/attach.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <kj/async-unix.h>
#include <kj/debug.h>

#include "client/output_sink.h"

namespace paseo::client {
namespace {

constexpr char kDetachFirst = 0x10;   // Ctrl-P
constexpr char kDetachSecond = 0x11;  // Ctrl-Q

// Puts the local terminal in raw mode for the lifetime of the object.
class RawTerminal {
 public:
  explicit RawTerminal(int fd) : fd_(fd) {
    if (!isatty(fd_) || tcgetattr(fd_, &saved_) != 0) return;
    termios raw = saved_;
    cfmakeraw(&raw);
    active_ = tcsetattr(fd_, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(fd_, TCSANOW, &saved_);
  }

 private:
  int fd_;
  termios saved_ = {};
  bool active_ = false;
};

// Copies stdin to the process; resolves true at a detach sequence, false at EOF (after
// closeInput). What was typed before the sequence in the same read is still sent; the sequence
// itself is not (a Ctrl-P sent in an earlier read has gone already).
kj::Promise<bool> ForwardInput(kj::AsyncInputStream& in, api::Process::Client process,
                               bool detach_keys, bool* saw_first) {
  auto buf = kj::heapArray<capnp::byte>(16384);
  auto read = in.tryRead(buf.begin(), 1, buf.size());
  return read.then([&in, process, detach_keys, saw_first,
                    buf = kj::mv(buf)](size_t n) mutable -> kj::Promise<bool> {
    if (n == 0) return process.closeInputRequest().send().then([](auto&&) { return false; });
    if (detach_keys) {
      for (size_t i = 0; i < n; ++i) {
        if (*saw_first && buf[i] == kDetachSecond) {
          size_t before = i > 0 ? i - 1 : 0;  // without this read's Ctrl-P
          if (before == 0) return true;
          auto req = process.writeInputRequest();
          req.setData(buf.slice(0, before));
          // writeInput streams: its promise says nothing about delivery. A call after it
          // returns once it has been delivered, before we hang up.
          return req.send()
              .then([process]() mutable { return process.infoRequest().send().ignoreResult(); })
              .then([]() { return true; });
        }
        *saw_first = buf[i] == kDetachFirst;
      }
    }
    auto req = process.writeInputRequest();
    req.setData(buf.slice(0, n));
    return req.send().then([&in, process, detach_keys, saw_first]() mutable {
      return ForwardInput(in, kj::mv(process), detach_keys, saw_first);
    });
  });
}

// Our stdin when epoll refuses it (a regular file, /dev/null): such an fd is always ready, so
// a plain read() does not hold up the event loop. `run -i < file` and `attach < /dev/null`.
class AlwaysReadyInput final : public kj::AsyncInputStream {
 public:
  explicit AlwaysReadyInput(int fd) : fd_(fd) {}

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override {
    size_t total = 0;
    while (total < min_bytes) {
      ssize_t n = ::read(fd_, static_cast<char*>(buffer) + total, max_bytes - total);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                             kj::str("cannot read stdin: ", strerror(errno)));
      }
      if (n == 0) break;
      total += static_cast<size_t>(n);
    }
    return total;
  }

 private:
  int fd_;
};

kj::Own<kj::AsyncInputStream> WrapInput(kj::AsyncIoContext& io, int fd) {
  kj::Own<kj::AsyncInputStream> input;
  // epoll_ctl fails with EPERM for fds that cannot be polled.
  if (kj::runCatchingExceptions([&] { input = io.lowLevelProvider->wrapInputFd(fd); }) !=
      nullptr) {
    input = kj::heap<AlwaysReadyInput>(fd);
  }
  return input;
}

kj::Promise<void> ForwardResizes(kj::UnixEventPort& events, api::Process::Client process) {
  return events.onSignal(SIGWINCH).then([&events, process](siginfo_t) mutable {
    uint16_t rows, cols;
    TerminalSize(&rows, &cols);
    auto req = process.resizeRequest();
    req.setRows(rows);
    req.setCols(cols);
    return req.send().ignoreResult().catch_([](kj::Exception&&) {}).then(
        [&events, process]() mutable { return ForwardResizes(events, kj::mv(process)); });
  });
}

// First SIGINT/SIGTERM is passed on to the process; a second one gives up.
kj::Promise<void> ForwardInterrupts(kj::UnixEventPort& events, api::Process::Client process,
                                    int* count) {
  return events.onSignal(SIGINT)
      .exclusiveJoin(events.onSignal(SIGTERM))
      .then([&events, process, count](siginfo_t info) mutable -> kj::Promise<void> {
        if (++*count > 1) return kj::READY_NOW;
        auto req = process.signalRequest();
        req.setSignal(info.si_signo);
        return req.send().ignoreResult().catch_([](kj::Exception&&) {}).then(
            [&events, process, count]() mutable {
              return ForwardInterrupts(events, kj::mv(process), count);
            });
      });
}

}  // namespace

void CaptureAttachSignals() {
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGTERM);
  kj::UnixEventPort::captureSignal(SIGWINCH);
}

void TerminalSize(uint16_t* rows, uint16_t* cols) {
  winsize ws = {};
  if (ioctl(STDIN_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
    *rows = ws.ws_row;
    *cols = ws.ws_col;
  } else {
    *rows = 24;
    *cols = 80;
  }
}

int ExitCodeOf(api::ExitStatus::Reader status) {
  switch (status.which()) {
    case api::ExitStatus::EXIT_CODE:
      return status.getExitCode();
    case api::ExitStatus::SIGNAL:
      return 128 + status.getSignal();
    case api::ExitStatus::OOM_KILLED:
      return 128 + SIGKILL;  // what a shell reports for an OOM-killed child
    default:
      return 255;
  }
}

int Attach(kj::AsyncIoContext& io, api::Process::Client process, const AttachOptions& options) {
  auto& ws = io.waitScope;
  std::shared_ptr<Messages> messages =
      options.messages != nullptr ? options.messages : std::make_shared<Messages>(STDERR_FILENO);
  // The local terminal may be raw: notices bring their own carriage returns.
  messages->set_raw_terminal(options.tty);
  KJ_DEFER(messages->set_raw_terminal(false));
  kj::Vector<kj::Promise<void>> ended;
  kj::Vector<api::Subscription::Client> subscriptions;
  auto out = std::make_shared<StreamProgress>(), err = std::make_shared<StreamProgress>();
  out->next = options.stdout_from;
  err->next = options.stderr_from;
  // Where each stream got to, for the report of a lost connection.
  auto lost = [&](kj::Exception&& e) -> kj::Exception {
    if (e.getType() != kj::Exception::Type::DISCONNECTED) return kj::mv(e);
    std::string at = options.tty ? "pty offset " + std::to_string(out->next)
                                 : "stdout offset " + std::to_string(out->next) +
                                       " and stderr offset " + std::to_string(err->next);
    return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                         kj::str(kConnectionLostText, " at ", at.c_str()));
  };
  // options.pipelined: both subscriptions and the wait for the exit status go out at once,
  // without a round trip each (a short command's whole life can be shorter than three of them);
  // a failed subscribe then fails the wait for the streams below, as its answer would have.
  kj::Vector<kj::Promise<void>> subscribed;
  auto subscribe = [&](api::Stream stream, std::shared_ptr<StreamProgress> progress, int fd) {
    auto done = kj::newPromiseAndFulfiller<void>();
    auto req = process.subscribeRequest();
    req.setStream(stream);
    req.setFromOffset(progress->next);
    FdOutputSink::Options sink;
    sink.fd = fd;
    sink.messages = messages;
    sink.progress = progress;
    req.setSink(kj::heap<FdOutputSink>(sink, kj::mv(done.fulfiller)));
    auto sent = req.send();
    if (options.pipelined) {
      subscriptions.add(sent.getSubscription());
      subscribed.add(sent.ignoreResult());
    } else {
      subscriptions.add(sent.wait(ws).getSubscription());
    }
    ended.add(kj::mv(done.promise));
  };
  kj::Maybe<kj::Exception> not_subscribed = kj::runCatchingExceptions([&] {
    if (options.tty) {
      subscribe(api::Stream::PTY, out, options.stdout_fd);
    } else {
      subscribe(api::Stream::STDOUT, out, options.stdout_fd);
      subscribe(api::Stream::STDERR, err, options.stderr_fd);
    }
  });
  KJ_IF_MAYBE(e, not_subscribed) { kj::throwFatalException(lost(kj::mv(*e))); }
  kj::Maybe<capnp::RemotePromise<api::Process::WaitResults>> exit_status;
  if (options.pipelined) exit_status = process.waitRequest().send();
  kj::Maybe<RawTerminal> raw;
  if (options.tty && options.forward_stdin) raw.emplace(options.stdin_fd);
  // wrapInputFd makes stdin non-blocking; a shell sharing the terminal would not expect that.
  int stdin_flags = fcntl(options.stdin_fd, F_GETFL);
  kj::Own<kj::AsyncInputStream> input;
  bool saw_first = false;
  auto detached = kj::Promise<bool>(kj::NEVER_DONE);
  if (options.forward_stdin) {
    input = WrapInput(io, options.stdin_fd);
    detached = ForwardInput(*input, process, options.detach_keys, &saw_first)
                   .then([](bool detach) -> kj::Promise<bool> {
                     if (detach) return true;
                     return kj::Promise<bool>(kj::NEVER_DONE);  // EOF: keep following output
                   });
  }
  auto resizes = options.tty ? ForwardResizes(io.unixEventPort, process)
                             : kj::Promise<void>(kj::NEVER_DONE);
  int interrupts = 0;
  // With a raw terminal, Ctrl-C is a byte for the process, not a signal for us.
  auto gave_up = ForwardInterrupts(io.unixEventPort, process, &interrupts);
  int outcome = 0;
  kj::Maybe<kj::Exception> failed = kj::runCatchingExceptions([&] {
    outcome = kj::joinPromises(subscribed.releaseAsArray())
                  .then([&ended] { return kj::joinPromises(ended.releaseAsArray()); })
                  .then([] { return 0; })
                  .exclusiveJoin(detached.then([](bool) { return 1; }))
                  .exclusiveJoin(gave_up.then([] { return 2; }))
                  .exclusiveJoin(resizes.then([] { return 3; }))
                  .wait(ws);
  });
  input = nullptr;
  if (stdin_flags >= 0) fcntl(options.stdin_fd, F_SETFL, stdin_flags);
  raw = nullptr;
  KJ_IF_MAYBE(e, failed) { kj::throwFatalException(lost(kj::mv(*e))); }
  if (outcome == 1) {
    messages->Say("detached");
    return kDetached;
  }
  if (outcome == 2) return 130;
  int code = 255;
  kj::Maybe<kj::Exception> no_status = kj::runCatchingExceptions(
      [&] {
        KJ_IF_MAYBE(asked, exit_status) {
          code = ExitCodeOf(asked->wait(ws).getStatus());
        } else {
          code = ExitCodeOf(process.waitRequest().send().wait(ws).getStatus());
        }
      });
  KJ_IF_MAYBE(e, no_status) { kj::throwFatalException(lost(kj::mv(*e))); }
  return code;
}

}  // namespace paseo::client
