// See audit_log.h.
#include "broker/audit_log.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json_writer.h"
#include "common/status.h"

namespace paseo {
namespace {

// "2026-12-01T10:00:00.123Z"
std::string Rfc3339(int64_t time_ms) {
  time_t seconds = static_cast<time_t>(time_ms / 1000);
  struct tm utc;
  gmtime_r(&seconds, &utc);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(time_ms % 1000));
  return buf;
}

// The length of the valid UTF-8 sequence at the start of `s`, or 0 if it is not one
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
size_t Utf8SequenceLength(absl::string_view s) {
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) n = 2, cp = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef) n = 3, cp = c & 0x0f;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, cp = c & 0x07;
  else return 0;
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

}  // namespace

std::string SanitizedUtf8(absl::string_view text, size_t max) {
  constexpr absl::string_view kReplacement = "\xef\xbf\xbd";
  constexpr absl::string_view kCut = "...";
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t n = Utf8SequenceLength(text.substr(i));
    absl::string_view piece = n == 0 ? kReplacement : text.substr(i, n);
    if (out.size() + piece.size() > max) {
      // Cut, keeping room for the marker.
      while (!out.empty() && out.size() + kCut.size() > max) {
        size_t back = out.size() - 1;
        while (back > 0 && (static_cast<unsigned char>(out[back]) & 0xc0) == 0x80) --back;
        out.resize(back);
      }
      if (out.size() + kCut.size() <= max) out.append(kCut.data(), kCut.size());
      return out;
    }
    out.append(piece.data(), piece.size());
    i += n == 0 ? 1 : n;
  }
  return out;
}

absl::string_view AuditResultName(AuditResult result) {
  switch (result) {
    case AuditResult::kOk:
      return "ok";
    case AuditResult::kRefused:
      return "refused";
    case AuditResult::kFailed:
      return "failed";
    case AuditResult::kCancelled:
      return "cancelled";
  }
  return "failed";
}

void StderrAuditSink::Append(absl::string_view line) {
  std::string text = absl::StrCat(kAuditStderrPrefix, line);
  // One write: a short write of a line this small to a pipe or the journal's socket does not
  // happen; a failure has nowhere better to be reported.
  ssize_t ignored = write(fd_, text.data(), text.size());
  (void)ignored;
}

absl::StatusOr<std::unique_ptr<RotatingFileSink>> RotatingFileSink::Open(std::string path,
                                                                         uint64_t max_bytes,
                                                                         uint32_t max_files) {
  if (max_files < 1 || max_bytes < kMaxAuditLineBytes)
    return absl::InvalidArgumentError("audit log: maxFiles must be >= 1 and maxBytes >= 8 KiB");
  std::unique_ptr<RotatingFileSink> sink(
      new RotatingFileSink(std::move(path), max_bytes, max_files));
  // Files a larger maxFiles left behind would escape the bound: remove them.
  size_t slash = sink->path_.rfind('/');
  std::string dir = slash == 0 ? "/" : sink->path_.substr(0, slash);
  std::string prefix = sink->path_.substr(slash + 1) + ".";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      absl::string_view name = e->d_name;
      uint32_t k;
      if (name.substr(0, prefix.size()) == prefix &&
          absl::SimpleAtoi(name.substr(prefix.size()), &k) && k >= max_files)
        unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
  }
  RETURN_IF_ERROR(sink->OpenCurrent());
  return sink;
}

RotatingFileSink::~RotatingFileSink() {
  if (fd_ >= 0) close(fd_);
}

absl::Status RotatingFileSink::OpenCurrent() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  // O_NOFOLLOW: the directory is the broker's alone, but a link there is never followed.
  fd_ = open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd_ < 0) return ErrnoStatus("open", path_);
  struct stat st;
  if (fstat(fd_, &st) != 0) return ErrnoStatus("fstat", path_);
  if (!S_ISREG(st.st_mode)) {
    close(fd_);
    fd_ = -1;
    return absl::FailedPreconditionError(absl::StrCat(path_, " is not a regular file"));
  }
  size_ = static_cast<uint64_t>(st.st_size);
  return absl::OkStatus();
}

// Called with the current file open.
absl::Status RotatingFileSink::Rotate() {
  if (max_files_ == 1) {
    // No older file to keep: start the one file again.
    if (ftruncate(fd_, 0) != 0) return ErrnoStatus("ftruncate", path_);
    size_ = 0;
    return absl::OkStatus();
  }
  // The oldest is overwritten by the rename before it.
  for (uint32_t k = max_files_ - 1; k >= 1; --k) {
    std::string from = k == 1 ? path_ : absl::StrCat(path_, ".", k - 1);
    std::string to = absl::StrCat(path_, ".", k);
    if (rename(from.c_str(), to.c_str()) != 0 && errno != ENOENT)
      return ErrnoStatus("rename", from);
  }
  return OpenCurrent();
}

void RotatingFileSink::Complain(const absl::Status& status) {
  ++dropped_;
  if (complained_) return;
  complained_ = true;
  std::fprintf(stderr, "paseo-sandbox-broker: audit log: dropping lines: %s\n",
               std::string(status.message()).c_str());
}

