// See process_io.h.
#include "broker/process_io.h"

#include <fcntl.h>

#include <kj/debug.h>

#include "common/rpc_errors.h"

namespace paseo {
namespace {

constexpr size_t kChunk = 64 * 1024;

// The fd and its observer travel together; the observer must go first (it unregisters the fd
// from epoll), so `fd` is declared first and destroyed last (regression: closing the fd first
// left a dangling epoll entry that a later hang-up fired into).
struct DrainSource {
  kj::AutoCloseFd fd;
  kj::Own<kj::UnixEventPort::FdObserver> observer;
};

// Moves a pipe's bytes into `log` until EOF. Moving never waits for any subscriber, so a slow
// client cannot stall the process.
kj::Promise<void> Drain(kj::Own<DrainSource> source, OutputLog& log) {
  bool eof = false, more = false, full = false;
  auto moved = log.SpliceFrom(source->fd.get(), &eof, &more, &full);
  if (!moved.ok() || eof) {
    if (!moved.ok()) KJ_LOG(ERROR, "output log failed", moved.status().ToString());
    log.Close();
    return kj::READY_NOW;
  }
  // Edge-triggered: only wait for readability once the pipe is empty; after a bounded turn
  // with more to move, yield to the event loop and continue. A full lossless log waits for a
  // reader instead (the pipe fills and the writer blocks): nothing wakes the loop until a
  // subscriber acknowledges bytes, and then the next splice comes first (the pipe's readable
  // edge may have passed while nobody waited for it).
  auto next = full   ? log.WhenRoom()
              : more ? kj::evalLater([] {})
                     : source->observer->whenBecomesReadable();
  return next.then([source = kj::mv(source), &log]() mutable {
    return Drain(kj::mv(source), log);
  });
}

kj::Promise<void> DrainInto(kj::UnixEventPort& events, kj::AutoCloseFd fd, OutputLog& log) {
  int flags = fcntl(fd.get(), F_GETFL);
  fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
  auto source = kj::heap<DrainSource>();
  source->observer = kj::heap<kj::UnixEventPort::FdObserver>(
      events, fd.get(), kj::UnixEventPort::FdObserver::OBSERVE_READ);
  source->fd = kj::mv(fd);
  return Drain(kj::mv(source), log);
}

}  // namespace

void InputQueue::Attach(kj::Own<kj::AsyncOutputStream> stream) {
  stream_ = kj::refcounted<Stream>(kj::mv(stream));
}

absl::StatusOr<kj::Promise<void>> InputQueue::Write(std::vector<std::string> chunks,
                                                    absl::string_view closed_reason) {
  kj::Own<Stream> stream;
  KJ_IF_MAYBE(s, stream_) { stream = kj::addRef(**s); }
  if (stream.get() == nullptr) return absl::FailedPreconditionError(closed_reason);
  // Flow control keeps a well-behaved client within a few writes; one that ignores it
  // (pipelining writes, or resizes, to a process that never reads) is refused past this
  // bound. Every queued call costs something, whatever it carries.
  size_t accounted = kQueuedCallBytes;
  for (const auto& c : chunks) accounted += c.size();
  if (queued_ + accounted > kMaxQueuedBytes)
    return absl::UnavailableError("too much input queued; wait for earlier writes");
  queued_ += accounted;
  auto done = chain_
                  .then([stream = kj::mv(stream), chunks = kj::mv(chunks)]() mutable {
                    kj::AsyncOutputStream& out = *stream->out;
                    return WriteChunks(out, kj::heap(kj::mv(chunks)), 0).attach(kj::mv(stream));
                  })
                  .attach(kj::defer([self = kj::addRef(*this), accounted]() mutable {
                    self->queued_ -= accounted;
                  }));
  auto forked = done.fork();
  chain_ = forked.addBranch().catch_([](kj::Exception&&) {});
  return forked.addBranch().catch_([](kj::Exception&&) -> kj::Promise<void> {
    return StatusToException(
        absl::FailedPreconditionError("the process no longer reads its input"));
  });
}

kj::Promise<void> InputQueue::Close() {
  kj::Own<Stream> last;
  KJ_IF_MAYBE(s, stream_) { last = kj::mv(*s); }
  stream_ = nullptr;  // later writes are refused at once
  if (last.get() == nullptr) return kj::READY_NOW;
  // The writes queued before hold their own references; this one goes when they are done.
  auto forked = chain_.then([last = kj::mv(last)]() mutable { last = nullptr; }).fork();
  chain_ = forked.addBranch();
  return forked.addBranch();
}

void InputQueue::Drop() {
  chain_ = kj::READY_NOW;
  stream_ = nullptr;
}

kj::Promise<void> InputQueue::WriteChunks(kj::AsyncOutputStream& out,
                                          kj::Own<std::vector<std::string>> chunks, size_t next) {
  if (next == chunks->size()) return kj::READY_NOW;
  const std::string& chunk = (*chunks)[next];
  auto write = out.write(chunk.data(), chunk.size());
  return write.then([&out, chunks = kj::mv(chunks), next]() mutable {
    return WriteChunks(out, kj::mv(chunks), next + 1);
  });
}

void ProcessRecord::SetExit(ProcessExit how) {
  if (ended()) return;
  exit = how;
  // Nobody can write to an ended process: release its stdin fd now.
  input->Drop();
  if (end_.get() != nullptr) end_->fulfill();
}

kj::TaskSet::ErrorHandler& IgnoreTaskErrors() {
  class Ignore final : public kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&&) override {}
  };
  static Ignore ignore;
  return ignore;
}

