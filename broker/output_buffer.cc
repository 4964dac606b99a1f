// See output_buffer.h.
#include "broker/output_buffer.h"

#include <algorithm>

namespace paseo {

void OutputBuffer::Append(const char* data, size_t size) {
  if (size == 0) return;
  // Coalesce small reads, so that a process writing a byte at a time costs bytes, not chunk
  // headers.
  if (!chunks_.empty() && chunks_.back().bytes.size() + size <= kChunkBytes) {
    chunks_.back().bytes.append(data, size);
  } else {
    chunks_.push_back(Chunk{end_, std::string(data, size), 0});
  }
  end_ += size;
  // Keep exactly the newest `capacity_` bytes visible. The front chunk is trimmed by moving
  // its `skip` (no copying); its memory goes when the whole chunk does, so memory stays
  // within capacity plus one chunk.
  uint64_t excess = end_ - start_ > capacity_ ? end_ - start_ - capacity_ : 0;
  while (excess > 0) {
    Chunk& front = chunks_.front();
    size_t avail = front.bytes.size() - front.skip;
    if (avail <= excess) {
      excess -= avail;
      chunks_.pop_front();
    } else {
      front.skip += static_cast<size_t>(excess);
      excess = 0;
    }
  }
  start_ = chunks_.empty() ? end_ : chunks_.front().offset + chunks_.front().skip;
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
