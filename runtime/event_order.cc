// See event_order.h.
#include "runtime/event_order.h"

#include "runtime/protocol.h"

namespace paseo::runtime {

absl::StatusOr<std::string> EventOrder::Started() {
  if (phase_ != Phase::kWaiting) return absl::FailedPreconditionError("started twice or late");
  phase_ = Phase::kStarted;
  std::string out = StartedEvent();
  for (int64_t id : held_resizes_) out += ResizedEvent(id);
  held_resizes_.clear();
  if (streams_left_ == 0) {
    phase_ = Phase::kEof;
    out += EofEvent();
  }
  return out;
}

absl::StatusOr<std::string> EventOrder::Resized(int64_t id) {
  if (!pty_) return absl::FailedPreconditionError("resized on pipes");
  if (phase_ == Phase::kWaiting) {
    held_resizes_.push_back(id);
    return std::string();
  }
  if (phase_ != Phase::kStarted) return absl::FailedPreconditionError("resized after eof");
  return ResizedEvent(id);
}

absl::StatusOr<std::string> EventOrder::StreamEnded() {
  if (streams_left_ == 0) return absl::FailedPreconditionError("more streams ended than exist");
  if (phase_ == Phase::kFailed) return std::string();
  if (--streams_left_ > 0 || phase_ == Phase::kWaiting) return std::string();
  if (phase_ != Phase::kStarted) return absl::FailedPreconditionError("eof twice");
  phase_ = Phase::kEof;
  return EofEvent();
}

absl::StatusOr<std::string> EventOrder::Exit(std::optional<int> code,
                                             std::optional<std::string> signal) {
  if (phase_ == Phase::kFailed) return std::string();
  if (phase_ != Phase::kEof) return absl::FailedPreconditionError("exit before eof or twice");
  phase_ = Phase::kExited;
  return ExitEvent(code, std::move(signal));
}

std::string EventOrder::Error(const std::string& message) {
  if (finished()) return "";
  phase_ = Phase::kFailed;
  return ErrorEvent(message);
}

}  // namespace paseo::runtime
