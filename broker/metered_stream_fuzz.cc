// Fuzzes the broker's segment-table metering (MeteredStream, connection_limits.h): the bytes a
// client connection sends, read in pieces whose sizes the input chooses, against a model of
// the capnp framing written here. The first byte picks the pool (a peer that may use a
// deployment, or not) and how many of the next bytes are read sizes; the rest is the stream.
// Checks that the stream refuses exactly the messages whose declared size is over the pool's
// per-message limit or that have too many segments (and with our reason), passes every byte
// before that through unchanged, never holds a charge over the limit, and gives every charge
// back when it goes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <kj/async.h>
#include <kj/async-io.h>
#include <kj/timer.h>

#include "absl/strings/match.h"
#include "broker/connection_limits.h"

namespace {

void Check(bool ok) {
  if (!ok) abort();
}

uint32_t Le32(std::string_view b, size_t at) {
  auto u = [&](size_t i) { return uint32_t{static_cast<uint8_t>(b[at + i])}; };
  return u(0) | u(1) << 8 | u(2) << 16 | u(3) << 24;
}

// What the framing says of `bytes`: the offset at which it must be refused (npos: never).
size_t RefusedAt(std::string_view bytes, size_t per_message) {
  size_t pos = 0;
  while (bytes.size() - pos >= 4) {
    uint32_t count = Le32(bytes, pos);
    if (count >= 512) return pos + 4;
    uint64_t segments = uint64_t{count} + 1;
    uint64_t sizes_end = pos + 4 + 4 * segments;
    if (bytes.size() < sizes_end) return std::string_view::npos;
    uint64_t body = 0;
    for (uint64_t s = 0; s < segments; ++s) body += uint64_t{Le32(bytes, pos + 4 + 4 * s)} * 8;
    uint64_t table = 4 * (1 + segments) + ((1 + segments) % 2 ? 4 : 0);
    if (table + body > per_message) return sizes_end;
    uint64_t next = pos + table + body;
    if (next >= bytes.size()) return std::string_view::npos;
    pos = next;
  }
  return std::string_view::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  bool allowed = data[0] & 1;
  size_t ncuts = std::min<size_t>((data[0] >> 1) % 16, size - 1);
  std::string_view cuts(reinterpret_cast<const char*>(data + 1), ncuts);
  std::string_view bytes(reinterpret_cast<const char*>(data + 1 + ncuts), size - 1 - ncuts);

  // Small limits, so the fuzzer reaches them: 4 KiB messages for a peer that may use a
  // deployment, 512 bytes for one that may not.
  const paseo::ReceivePool allowed_pool{1 << 20, 1 << 20, 4096, 4};
  const paseo::ReceivePool unknown_pool{1 << 20, 1 << 20, 512, 4};
  const size_t per_message = allowed ? allowed_pool.per_message : unknown_pool.per_message;
  paseo::ReceiveBudget budget(allowed_pool, unknown_pool);
  size_t refused_at = RefusedAt(bytes, per_message);
  {
    kj::EventLoop loop;
    kj::WaitScope ws(loop);
    kj::TimerImpl timer(kj::origin<kj::TimePoint>());
    auto pipe = kj::newCapabilityPipe();
    auto stream = kj::heap<paseo::MeteredStream>(kj::mv(pipe.ends[1]), budget, allowed, 1000, timer);
    auto& client = *pipe.ends[0];
    auto writer = client.write(bytes.data(), bytes.size())
                      .then([&client] { client.shutdownWrite(); })
                      .eagerlyEvaluate([](kj::Exception&&) {});
    std::string got;
    std::string error;
    char buf[4096];
    for (size_t k = 0;; ++k) {
      size_t max = cuts.empty() ? sizeof(buf) : 1 + static_cast<uint8_t>(cuts[k % cuts.size()]) % 64;
      size_t n = 0;
      KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { n = stream->tryRead(buf, 1, max).wait(ws); })) {
        error = e->getDescription().cStr();
        break;
      }
      if (n == 0) break;
      got.append(buf, n);
      Check(stream->charged() <= per_message);
      Check(budget.used(allowed) <= per_message);
    }
    if (refused_at == std::string_view::npos) {
      Check(error.empty() && got == bytes);
    } else {
      Check(absl::StartsWith(error, "invalid-argument: a message "));
      // Refused in the read that completed the table: nothing past it was passed on.
      Check(got.size() < refused_at && bytes.substr(0, got.size()) == got);
    }
  }
  Check(budget.used(allowed) == 0);
  return 0;
}