void ProcessRecord::MarkDrained(api::Stream stream) {
  bool was = drained();
  (stream == api::Stream::STDERR ? stderr_drained : stdout_drained) = true;
  if (!was && drained() && on_drained) on_drained();
}

kj::Promise<void> ProcessRecord::WhenEnded() {
  if (ended()) return kj::READY_NOW;
  KJ_IF_MAYBE(forked, ended_) { return forked->addBranch(); }
  auto paf = kj::newPromiseAndFulfiller<void>();
  end_ = kj::mv(paf.fulfiller);
  auto& forked = ended_.emplace(paf.promise.fork());
  return forked.addBranch();
}

void StartPumps(kj::UnixEventPort& events, ProcessRecord& p, kj::AutoCloseFd stdout_fd,
                kj::AutoCloseFd stderr_fd, kj::Promise<ProcessExit> exited) {
  ProcessRecord* raw = &p;
  // The pumps only touch the record itself, which owns them.
  kj::Vector<kj::Promise<void>> all;
  all.add(DrainInto(events, kj::mv(stdout_fd), *p.stdout_log));
  all.add(DrainInto(events, kj::mv(stderr_fd), *p.stderr_log));
  all.add(exited.then([raw](ProcessExit how) { raw->SetExit(how); },
                      [raw](kj::Exception&&) { raw->SetExit(ProcessExit::Unknown()); }));
  p.pumps = kj::joinPromises(all.releaseAsArray()).eagerlyEvaluate([raw](kj::Exception&& e) {
    raw->stdout_log->Close();
    raw->stderr_log->Close();
  });
}

kj::Promise<void> Deliver(kj::Own<ProcessRecord> p, api::Stream stream, uint64_t next,
                          api::OutputSink::Client sink) {
  OutputLog& log = p->log(stream);
  // A subscriber at `next` has everything before it (a resubscribe from its own offset says so
  // too): without this, a reader caught up when the broker restarted would never move the
  // conservative read mark, and a full lossless stream would wait forever.
  log.MarkRead(next);
  if (next < log.start()) {
    auto req = sink.gapRequest();
    req.setLostBytes(log.start() - next);
    uint64_t resume = log.start();
    return req.send().then([p = kj::mv(p), stream, resume, sink](auto&&) mutable {
      return Deliver(kj::mv(p), stream, resume, kj::mv(sink));
    });
  }
  if (auto gap_end = next < log.end() ? log.GapAt(next) : std::nullopt) {
    // Lost in a supervisor restart (OutputLog::SkipTo): said as a gap, as old bytes are.
    auto req = sink.gapRequest();
    req.setLostBytes(*gap_end - next);
    uint64_t resume = *gap_end;
    return req.send().then([p = kj::mv(p), stream, resume, sink](auto&&) mutable {
      return Deliver(kj::mv(p), stream, resume, kj::mv(sink));
    });
  }
  if (next < log.end()) {
    std::string bytes = log.Read(next, kChunk);
    auto req = sink.writeRequest();
    req.setOffset(next);
    req.setData(kj::arrayPtr(reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size()));
    uint64_t after = next + bytes.size();
    return req.send().then([p = kj::mv(p), stream, after, sink]() mutable {
      // Acknowledged: a lossless stream may take that much more from its pipe.
      p->log(stream).MarkRead(after);
      return Deliver(kj::mv(p), stream, after, kj::mv(sink));
    });
  }
  if (log.closed() && p->ended()) {
    auto req = sink.endRequest();
    ToCapnp(p->exit, req.initStatus());
    req.setEndOffset(log.end());
    ProcessRecord* raw = p.get();  // the record owns the task
    raw->end_calls.add(req.send().then([raw, stream](auto&&) { raw->MarkDrained(stream); }));
    return kj::READY_NOW;
  }
  auto changed = log.closed() ? p->WhenEnded() : log.WhenChanged();
  return changed.then([p = kj::mv(p), stream, next, sink]() mutable {
    return Deliver(kj::mv(p), stream, next, kj::mv(sink));
  });
}

}  // namespace paseo
