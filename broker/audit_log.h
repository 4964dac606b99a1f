// The broker's audit log: one JSON line per client call and per refused connection, written to
// the broker's stderr (the journal under systemd) or to a size-bounded set of rotating files.
// Refusals are coalesced per uid, so a flood of them floods neither the disk nor the journal.
// Usage:
//   AuditLog log(std::make_unique<StderrAuditSink>(), /*refusals_per_second=*/20);
//   AuditRecord r;
//   r.operation = "Supervisor.listSandboxes"; r.uid = 1000; r.gid = 1000; r.pid = 42;
//   log.Write(r);        // result kOk of an authorized peer: always written
//   log.Flush();         // once a second: the summaries of coalescing windows that ended
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paseo {

enum class AuditResult {
  kOk,         // the call did what was asked
  kRefused,    // refused with a reason a client can cause (invalid-argument, permission-denied...)
  kFailed,     // failed inside the service (internal)
  kCancelled,  // ended without an answer (the connection went away mid-call)
};

struct AuditRecord {
  std::string operation;  // "Supervisor.createSandbox", "connect", ...
  int64_t uid = -1;       // -1: not known (a connection without credentials)
  int64_t gid = -1;
  int64_t pid = 0;
  std::string deployment;  // empty: none known (written only when set)
  std::string sandbox_id;
  std::string process_id;
  AuditResult result = AuditResult::kOk;
  std::string error;   // the reason token ("permission-denied"); empty when ok
  std::string reason;  // what the client was told
  // From a peer that may use no deployment: even its allowed calls (info) are coalesced like
  // refusals, since such a peer can only ask info() and be refused.
  bool unauthorized_peer = false;
};

// Where lines go. `line` is one complete JSON document ending in '\n'.
class AuditSink {
 public:
  virtual ~AuditSink() = default;
  virtual void Append(absl::string_view line) = 0;
};

// Lines on stderr, each prefixed kAuditStderrPrefix and written with one write(2), so they
// never interleave with the broker's other messages.
inline constexpr char kAuditStderrPrefix[] = "paseo-sandbox-audit: ";
class StderrAuditSink final : public AuditSink {
 public:
  explicit StderrAuditSink(int fd = 2) : fd_(fd) {}
  void Append(absl::string_view line) override;

 private:
  int fd_;
};

// `path` and at most max_files-1 older files (path.1 is the newest of them). A line that would
// take the current file past max_bytes rotates first (path.N-2 -> path.N-1, ..., path ->
// path.1, a new path), so the set never holds more than max_bytes * max_files bytes. Opening
// appends to what a previous broker left and removes path.K for K >= max_files (a smaller
// maxFiles than before). A failed write or rotation drops the line and says so on stderr (once
// until a write succeeds again); it never stops the broker.
class RotatingFileSink final : public AuditSink {
 public:
  static absl::StatusOr<std::unique_ptr<RotatingFileSink>> Open(std::string path,
                                                                uint64_t max_bytes,
                                                                uint32_t max_files);
  ~RotatingFileSink() override;
  void Append(absl::string_view line) override;
  uint64_t dropped() const { return dropped_; }

 private:
  RotatingFileSink(std::string path, uint64_t max_bytes, uint32_t max_files)
      : path_(std::move(path)), max_bytes_(max_bytes), max_files_(max_files) {}
  absl::Status OpenCurrent();
  absl::Status Rotate();
  void Complain(const absl::Status& status);

  std::string path_;
  uint64_t max_bytes_;
  uint32_t max_files_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t dropped_ = 0;
  bool complained_ = false;
};

// A field longer than this (in bytes, before JSON escaping) is cut, so that no line exceeds
// kMaxAuditLineBytes (escaping can make a byte six).
inline constexpr size_t kMaxAuditFieldBytes = 128;
inline constexpr size_t kMaxAuditReasonBytes = 512;
inline constexpr size_t kMaxAuditLineBytes = 8192;

class AuditLog {
 public:
  // Milliseconds since the Unix epoch.
  using Clock = std::function<int64_t()>;
  static int64_t SystemClockMs();

  // `refusals_per_second`: records of one uid that are not ok, or come from an unauthorized
  // peer, written one by one per wall-clock second; the rest of that second are counted and
  // written as one "coalesced" line (by Flush, or by the uid's next such record after the
  // second ended). Allowed calls of authorized peers are always written.
  AuditLog(std::unique_ptr<AuditSink> sink, uint32_t refusals_per_second,
           Clock clock = SystemClockMs);
  ~AuditLog();

  void Write(const AuditRecord& record);
  // Writes the summary of every coalescing window that has ended and forgets idle uids.
  void Flush();

  // The JSON line (with '\n') for `record` at `time_ms`; public for tests.
  static std::string Line(const AuditRecord& record, int64_t time_ms);

  // What this log has seen since it opened (the operator's metrics): every record, the lines it
  // appended (a coalesced second's summary is one), and the records that were not ok by their
  // reason token ("permission-denied", ..., "cancelled"), coalesced ones included.
  struct Counts {
    uint64_t records = 0;
    uint64_t lines = 0;
    std::map<std::string, uint64_t> not_ok_by_reason;
  };
  const Counts& counts() const { return counts_; }

 private:
  struct Window {
    int64_t second = 0;        // the wall-clock second it counts
    uint32_t written = 0;      // non-ok lines written one by one in it
    uint64_t suppressed = 0;   // the rest
    std::string last_operation;
    std::string last_error;
  };
  void Summarize(int64_t uid, const Window& w);
  void Append(absl::string_view line);

  std::unique_ptr<AuditSink> sink_;
  uint32_t refusals_per_second_;
  Clock clock_;
  std::map<int64_t, Window> windows_;
  Counts counts_;
};

// The audit name of a result: "ok", "refused", "failed", "cancelled".
absl::string_view AuditResultName(AuditResult result);

// `text` as valid UTF-8 (each invalid byte becomes U+FFFD) of at most `max` bytes (cut at a
// character boundary, "..." marking a cut).
std::string SanitizedUtf8(absl::string_view text, size_t max);

}  // namespace paseo
