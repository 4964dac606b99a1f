// See output_log.h.
#include "broker/output_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "common/status.h"

namespace paseo {

uint64_t OutputLog::Slack(uint64_t capacity) {
  return std::clamp<uint64_t>(capacity / 8, 64 << 10, 1 << 20);
}

absl::StatusOr<kj::Own<OutputLog>> OutputLog::Open(const std::string& path, uint64_t capacity,
                                                   bool lossless) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return ErrnoStatus("open", path);
  kj::AutoCloseFd owned(fd);
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus("fstat", path);
  if (!S_ISREG(st.st_mode)) return absl::FailedPreconditionError(path + " is not a file");
  auto log = kj::heap<OutputLog>(kj::mv(owned), static_cast<uint64_t>(st.st_size), capacity,
                                 lossless);
  // A predecessor that died may have left up to a step unpunched (or kept more, under another
  // capacity): release everything before start() now, or it would stay allocated for good.
  log->Punch();
  return log;
}

uint64_t OutputLog::Room() const {
  if (!lossless_) return UINT64_MAX;
  uint64_t unread = end_ - read_mark_;
  return unread >= capacity_ ? 0 : capacity_ - unread;
}

absl::StatusOr<size_t> OutputLog::SpliceFrom(int pipe_fd, bool* eof, bool* more, bool* full) {
  *eof = false;
  *more = false;
  *full = false;
  size_t moved = 0;
  // One splice adds at most a step, and Advance punches after each: a turn of kTurnBytes into
  // a small log must not hold kTurnBytes more on disk than the log keeps.
  const size_t step = static_cast<size_t>(Slack(capacity_));
  while (true) {
    if (moved >= kTurnBytes) {
      *more = true;
      break;
    }
    // Lossless: never more than nobody-has-read allows, so start() never passes the read
    // mark and nothing unread is punched.
    uint64_t room = Room();
    if (room == 0) {
      *full = true;
      break;
    }
    size_t len = static_cast<size_t>(std::min<uint64_t>(step, room));
    // An explicit file offset: splice into an O_APPEND file fails with EINVAL.
    loff_t off = static_cast<loff_t>(end_);
    ssize_t n = splice(pipe_fd, nullptr, fd_.get(), &off, len,
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) {
      moved += static_cast<size_t>(n);
      Advance(static_cast<uint64_t>(n));
      continue;
    }
    if (n == 0) {
      *eof = true;
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) break;
    return ErrnoStatus("splice", "output log");
  }
  if (moved > 0) Notify();
  return moved;
}

void OutputLog::MarkRead(uint64_t offset) {
  if (offset <= read_mark_) return;
  read_mark_ = std::min(offset, end_);
  if (room_.get() != nullptr && Room() > 0) {
    room_->fulfill();
    room_ = nullptr;
  }
}

kj::Promise<void> OutputLog::WhenRoom() {
  if (Room() > 0) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  room_ = kj::mv(paf.fulfiller);  // one pump per log
  return kj::mv(paf.promise);
}

absl::Status OutputLog::Append(const char* data, size_t size) {
  const size_t step = static_cast<size_t>(Slack(capacity_));
  size_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(fd_.get(), data + done, std::min(size - done, step),
                       static_cast<off_t>(end_));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("pwrite", "output log");
    }
    done += static_cast<size_t>(n);
    Advance(static_cast<uint64_t>(n));
  }
  if (size > 0) Notify();
  return absl::OkStatus();
}

void OutputLog::Advance(uint64_t bytes) {
  end_ += bytes;
  if (start() >= punched_ + Slack(capacity_)) Punch();
}

void OutputLog::Punch() {
  uint64_t keep_from = start();
  if (keep_from <= punched_) return;
  // Best effort: a filesystem without hole punching keeps the old bytes allocated, nothing else
  // changes (the offsets and what Read returns do not depend on it).
  fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(punched_),
            static_cast<off_t>(keep_from - punched_));
  punched_ = keep_from;
}

void OutputLog::Notify() {
  if (notify_.get() != nullptr) notify_->fulfill();
  notify_ = nullptr;
  changed_ = nullptr;
}

void OutputLog::Close() {
  closed_ = true;
  Notify();
}

absl::Status OutputLog::SkipTo(uint64_t offset) {
  if (offset <= end_) return absl::OkStatus();
  if (ftruncate(fd_.get(), static_cast<off_t>(offset)) != 0)
    return ErrnoStatus("ftruncate", "output log");
  uint64_t from = end_;
  gaps_.emplace_back(from, offset);
  // Nobody can read what was lost: a reader at the gap is past it (a lossless log's room).
  if (read_mark_ >= from) read_mark_ = offset;
  Advance(offset - from);
  std::erase_if(gaps_, [this](const auto& g) { return g.second <= start(); });
  while (gaps_.size() > kMaxGaps) {
    gaps_[1].first = gaps_[0].first;
    gaps_.erase(gaps_.begin());
  }
  Notify();
  return absl::OkStatus();
}

void OutputLog::SetGaps(Gaps gaps) {
  gaps_.clear();
  uint64_t last = 0;
  for (const auto& [from, to] : gaps) {
    // Only what makes sense for this log: in order, inside it, not empty.
    if (from < last || to <= from || to > end_) continue;
    gaps_.emplace_back(from, to);
    last = to;
    if (gaps_.size() == kMaxGaps) break;
  }
}

std::optional<uint64_t> OutputLog::GapAt(uint64_t offset) const {
  for (const auto& [from, to] : gaps_) {
    if (offset >= from && offset < to) return to;
  }
  return std::nullopt;
}

std::string OutputLog::Read(uint64_t offset, size_t max) const {
  if (offset < start() || offset >= end_ || GapAt(offset)) return {};
  uint64_t until = end_;
  for (const auto& [from, to] : gaps_) {
    if (from > offset) {
      until = from;
      break;
    }
  }
  std::string out(std::min<uint64_t>(max, until - offset), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = pread(fd_.get(), out.data() + got, out.size() - got,
                      static_cast<off_t>(offset + got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

kj::Promise<void> OutputLog::WhenChanged() {
  KJ_IF_MAYBE(changed, changed_) { return changed->addBranch(); }
  auto paf = kj::newPromiseAndFulfiller<void>();
  notify_ = kj::mv(paf.fulfiller);
  auto& forked = changed_.emplace(paf.promise.fork());
  return forked.addBranch();
}

}  // namespace paseo
