// See strict_json.h.
#include "runtime/strict_json.h"


#include <cmath>
#include <cstring>

#include <capnp/compat/json.h>
#include <kj/exception.h>

#include "absl/strings/str_cat.h"
#include "common/request_checks.h"

namespace paseo::runtime {
namespace {

using capnp::JsonValue;

constexpr double kMaxSafeInt = 9007199254740992.0;  // 2^53

absl::Status Invalid(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

const char* TypeName(JsonValue::Reader v) {
  switch (v.which()) {
    case JsonValue::NULL_: return "null";
    case JsonValue::BOOLEAN: return "a boolean";
    case JsonValue::NUMBER: return "a number";
    case JsonValue::STRING: return "a string";
    case JsonValue::ARRAY: return "an array";
    case JsonValue::OBJECT: return "an object";
    case JsonValue::CALL: return "a call";
  }
  return "unknown";
}

absl::StatusOr<std::string> AsString(JsonValue::Reader v, absl::string_view path) {
  if (!v.isString()) return Invalid(path, absl::StrCat("expected a string, got ", TypeName(v)));
  auto text = v.getString();
  // capnp Text holds a decoded \u0000 inside its length; nothing we pass on may contain NUL.
  if (std::memchr(text.begin(), '\0', text.size()) != nullptr)
    return Invalid(path, "contains a NUL character");
  std::string s(text.begin(), text.size());
  if (!IsValidUtf8(s)) return Invalid(path, "is not valid UTF-8");
  return s;
}

}  // namespace

absl::Status UnsupportedVersion(absl::string_view path, absl::string_view got, int expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": unsupported command runtime protocol version ", got,
                   "; this runtime was started for version ", expected,
                   " (docs/paseo.md, \"Protocol versions\")"));
}

std::string Describe(JsonValue::Reader value) {
  capnp::JsonCodec codec;
  try {
    auto text = codec.encodeRaw(value);
    return std::string(text.cStr());
  } catch (const kj::Exception&) {
    return TypeName(value);
  }
}

absl::StatusOr<std::unique_ptr<ParsedJson>> ParsedJson::Parse(absl::string_view text) {
  if (text.size() > kMaxMessageBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("message is longer than ", kMaxMessageBytes, " bytes"));
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("message is not valid UTF-8");
  auto parsed = std::make_unique<ParsedJson>();
  capnp::JsonCodec codec;
  codec.setMaxNestingDepth(32);
  auto root = parsed->message_.initRoot<JsonValue>();
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions(
      [&]() { codec.decodeRaw(kj::ArrayPtr<const char>(text.data(), text.size()), root); });
  KJ_IF_MAYBE(e, error) {
    return absl::InvalidArgumentError(
        absl::StrCat("message is not valid JSON: ", e->getDescription().cStr()));
  }
  return parsed;
}

absl::StatusOr<StrictObject> StrictObject::Make(JsonValue::Reader value, std::string path,
                                                const std::vector<absl::string_view>& allowed) {
  if (!value.isObject())
    return Invalid(path, absl::StrCat("expected an object, got ", TypeName(value)));
  StrictObject obj;
  obj.path_ = std::move(path);
  for (auto field : value.getObject()) {
    std::string name(field.getName().begin(), field.getName().size());
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
      return Invalid(obj.path_, absl::StrCat("unknown key \"", name, "\""));
    if (!obj.fields_.emplace(name, field.getValue()).second)
      return Invalid(obj.path_, absl::StrCat("duplicate key \"", name, "\""));
  }
  return obj;
}

std::optional<JsonValue::Reader> StrictObject::Get(absl::string_view key) const {
  auto it = fields_.find(std::string(key));
  if (it == fields_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::string> StrictObject::String(absl::string_view key) const {
  auto v = Get(key);
  if (!v) return Invalid(Path(key), "required");
  return AsString(*v, Path(key));
}

absl::StatusOr<std::optional<std::string>> StrictObject::OptionalString(
    absl::string_view key) const {
  auto v = Get(key);
  if (!v) return std::optional<std::string>();
  auto s = AsString(*v, Path(key));
  if (!s.ok()) return s.status();
  return std::optional<std::string>(*std::move(s));
}

absl::StatusOr<std::optional<bool>> StrictObject::OptionalBool(absl::string_view key) const {
  auto v = Get(key);
  if (!v) return std::optional<bool>();
  if (!v->isBoolean())
    return Invalid(Path(key), absl::StrCat("expected a boolean, got ", TypeName(*v)));
  return std::optional<bool>(v->getBoolean());
}

absl::StatusOr<std::optional<double>> StrictObject::OptionalNumber(absl::string_view key) const {
  auto v = Get(key);
  if (!v) return std::optional<double>();
  if (!v->isNumber() || !std::isfinite(v->getNumber()))
    return Invalid(Path(key), absl::StrCat("expected a number, got ", TypeName(*v)));
  return std::optional<double>(v->getNumber());
}

absl::StatusOr<int64_t> StrictObject::Int(absl::string_view key, int64_t min) const {
  auto v = Get(key);
  if (!v) return Invalid(Path(key), "required");
  if (!v->isNumber())
    return Invalid(Path(key), absl::StrCat("expected an integer, got ", TypeName(*v)));
  double d = v->getNumber();
  if (!std::isfinite(d) || std::trunc(d) != d || std::fabs(d) >= kMaxSafeInt)
    return Invalid(Path(key), absl::StrCat("expected an integer, got ", Describe(*v)));
  auto i = static_cast<int64_t>(d);
  if (i < min) return Invalid(Path(key), absl::StrCat("must be at least ", min));
  return i;
}

absl::StatusOr<StrictObject> StrictObject::Object(
    absl::string_view key, const std::vector<absl::string_view>& allowed) const {
  auto v = Get(key);
  if (!v) return Invalid(Path(key), "required");
  return Make(*v, Path(key), allowed);
}

absl::StatusOr<std::vector<std::string>> StrictObject::StringArray(absl::string_view key) const {
  auto v = Get(key);
  if (!v) return Invalid(Path(key), "required");
  if (!v->isArray())
    return Invalid(Path(key), absl::StrCat("expected an array, got ", TypeName(*v)));
  std::vector<std::string> out;
  unsigned i = 0;
  for (auto item : v->getArray()) {
    auto s = AsString(item, absl::StrCat(Path(key), "[", i++, "]"));
    if (!s.ok()) return s.status();
    out.push_back(*std::move(s));
  }
  return out;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> StrictObject::StringMap(
    absl::string_view key) const {
  auto v = Get(key);
  if (!v) return Invalid(Path(key), "required");
  if (!v->isObject())
    return Invalid(Path(key), absl::StrCat("expected an object, got ", TypeName(*v)));
  std::vector<std::pair<std::string, std::string>> out;
  for (auto field : v->getObject()) {
    std::string name(field.getName().begin(), field.getName().size());
    for (const auto& [existing, unused] : out) {
      if (existing == name) return Invalid(Path(key), absl::StrCat("duplicate key \"", name, "\""));
    }
    auto s = AsString(field.getValue(), absl::StrCat(Path(key), ".", name));
    if (!s.ok()) return s.status();
    out.emplace_back(std::move(name), *std::move(s));
  }
  return out;
}

absl::Status StrictObject::ProtocolVersion(int expected) const {
  auto v = Get("protocolVersion");
  if (!v) return Invalid(Path("protocolVersion"), "required");
  if (!v->isNumber() || v->getNumber() != expected)
    return UnsupportedVersion(path_, Describe(*v), expected);
  return absl::OkStatus();
}

}  // namespace paseo::runtime
