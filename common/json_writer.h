// A minimal streaming JSON writer for documents the privhelper generates itself (OCI
// config.json, process.json). Output only; callers choose every key, so no schema is needed.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

namespace paseo {

// Usage:
//   JsonWriter w;
//   w.BeginObject(); w.Key("ociVersion"); w.String("1.0.2"); w.EndObject();
//   std::string text = w.Take();
class JsonWriter {
 public:
  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(absl::string_view key);
  void String(absl::string_view value);
  void Int(int64_t value);
  void UInt(uint64_t value);
  // A finite number with at most `decimals` digits after the point (a non-finite one: null).
  void Fixed(double value, int decimals);
  void Bool(bool value);
  void Null();
  void StringArray(const std::vector<std::string>& values);
  std::string Take() { return std::move(out_); }

 private:
  void Open(char c);
  void Close(char c);
  void Separate();
  std::string out_;
  std::vector<bool> first_;    // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace paseo
