// See output_buffer.h.
#include "broker/output_buffer.h"

#include <algorithm>

namespace paseo {

void OutputBuffer::Append(const char* data, size_t size) {
  if (size == 0) return;
  chunks_.push_back(Chunk{end_, std::string(data, size)});
  end_ += size;
  // Drop the oldest chunk while the newer ones alone still hold `capacity_` bytes.
  while (chunks_.size() > 1 && end_ - chunks_[1].offset >= capacity_) chunks_.pop_front();
  start_ = chunks_.empty() ? end_ : chunks_.front().offset;
  Notify();
}

void OutputBuffer::Close() {
  closed_ = true;
  Notify();
}

std::string OutputBuffer::Read(uint64_t offset, size_t max) const {
  if (offset < start_ || offset >= end_) return {};
  // Chunks are sorted by offset: find the last one starting at or before `offset`.
  auto it = std::upper_bound(chunks_.begin(), chunks_.end(), offset,
                             [](uint64_t off, const Chunk& c) { return off < c.offset; });
  --it;
  std::string out;
  for (; it != chunks_.end() && out.size() < max; ++it) {
    uint64_t skip = offset > it->offset ? offset - it->offset : 0;
    size_t take = std::min<size_t>(it->bytes.size() - skip, max - out.size());
    out.append(it->bytes, skip, take);
  }
  return out;
}

kj::Promise<void> OutputBuffer::WhenChanged() {
  auto paf = kj::newPromiseAndFulfiller<void>();
  waiters_.add(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

void OutputBuffer::Notify() {
  auto waiters = kj::mv(waiters_);
  waiters_ = {};
  for (auto& w : waiters) w->fulfill();
}

}  // namespace paseo
