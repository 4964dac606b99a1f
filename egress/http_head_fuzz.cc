// Fuzzes ParseRequestHead and ChunkedBody with what a sandbox may send on a plain-HTTP port:
// the first input byte splits the rest into a head and a body fed in pieces of that size.
// Checks: an accepted head lies within the input and names a lower-case host name; a body's
// end does not depend on the pieces it came in; nothing is read past the input (ASan).
#include <cstdint>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "egress/client_hello.h"
#include "egress/http_head.h"

namespace {
void Check(bool ok) {
  if (!ok) abort();
}

// How many bytes of `body` a chunked body takes, fed `piece` bytes at a time; -1 if refused.
long ChunkedEnd(absl::Span<const uint8_t> body, size_t piece) {
  paseo::egress::ChunkedBody chunked;
  size_t consumed = 0;
  for (size_t at = 0; at < body.size() && !chunked.done(); at += piece) {
    auto n = chunked.Feed(body.subspan(at, std::min(piece, body.size() - at)));
    if (!n.ok()) return -1;
    consumed += *n;
  }
  return chunked.done() ? static_cast<long>(consumed) : -2;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  size_t piece = 1 + data[0] % 64;
  auto span = absl::MakeConstSpan(data + 1, size - 1);
  auto head = paseo::egress::ParseRequestHead(span);
  if (head.ok() && head->has_value()) {
    const paseo::egress::RequestHead& h = **head;
    Check(h.head_size >= 4 && h.head_size <= span.size());
    Check(paseo::egress::IsHostName(h.host) && absl::AsciiStrToLower(h.host) == h.host);
    Check(!(h.chunked && h.content_length > 0));
    if (h.chunked) {
      auto body = span.subspan(h.head_size);
      long whole = ChunkedEnd(body, body.size() + 1);
      Check(ChunkedEnd(body, piece) == whole);
      Check(whole < 0 || static_cast<size_t>(whole) <= body.size());
    }
  } else {
    // Not a head: the same bytes as a chunked body, in pieces and whole.
    Check(ChunkedEnd(span, piece) == ChunkedEnd(span, span.size() + 1));
  }
  return 0;
}
