// See json_writer.h.
#include "absl/strings/string_view.h"
#include "common/json_writer.h"

#include <cmath>
#include <cstdio>

namespace paseo {

void JsonWriter::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_.push_back(',');
    first_.back() = false;
  }
}

void JsonWriter::Open(char c) {
  Separate();
  out_.push_back(c);
  first_.push_back(true);
}

void JsonWriter::Close(char c) {
  out_.push_back(c);
  first_.pop_back();
}

void JsonWriter::Key(absl::string_view key) {
  String(key);
  out_.push_back(':');
  after_key_ = true;
}

void JsonWriter::String(absl::string_view value) {
  Separate();
  out_.push_back('"');
  for (unsigned char c : value) {
    switch (c) {
      case '"': out_ += "\\\""; break;
      case '\\': out_ += "\\\\"; break;
      case '\n': out_ += "\\n"; break;
      case '\t': out_ += "\\t"; break;
      case '\r': out_ += "\\r"; break;
      case '\b': out_ += "\\b"; break;
      case '\f': out_ += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out_ += buf;
        } else {
          out_.push_back(static_cast<char>(c));
        }
    }
  }
  out_.push_back('"');
}

void JsonWriter::Int(int64_t value) {
  Separate();
  out_ += std::to_string(value);
}

void JsonWriter::UInt(uint64_t value) {
  Separate();
  out_ += std::to_string(value);
}

void JsonWriter::Fixed(double value, int decimals) {
  if (!std::isfinite(value)) return Null();
  Separate();
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  out_ += buf;
}

void JsonWriter::Bool(bool value) {
  Separate();
  out_ += value ? "true" : "false";
}

void JsonWriter::Null() {
  Separate();
  out_ += "null";
}

void JsonWriter::StringArray(const std::vector<std::string>& values) {
  BeginArray();
  for (const auto& v : values) String(v);
  EndArray();
}

}  // namespace paseo