void RotatingFileSink::Append(absl::string_view line) {
  if (fd_ < 0) {
    // A rotation that could not open its new file: open it now (renaming nothing again).
    absl::Status opened = OpenCurrent();
    if (!opened.ok()) return Complain(opened);
  }
  if (size_ + line.size() > max_bytes_) {
    absl::Status rotated = Rotate();
    if (!rotated.ok()) return Complain(rotated);
  }
  ssize_t w = write(fd_, line.data(), line.size());
  if (w < 0) return Complain(ErrnoStatus("write", path_));
  size_ += static_cast<uint64_t>(w);
  if (static_cast<size_t>(w) != line.size()) {
    // A partial line (the disk filled up): end it, so the next line still parses.
    if (write(fd_, "\n", 1) == 1) ++size_;
    return Complain(absl::ResourceExhaustedError(absl::StrCat("short write to ", path_)));
  }
  complained_ = false;
}

int64_t AuditLog::SystemClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

AuditLog::AuditLog(std::unique_ptr<AuditSink> sink, uint32_t refusals_per_second, Clock clock)
    : sink_(std::move(sink)),
      refusals_per_second_(refusals_per_second),
      clock_(std::move(clock)) {}

AuditLog::~AuditLog() {
  // What was counted but not yet written is not lost at a clean exit.
  for (const auto& [uid, w] : windows_)
    if (w.suppressed > 0) Summarize(uid, w);
}

std::string AuditLog::Line(const AuditRecord& r, int64_t time_ms) {
  auto text = [](const std::string& s) { return SanitizedUtf8(s, kMaxAuditFieldBytes); };
  JsonWriter w;
  w.BeginObject();
  w.Key("time");
  w.String(Rfc3339(time_ms));
  w.Key("uid");
  w.Int(r.uid);
  w.Key("gid");
  w.Int(r.gid);
  w.Key("pid");
  w.Int(r.pid);
  w.Key("operation");
  w.String(text(r.operation));
  if (!r.deployment.empty()) {
    w.Key("deployment");
    w.String(text(r.deployment));
  }
  if (!r.sandbox_id.empty()) {
    w.Key("sandboxId");
    w.String(text(r.sandbox_id));
  }
  if (!r.process_id.empty()) {
    w.Key("processId");
    w.String(text(r.process_id));
  }
  w.Key("result");
  w.String(AuditResultName(r.result));
  if (r.result != AuditResult::kOk) {
    w.Key("error");
    w.String(text(r.error));
    w.Key("reason");
    w.String(SanitizedUtf8(r.reason, kMaxAuditReasonBytes));
  }
  w.EndObject();
  std::string line = w.Take();
  line.push_back('\n');
  return line;
}

void AuditLog::Summarize(int64_t uid, const Window& w) {
  JsonWriter j;
  j.BeginObject();
  j.Key("time");
  j.String(Rfc3339(clock_()));
  j.Key("uid");
  j.Int(uid);
  j.Key("operation");
  j.String(SanitizedUtf8(w.last_operation, kMaxAuditFieldBytes));
  j.Key("result");
  j.String("coalesced");
  j.Key("count");
  j.Int(static_cast<int64_t>(w.suppressed));
  j.Key("error");
  j.String(SanitizedUtf8(w.last_error, kMaxAuditFieldBytes));
  j.Key("reason");
  j.String(absl::StrCat(w.suppressed,
                        " more requests from this uid (refused, failed, or from a uid no "
                        "deployment allows) in the second from ",
                        Rfc3339(w.second * 1000), ", past ", refusals_per_second_,
                        " written one by one (the last: ", w.last_operation, ")"));
  j.EndObject();
  std::string line = j.Take();
  line.push_back('\n');
  Append(line);
}

void AuditLog::Append(absl::string_view line) {
  ++counts_.lines;
  sink_->Append(line);
}

void AuditLog::Write(const AuditRecord& record) {
  int64_t now = clock_();
  ++counts_.records;
  if (record.result != AuditResult::kOk)
    ++counts_.not_ok_by_reason[record.error.empty() ? "unknown" : record.error];
  if (record.result == AuditResult::kOk && !record.unauthorized_peer) {
    Append(Line(record, now));
    return;
  }
  int64_t second = now / 1000;
  Window& w = windows_[record.uid];
  if (w.second != second) {
    if (w.suppressed > 0) Summarize(record.uid, w);
    w = Window();
    w.second = second;
  }
  if (w.written < refusals_per_second_) {
    ++w.written;
    Append(Line(record, now));
    return;
  }
  ++w.suppressed;
  w.last_operation = SanitizedUtf8(record.operation, kMaxAuditFieldBytes);
  w.last_error = SanitizedUtf8(record.error, kMaxAuditFieldBytes);
}

void AuditLog::Flush() {
  int64_t second = clock_() / 1000;
  for (auto it = windows_.begin(); it != windows_.end();) {
    if (it->second.second == second) {
      ++it;
      continue;
    }
    if (it->second.suppressed > 0) Summarize(it->first, it->second);
    it = windows_.erase(it);
  }
}

}  // namespace paseo
