// See output_sink.h.
#include "client/output_sink.h"

#include <algorithm>
#include <string>

#include <kj/debug.h>

namespace paseo::client {

FdOutputSink::FdOutputSink(const Options& options, kj::Own<kj::PromiseFulfiller<void>> done)
    : options_(options), done_(kj::mv(done)) {
  KJ_REQUIRE(options_.messages != nullptr);
  if (options_.progress == nullptr) options_.progress = std::make_shared<StreamProgress>();
}

FdOutputSink::~FdOutputSink() noexcept(false) {
  // Released without end(): capnp drops a connection's exported objects when it is lost. Say
  // so in words (kj's own text would be "PromiseFulfiller was destroyed ...").
  if (done_->isWaiting()) {
    done_->reject(kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                                kj::heapString(kConnectionLostText)));
  }
}

kj::Promise<void> FdOutputSink::write(WriteContext context) {
  auto params = context.getParams();
  uint64_t offset = params.getOffset();
  auto data = params.getData();
  StreamProgress& progress = *options_.progress;
  // What an earlier connection delivered already is not written twice.
  uint64_t begin = std::max(offset, progress.next);
  uint64_t end = offset + data.size();
  if (options_.stop_at) end = std::min(end, *options_.stop_at);
  if (begin < end) {
    if (!wrote_) {
      options_.messages->StreamWritesTo(options_.fd);
      wrote_ = true;
    }
    WriteAll(options_.fd, data.begin() + (begin - offset), static_cast<size_t>(end - begin));
    progress.next = end;
  }
  if (options_.stop_at && offset + data.size() >= *options_.stop_at) Done();
  return kj::READY_NOW;
}

kj::Promise<void> FdOutputSink::gap(GapContext context) {
  uint64_t lost = context.getParams().getLostBytes();
  options_.progress->lost += lost;
  options_.progress->next += lost;
  options_.messages->Say(std::to_string(lost) + " bytes of output were no longer kept");
  return kj::READY_NOW;
}

kj::Promise<void> FdOutputSink::end(EndContext context) {
  options_.progress->ended = true;
  Done();
  return kj::READY_NOW;
}

}  // namespace paseo::client
