// See output_sink.h.
#include "client/output_sink.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

namespace paseo::client {
namespace {

// Writes all of [data, data + size) unless the fd is gone. EAGAIN is retried: our stdout can be
// non-blocking because it shares its open file description with a terminal stdin that the
// input forwarding made O_NONBLOCK.
void WriteAll(int fd, const capnp::byte* data, size_t size) {
  for (size_t off = 0; off < size;) {
    ssize_t n = ::write(fd, data + off, size - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        usleep(1000);
        continue;
      }
      return;  // our output is gone; keep draining so the process is not blocked by us
    }
    off += static_cast<size_t>(n);
  }
}

}  // namespace

kj::Promise<void> FdOutputSink::write(WriteContext context) {
  auto params = context.getParams();
  uint64_t offset = params.getOffset();
  auto data = params.getData();
  size_t size = data.size();
  if (options_.stop_at) {
    uint64_t stop = *options_.stop_at;
    size = offset >= stop ? 0 : static_cast<size_t>(std::min<uint64_t>(size, stop - offset));
  }
  WriteAll(options_.fd, data.begin(), size);
  if (options_.stop_at && offset + data.size() >= *options_.stop_at) Done();
  return kj::READY_NOW;
}

kj::Promise<void> FdOutputSink::gap(GapContext context) {
  const char* nl = options_.raw_terminal ? "\r\n" : "";
  std::fprintf(stderr, "%spaseo-sandbox: %llu bytes of output were no longer kept%s\n", nl,
               static_cast<unsigned long long>(context.getParams().getLostBytes()),
               options_.raw_terminal ? "\r" : "");
  return kj::READY_NOW;
}

kj::Promise<void> FdOutputSink::end(EndContext context) {
  Done();
  return kj::READY_NOW;
}

}  // namespace paseo::client
