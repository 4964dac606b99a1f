// Strict reading of the JSON that Paseo sends (contract v1: every object is strict, unknown or
// duplicate keys are errors, integers must be integers). Parsed with capnp's JsonCodec into a
// JsonValue tree; the checks here are ours, so each error names the offending field path.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <capnp/compat/json.h>
#include <capnp/message.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paseo::runtime {

// Bytes of one JSON message at most (a request, a spawn envelope, a control frame).
inline constexpr size_t kMaxMessageBytes = 1 << 20;

// One parsed document; its root stays valid as long as the ParsedJson lives.
class ParsedJson {
 public:
  // Parses `text` (one JSON value, nothing after it but whitespace). Refuses invalid UTF-8.
  static absl::StatusOr<std::unique_ptr<ParsedJson>> Parse(absl::string_view text);
  capnp::JsonValue::Reader root() { return message_.getRoot<capnp::JsonValue>().asReader(); }

 private:
  capnp::MallocMessageBuilder message_;
};

// An object whose keys are checked once: each at most once, each in `allowed`.
class StrictObject {
 public:
  static absl::StatusOr<StrictObject> Make(capnp::JsonValue::Reader value, std::string path,
                                           const std::vector<absl::string_view>& allowed);

  bool Has(absl::string_view key) const { return fields_.count(std::string(key)) != 0; }
  std::optional<capnp::JsonValue::Reader> Get(absl::string_view key) const;

  // Typed members. Required ones fail when absent; optional ones return nullopt.
  absl::StatusOr<std::string> String(absl::string_view key) const;
  absl::StatusOr<std::optional<std::string>> OptionalString(absl::string_view key) const;
  absl::StatusOr<std::optional<bool>> OptionalBool(absl::string_view key) const;
  absl::StatusOr<std::optional<double>> OptionalNumber(absl::string_view key) const;
  // An integer in [min, 2^53) (JSON numbers are doubles; 1.0 is 1, 1.5 is refused).
  absl::StatusOr<int64_t> Int(absl::string_view key, int64_t min) const;
  absl::StatusOr<StrictObject> Object(absl::string_view key,
                                      const std::vector<absl::string_view>& allowed) const;
  absl::StatusOr<std::vector<std::string>> StringArray(absl::string_view key) const;
  // A string -> string map (the workload env), in the order sent; duplicates refused.
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> StringMap(
      absl::string_view key) const;
  // `protocolVersion` must be exactly `expected`.
  absl::Status ProtocolVersion(int expected) const;

  const std::string& path() const { return path_; }
  std::string Path(absl::string_view key) const { return path_ + "." + std::string(key); }

 private:
  std::string path_;
  std::map<std::string, capnp::JsonValue::Reader> fields_;
};

// Protocol version errors get this wording everywhere.
absl::Status UnsupportedVersion(absl::string_view path, absl::string_view got, int expected);

// A JSON value rendered back as compact text (for error messages).
std::string Describe(capnp::JsonValue::Reader value);

}  // namespace paseo::runtime
