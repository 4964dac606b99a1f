// An api::OutputSink that copies one stream of a process to a local file descriptor (our
// stdout or stderr, or a file) in the order the service sends it, and reports when the stream
// is done: at its end, or for `logs` without --follow at a given offset. It keeps the stream's
// progress (the next offset, bytes lost) outside itself, so that whoever resumes the stream
// on a new connection knows where from. Shared by attach (run, exec, attach) and logs.
//
//   auto done = kj::newPromiseAndFulfiller<void>();
//   FdOutputSink::Options sink{.fd = STDOUT_FILENO, .messages = messages};
//   req.setSink(kj::heap<FdOutputSink>(sink, kj::mv(done.fulfiller)));
//   done.promise.wait(ws);  // throws DISCONNECTED if the connection was lost first
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include <kj/async.h>

#include "client/messages.h"
#include "schema/api.capnp.h"

namespace paseo::client {

// How far a stream got, across the sinks of successive connections.
struct StreamProgress {
  uint64_t next = 0;  // the offset of the next byte (the --from to resume at)
  uint64_t lost = 0;  // bytes gap() reported as no longer kept
  bool ended = false;
};

// "the connection to the service was lost": how every lost connection is reported.
inline constexpr char kConnectionLostText[] = "the connection to the service was lost";

class FdOutputSink final : public api::OutputSink::Server {
 public:
  struct Options {
    int fd = -1;
    // Write nothing at or past this offset and be done once the stream reaches it.
    std::optional<uint64_t> stop_at;
    // Where the gap notice goes; told before the first byte goes to `fd`. Required.
    std::shared_ptr<Messages> messages;
    // Updated as bytes arrive; made here if not given. Bytes below progress->next are not
    // written again.
    std::shared_ptr<StreamProgress> progress;
  };

  // `done` is fulfilled once, at end() or at stop_at; rejected (DISCONNECTED,
  // kConnectionLostText) if the sink goes away before, i.e. when the connection is lost.
  FdOutputSink(const Options& options, kj::Own<kj::PromiseFulfiller<void>> done);
  ~FdOutputSink() noexcept(false);

 protected:
  kj::Promise<void> write(WriteContext context) override;
  kj::Promise<void> gap(GapContext context) override;
  kj::Promise<void> end(EndContext context) override;

 private:
  void Done() {
    if (done_->isWaiting()) done_->fulfill();
  }

  Options options_;
  kj::Own<kj::PromiseFulfiller<void>> done_;
  bool wrote_ = false;
};

}  // namespace paseo::client
