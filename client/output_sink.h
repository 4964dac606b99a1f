// An api::OutputSink that copies one stream of a process to a local file descriptor (our
// stdout or stderr) in the order the service sends it, and reports when the stream is done:
// at its end, or for `logs` without --follow at a given offset. Shared by attach (run, exec,
// attach) and logs.
//
//   auto done = kj::newPromiseAndFulfiller<void>();
//   req.setSink(kj::heap<FdOutputSink>(FdOutputSink::Options{.fd = STDOUT_FILENO},
//                                      kj::mv(done.fulfiller)));
#pragma once

#include <cstdint>
#include <optional>

#include <kj/async.h>

#include "schema/api.capnp.h"

namespace paseo::client {

class FdOutputSink final : public api::OutputSink::Server {
 public:
  struct Options {
    int fd = -1;
    // Write nothing at or past this offset and be done once the stream reaches it.
    std::optional<uint64_t> stop_at;
    // The local terminal may be raw: frame the gap notice with "\r\n".
    bool raw_terminal = false;
  };

  // `done` is fulfilled once, at end() or at stop_at.
  FdOutputSink(const Options& options, kj::Own<kj::PromiseFulfiller<void>> done)
      : options_(options), done_(kj::mv(done)) {}

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
};

}  // namespace paseo::client
