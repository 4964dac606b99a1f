// OutputLog: one output stream of one process, kept in a file in the broker's state directory.
// Every byte is numbered by its offset from the process start, which is also its position in
// the file. The broker moves bytes from the process's pipe into the file with splice(2), so at
// any moment each byte is either still in the pipe or already in the file: a broker killed at
// any point loses nothing, and its successor reopens the file and continues from its size.
// Only the newest `capacity` bytes are kept (readable): older ones are punched out of the file
// (FALLOC_FL_PUNCH_HOLE), so disk use is bounded and offsets never change. Punching goes in
// steps of Slack(capacity) bytes and no write moves more than a step before the next punch, so
// the file never has more than MaxAllocatedBytes(capacity) = capacity + 2 x Slack(capacity)
// bytes allocated (plus a filesystem block at each end of the kept range). Subscribers read
// with pread, served from the page cache; the broker's own memory does not grow with output.
//
// A lossless log (api.capnp OutputMode.lossless) never drops a byte nobody has read: it tracks
// a read mark (the furthest offset a subscriber was sent and acknowledged) and refuses to
// take more from the pipe once end() - read mark reaches the capacity, so the pipe fills and
// the process's writes wait. Bytes before the read mark may go as in dropOldest; bytes after
// it never do. A reopened lossless log does not know its predecessor's mark and takes the
// start of what it keeps, so nothing unread can be punched.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <kj/async.h>
#include <kj/io.h>
#include <kj/vector.h>

#include "absl/status/statusor.h"

namespace paseo {

class OutputLog {
 public:
  // Opens `path`, creating it if needed; an existing file continues at its size.
  static absl::StatusOr<kj::Own<OutputLog>> Open(const std::string& path, uint64_t capacity,
                                                 bool lossless = false);

  // The oldest byte kept: the newest `capacity` bytes, and in a lossless log never past the
  // read mark.
  uint64_t start() const {
    uint64_t newest = end_ > capacity_ ? end_ - capacity_ : 0;
    return lossless_ ? std::min(newest, read_mark_) : newest;
  }
  uint64_t end() const { return end_; }
  bool closed() const { return closed_; }
  bool lossless() const { return lossless_; }
  uint64_t read_mark() const { return read_mark_; }
  // How many more bytes the log takes now: unbounded unless lossless, else the capacity less
  // what nobody has read.
  uint64_t Room() const;

  // Moves what `pipe_fd` (non-blocking) holds into the log, at most kTurnBytes per call so one
  // busy stream cannot monopolize the broker, in splices of at most Slack(capacity) bytes with
  // old bytes punched after each. Returns the bytes moved; sets *eof when its writers are gone
  // and *more when it stopped at the bound with data left. A lossless log with no Room() moves
  // nothing and sets *full: wait for WhenRoom() before calling again.
  absl::StatusOr<size_t> SpliceFrom(int pipe_fd, bool* eof, bool* more, bool* full);
  // A subscriber was sent and acknowledged everything before `offset`: moves the read mark on
  // (never back) and wakes a pump waiting for room.
  void MarkRead(uint64_t offset);
  // Resolves once MarkRead made room (at once if there is some).
  kj::Promise<void> WhenRoom();
  static constexpr size_t kTurnBytes = 4 << 20;
  // The step in which old bytes are released and the most one splice (or write) adds before
  // the next release: capacity / 8, at least 64 KiB (fewer fallocate calls for small logs), at
  // most 1 MiB.
  static uint64_t Slack(uint64_t capacity);
  // The most the file ever has allocated, not counting a partial filesystem block at each end.
  static uint64_t MaxAllocatedBytes(uint64_t capacity) { return capacity + 2 * Slack(capacity); }
  // Appends bytes the broker holds in memory (used where splice cannot be, e.g. tests).
  absl::Status Append(const char* data, size_t size);

  // Gaps: ranges of the stream that were lost (a supervisor restart during which a drop-oldest
  // stream's spawner kept only its newest bytes). SkipTo(offset) makes [end(), offset) one: the
  // log continues at `offset`, the file stays sparse there, and a subscriber is told the range
  // is lost (GapAt) instead of reading it. At most kMaxGaps are remembered: older ones that
  // nothing kept any more are forgotten, and past that the oldest two merge (the bytes between
  // them are then reported lost too: never the other way round).
  absl::Status SkipTo(uint64_t offset);
  using Gaps = std::vector<std::pair<uint64_t, uint64_t>>;  // [from, to), in order
  const Gaps& gaps() const { return gaps_; }
  // A reopened log's gaps, as gaps() had them (records.capnp BrokerProcess.stdoutGaps).
  void SetGaps(Gaps gaps);
  // The end of the gap `offset` lies in, if it lies in one.
  std::optional<uint64_t> GapAt(uint64_t offset) const;
  static constexpr size_t kMaxGaps = 64;
  void Close();
  // Up to `max` bytes from `offset` (start() <= offset < end()), never into a gap.
  std::string Read(uint64_t offset, size_t max) const;
  // Resolves on the next change (bytes or close).
  kj::Promise<void> WhenChanged();

  // Use Open().
  OutputLog(kj::AutoCloseFd fd, uint64_t size, uint64_t capacity, bool lossless)
      : fd_(kj::mv(fd)), end_(size), punched_(0), capacity_(capacity), lossless_(lossless) {
    // A new log has read nothing; a reopened one cannot know what was read: everything kept
    // counts as unread.
    read_mark_ = end_ > capacity_ ? end_ - capacity_ : 0;
  }

 private:
  // Counts `bytes` more and punches out what fell before start() once it is a step or more.
  void Advance(uint64_t bytes);
  // Releases [punched_, start()).
  void Punch();
  void Notify();

  kj::AutoCloseFd fd_;
  uint64_t end_;
  uint64_t punched_;  // bytes before this offset have been released from the file
  uint64_t capacity_;
  bool lossless_;
  uint64_t read_mark_ = 0;  // lossless: the furthest offset some subscriber acknowledged
  bool closed_ = false;
  kj::Own<kj::PromiseFulfiller<void>> room_;  // the pump waiting in WhenRoom()
  Gaps gaps_;
  // One forked promise per change: a cancelled subscriber drops only its branch, so waiting
  // costs nothing that outlives the waiter.
  kj::Maybe<kj::ForkedPromise<void>> changed_;
  kj::Own<kj::PromiseFulfiller<void>> notify_;
};

}  // namespace paseo
