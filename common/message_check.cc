// See message_check.h.
#include "common/message_check.h"

#include <capnp/dynamic.h>
#include <kj/exception.h>

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace paseo {
namespace {

// capnp's words (capnp/layout.c++, arena.c++) for each kind of failure, mapped onto ours.
const char* WhatFailed(std::string_view description) {
  struct Match {
    std::string_view needle;
    int what;
  };
  static constexpr Match kMatches[] = {
      {"bounds", 0},          {"unknown segment", 0},    {"overran", 0},
      {"ends prematurely", 0}, {"amplified", 4},         {"non-struct", 1},
      {"non-list", 1},        {"non-capability", 1},     {"non-bytes", 1},
      {"invalid capability", 1}, {"incompatible", 1},    {"Expected", 1},
      {"NUL", 2},             {"deeply", 3},             {"traversal limit", 4},
      {"too large", 4},
  };
  for (const Match& m : kMatches) {
    if (description.find(m.needle) != std::string_view::npos) return kMalformedWhat[m.what];
  }
  return kMalformedWhat[5];
}

// The whole description: it may hold a NUL (the value a failed check printed), which cStr()
// would stop at.
std::string_view Description(const kj::Exception& e) {
  return std::string_view(e.getDescription().begin(), e.getDescription().size());
}

class Walker {
 public:
  void Struct(capnp::DynamicStruct::Reader s) {
    for (auto field : s.getSchema().getNonUnionFields()) Field(s, field);
    KJ_IF_MAYBE(field, s.which()) { Field(s, *field); }
  }

  const std::string& path() const { return path_; }

 private:
  // The path is only for the reason: bounded, so a deep message cannot make it long.
  static constexpr size_t kMaxPath = 160;

  void Field(capnp::DynamicStruct::Reader s, capnp::StructSchema::Field field) {
    size_t len = path_.size();
    if (len < kMaxPath) absl::StrAppend(&path_, len == 0 ? "" : ".", field.getProto().getName().cStr());
    Value(s.get(field));
    path_.resize(len);
  }

  void Value(capnp::DynamicValue::Reader v) {
    switch (v.getType()) {
      case capnp::DynamicValue::STRUCT:
        Struct(v.as<capnp::DynamicStruct>());
        break;
      case capnp::DynamicValue::LIST:
        List(v.as<capnp::DynamicList>());
        break;
      case capnp::DynamicValue::ANY_POINTER:
        // Whatever it points at, as far as it reaches: bounds and kinds of every pointer.
        v.as<capnp::AnyPointer>().targetSize();
        break;
      default:
        // Primitives, enums, text and data were read (and checked) by get(); a capability is
        // only an index, checked when it is used.
        break;
    }
  }

  void List(capnp::DynamicList::Reader list) {
    switch (list.getSchema().whichElementType()) {
      case capnp::schema::Type::STRUCT:
      case capnp::schema::Type::LIST:
      case capnp::schema::Type::TEXT:
      case capnp::schema::Type::DATA:
      case capnp::schema::Type::ANY_POINTER:
        break;
      default:
        return;  // primitives: the list's own bounds were checked when it was read
    }
    for (unsigned i = 0; i < list.size(); ++i) {
      size_t len = path_.size();
      if (len < kMaxPath) absl::StrAppend(&path_, "[", i, "]");
      Value(list[i]);
      path_.resize(len);
    }
  }

  std::string path_;
};

}  // namespace

std::optional<absl::Status> MalformedRequest(const kj::Exception& e) {
  std::string_view d = Description(e);
  // capnp's reading failures, and nothing else: its other words are ours to keep internal.
  for (std::string_view phrase :
       {"Message contain", "Message is too", "Message ends prematurely", "Message has too many",
        "Exceeded message traversal limit", "Expected Text, got", "Expected a ",
        "Expected data only", "Struct list pointer's elements overran", "Text blob missing NUL",
        "expected boundsCheck("}) {
    if (d.find(phrase) != std::string_view::npos)
      return absl::InvalidArgumentError(absl::StrCat("malformed request: ", WhatFailed(d)));
  }
  return std::nullopt;
}

absl::Status CheckReadable(capnp::AnyPointer::Reader message, capnp::StructSchema type) {
  Walker walker;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
                walker.Struct(message.getAs<capnp::DynamicStruct>(type));
              })) {
    std::string where = walker.path().empty() ? "the parameters" : walker.path();
    return absl::InvalidArgumentError(
        absl::StrCat("malformed request: ", WhatFailed(Description(*e)), " at ", where));
  }
  return absl::OkStatus();
}

}  // namespace paseo
