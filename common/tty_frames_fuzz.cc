// Fuzzes the tty stdin framing as the in-sandbox relay reads it (tty::FrameReader): a stream the
// broker wrote, or anything a process in the sandbox could put in that pipe. Checks that the
// frames do not depend on how the bytes were split into reads, that every frame is of a known
// type and re-encodes to exactly the bytes it came from, and that a winsize decodes only from 4
// bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/tty_frames.h"

namespace {

using paseo::tty::Frame;
using paseo::tty::FrameReader;
using paseo::tty::FrameType;

void Check(bool ok) {
  if (!ok) abort();
}

// All frames of `bytes`, fed in pieces whose sizes the (cycled) `cuts` choose.
std::vector<Frame> Frames(std::string_view bytes, std::string_view cuts) {
  FrameReader reader;
  std::vector<Frame> frames;
  size_t at = 0, k = 0;
  while (at < bytes.size()) {
    size_t n = cuts.empty() ? bytes.size() : 1 + static_cast<uint8_t>(cuts[k++ % cuts.size()]) % 64;
    n = std::min(n, bytes.size() - at);
    reader.Feed(bytes.substr(at, n));
    at += n;
    while (auto f = reader.Next()) frames.push_back(std::move(*f));
    Check(reader.buffered() < paseo::tty::kHeaderBytes + 65536);
  }
  return frames;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte says how many of the next bytes choose read sizes; the rest is the stream.
  size_t ncuts = std::min<size_t>(data[0] % 16, size - 1);
  std::string_view cuts(reinterpret_cast<const char*>(data + 1), ncuts);
  std::string_view bytes(reinterpret_cast<const char*>(data + 1 + ncuts), size - 1 - ncuts);
  std::vector<Frame> whole = Frames(bytes, {});
  std::vector<Frame> pieces = Frames(bytes, cuts);
  Check(whole.size() == pieces.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    const Frame& f = whole[i];
    Check(f.type == pieces[i].type && f.payload == pieces[i].payload);
    Check(f.type == FrameType::kData || f.type == FrameType::kWinsize || f.type == FrameType::kEof);
    auto winsize = paseo::tty::DecodeWinsize(f.payload);
    Check(winsize.has_value() == (f.payload.size() == 4));
    if (f.type == FrameType::kWinsize && winsize) {
      Check(paseo::tty::EncodeWinsize(winsize->first, winsize->second).substr(3) == f.payload);
    }
    if (f.type == FrameType::kEof && f.payload.empty()) Check(paseo::tty::EncodeEof().size() == 3);
    if (f.type == FrameType::kData && !f.payload.empty() &&
        f.payload.size() <= paseo::tty::kMaxPayloadBytes) {
      auto encoded = paseo::tty::EncodeData(f.payload);
      Check(encoded.size() == 1 && encoded[0].substr(3) == f.payload);
      // What the encoder writes, the reader reads back as that one frame.
      auto again = Frames(encoded[0], {});
      Check(again.size() == 1 && again[0].payload == f.payload);
    }
  }
  return 0;
}
