// OutputBuffer: one output stream of one process, every byte numbered by its offset from the
// process start. Keeps the newest `capacity` bytes (memory: at most capacity plus one 64 KiB
// chunk), so a reader that asks for an offset older than start() must be told of a gap.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include <kj/async.h>
#include <kj/vector.h>

namespace paseo {

class OutputBuffer {
 public:
  explicit OutputBuffer(uint64_t capacity) : capacity_(capacity) {}

  uint64_t start() const { return start_; }  // offset of the oldest byte kept
  uint64_t end() const { return end_; }      // offset of the next byte to arrive
  bool closed() const { return closed_; }
  uint64_t kept() const { return end_ - start_; }

  void Append(const char* data, size_t size);
  void Close();
  // Copies up to `max` bytes starting at `offset` (start() <= offset < end()).
  std::string Read(uint64_t offset, size_t max) const;
  // Resolves on the next Append or Close.
  kj::Promise<void> WhenChanged();

 private:
  static constexpr size_t kChunkBytes = 64 * 1024;
  struct Chunk {
    uint64_t offset;  // stream offset of bytes[0]
    std::string bytes;
    size_t skip;      // leading bytes already dropped from the buffer
  };
  void Notify();

  uint64_t capacity_;
  uint64_t start_ = 0;
  uint64_t end_ = 0;
  bool closed_ = false;
  std::deque<Chunk> chunks_;
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> waiters_;
};

}  // namespace paseo
