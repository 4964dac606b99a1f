// A plain-HTTP request's head as a sandbox sends it, read before anything reaches the outside:
// the name it is for (Host) and how its body is framed, which the egress proxy needs to check
// every request on a connection, not only the first (a second request on a kept-alive
// connection could name another host at the same address).
//
//   absl::StatusOr<std::optional<RequestHead>> head = ParseRequestHead(bytes);
//   if (!head.ok()) refuse(head.status().message());  // malformed: never passed on
//   else if (!*head) read_more();                        // the head is not complete yet
//   else check((*head)->host), then pass on head_size bytes and the body as framed.
//
// Strict, because a proxy that reads a request differently from the server behind it is the
// classic smuggling hole (RFC 9112 and its security considerations): CRLF line ends only (no bare
// CR or LF), no whitespace before a header's colon, only SP and HTAB around a value, no folded
// lines, no underscore in a framing header's name, exactly one Host, a request target in
// origin form ("/path") or in absolute form only for http://<the same host>, Content-Length
// and Transfer-Encoding never together, Transfer-Encoding only "chunked", one Content-Length.
// HTTP/1.0 and HTTP/1.1 only (a Host is required of both here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace paseo::egress {

// The most bytes a request head may take (request line and headers): what common servers
// accept (nginx 8 KiB per line, 32 KiB in all by default).
inline constexpr size_t kMaxRequestHead = 32768;

struct RequestHead {
  std::string method;
  std::string target;
  std::string host;             // lower case, without its port
  std::optional<uint16_t> port;  // Host's port, if it has one
  size_t head_size = 0;          // bytes up to and including the blank line
  bool chunked = false;          // Transfer-Encoding: chunked
  bool upgrade = false;          // it has an Upgrade header (the stream may stop being HTTP)
  uint64_t content_length = 0;   // when not chunked (0 if absent)
};

// nullopt: no blank line yet and under kMaxRequestHead. An error (InvalidArgument with a stable
// reason) for anything else that is not a request head as described above.
absl::StatusOr<std::optional<RequestHead>> ParseRequestHead(absl::Span<const uint8_t> data);

// Where a chunked body ends, read as it arrives: Feed each piece of the body (after the head)
// and it says how many of those bytes belong to the body; once done(), the rest is the next
// request. Chunk extensions are skipped, trailers are allowed (each line at most 4 KiB), and a
// chunk is smaller than 2 GiB.
class ChunkedBody {
 public:
  // How many of `data`'s bytes are this body's (all of them unless it ends inside), or an error
  // for a malformed chunk.
  absl::StatusOr<size_t> Feed(absl::Span<const uint8_t> data);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kExtension, kSizeLf, kData, kDataCr, kDataLf, kTrailer, kTrailerLf, kDone };
  State state_ = State::kSize;
  uint64_t remaining_ = 0;  // of the current chunk's data
  int digits_ = 0;
  size_t line_ = 0;  // bytes of the current trailer or extension line
  bool trailer_empty_ = true;
};

}  // namespace paseo::egress
