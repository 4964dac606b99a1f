// See tty_frames.h.
#include "common/tty_frames.h"

namespace paseo::tty {
namespace {

std::string Header(FrameType type, size_t length) {
  std::string h(kHeaderBytes, '\0');
  h[0] = static_cast<char>(type);
  h[1] = static_cast<char>((length >> 8) & 0xff);
  h[2] = static_cast<char>(length & 0xff);
  return h;
}

}  // namespace

std::vector<std::string> EncodeData(std::string_view data) {
  std::vector<std::string> frames;
  while (!data.empty()) {
    size_t n = std::min(data.size(), kMaxPayloadBytes);
    frames.push_back(Header(FrameType::kData, n).append(data.substr(0, n)));
    data.remove_prefix(n);
  }
  return frames;
}

std::string EncodeWinsize(uint16_t rows, uint16_t cols) {
  std::string frame = Header(FrameType::kWinsize, 4);
  for (uint16_t v : {rows, cols}) {
    frame.push_back(static_cast<char>(v >> 8));
    frame.push_back(static_cast<char>(v & 0xff));
  }
  return frame;
}

std::string EncodeEof() { return Header(FrameType::kEof, 0); }

std::optional<std::pair<uint16_t, uint16_t>> DecodeWinsize(std::string_view payload) {
  if (payload.size() != 4) return std::nullopt;
  auto u16 = [&](size_t at) {
    return static_cast<uint16_t>((static_cast<uint8_t>(payload[at]) << 8) |
                                 static_cast<uint8_t>(payload[at + 1]));
  };
  return std::make_pair(u16(0), u16(2));
}

std::optional<Frame> FrameReader::Next() {
  while (buffer_.size() >= kHeaderBytes) {
    size_t length = (static_cast<uint8_t>(buffer_[1]) << 8) | static_cast<uint8_t>(buffer_[2]);
    if (buffer_.size() < kHeaderBytes + length) return std::nullopt;
    auto type = static_cast<FrameType>(buffer_[0]);
    std::string payload = buffer_.substr(kHeaderBytes, length);
    buffer_.erase(0, kHeaderBytes + length);
    if (type == FrameType::kData || type == FrameType::kWinsize || type == FrameType::kEof)
      return Frame{type, std::move(payload)};
  }
  return std::nullopt;
}

}  // namespace paseo::tty
