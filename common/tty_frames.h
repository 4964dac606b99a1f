// The framing on a tty process's stdin pipe, between the broker and the relay that runs the
// process on a pseudo-terminal inside the sandbox (sandbox/shim.cc).
//
// One pipe carries keystrokes, window-size changes and end-of-input, so they arrive in the
// order the client sent them. A frame is a type byte, a big-endian 16-bit payload length and
// the payload. A frame is never longer than PIPE_BUF and the broker writes each with one
// write(2), so a broker killed mid-stream never leaves half a frame in the pipe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace paseo::tty {

inline constexpr size_t kHeaderBytes = 3;
inline constexpr size_t kMaxFrameBytes = 4096;  // PIPE_BUF on Linux
inline constexpr size_t kMaxPayloadBytes = kMaxFrameBytes - kHeaderBytes;

enum class FrameType : uint8_t {
  kData = 'd',     // bytes typed at the terminal
  kWinsize = 'w',  // payload: rows, cols (each big-endian 16-bit)
  kEof = 'e',      // the client closed its input: the relay sends the terminal's EOF character
};

struct Frame {
  FrameType type;
  std::string payload;
};

// Splits `data` into data frames of at most kMaxFrameBytes each.
std::vector<std::string> EncodeData(std::string_view data);
std::string EncodeWinsize(uint16_t rows, uint16_t cols);
std::string EncodeEof();

// Decodes rows and cols from a winsize payload; nullopt if it is not 4 bytes.
std::optional<std::pair<uint16_t, uint16_t>> DecodeWinsize(std::string_view payload);

// Reassembles frames from a byte stream read in arbitrary pieces.
class FrameReader {
 public:
  void Feed(std::string_view bytes) { buffer_.append(bytes); }
  // The next complete frame, if any. Frames of an unknown type are skipped.
  std::optional<Frame> Next();
  size_t buffered() const { return buffer_.size(); }

 private:
  std::string buffer_;
};

}  // namespace paseo::tty
