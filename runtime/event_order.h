// The order of fd 4 events, which Paseo treats as fatal to get wrong: started -> [resized
// acks, pty only, between started and eof] -> eof (every output stream ended) -> exit, or an
// error at any point before exit, after which nothing more is written. Each call returns the
// bytes to write now (possibly none); a call that would break the order is refused, so a bug
// here shows up as a test failure rather than as a broken Paseo session.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace paseo::runtime {

class EventOrder {
 public:
  // `streams`: how many output streams must end before eof (2 for pipes, 1 for a pty).
  EventOrder(bool pty, int streams) : pty_(pty), streams_left_(streams) {}

  // The process can be signalled. Also acknowledges resizes held since before it.
  absl::StatusOr<std::string> Started();
  // A resize was applied. Held until started; refused for pipes and after eof.
  absl::StatusOr<std::string> Resized(int64_t id);
  // One output stream reached its end; eof once all have (and started was sent).
  absl::StatusOr<std::string> StreamEnded();
  // How the workload ended; only after eof.
  absl::StatusOr<std::string> Exit(std::optional<int> code, std::optional<std::string> signal);
  // Fails the process; nothing is written after it (and nothing once exit was written).
  std::string Error(const std::string& message);

  bool started() const { return phase_ != Phase::kWaiting; }
  bool finished() const { return phase_ == Phase::kExited || phase_ == Phase::kFailed; }

 private:
  enum class Phase { kWaiting, kStarted, kEof, kExited, kFailed };
  bool pty_;
  int streams_left_;
  Phase phase_ = Phase::kWaiting;
  std::vector<int64_t> held_resizes_;
};

}  // namespace paseo::runtime
