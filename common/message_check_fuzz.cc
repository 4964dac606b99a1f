// Fuzzes CheckReadable (common/message_check.h), the broker's check of every call's parameters
// before a method reads them: the input is a capnp message as a client would frame it (segment
// table and segments), read as the parameters of the method the first byte picks. Checks the
// promise the broker relies on: what the check accepts, reading every field (as prettyPrint
// does) cannot fail; what it refuses, it refuses in our words only.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <capnp/dynamic.h>
#include <capnp/message.h>
#include <capnp/pretty-print.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "absl/strings/match.h"
#include "common/message_check.h"
#include "schema/api.capnp.h"

namespace {

void Check(bool ok) {
  if (!ok) abort();
}

capnp::StructSchema Picked(uint8_t which) {
  static const std::vector<capnp::StructSchema> types = [] {
    std::vector<capnp::StructSchema> t;
    for (capnp::InterfaceSchema i : {capnp::Schema::from<paseo::api::Supervisor>(),
                                     capnp::Schema::from<paseo::api::Sandbox>(),
                                     capnp::Schema::from<paseo::api::Process>()}) {
      for (auto m : i.getMethods()) t.push_back(m.getParamType());
    }
    return t;
  }();
  return types[which % types.size()];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 + 8 || (size - 1) % 8 != 0 || size > (64 << 10)) return 0;
  auto words = kj::heapArray<capnp::word>((size - 1) / 8);
  std::memcpy(words.begin(), data + 1, size - 1);
  capnp::StructSchema type = Picked(data[0]);
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 4 * words.size() + 64;
  options.nestingLimit = 32;  // as the broker's connections (connection_limits.cc)
  kj::Own<capnp::FlatArrayMessageReader> reader;
  // A bad segment table is the transport's to refuse (MeteredStream, capnp): not this check's.
  if (kj::runCatchingExceptions([&] { reader = kj::heap<capnp::FlatArrayMessageReader>(words, options); }) !=
      nullptr)
    return 0;
  capnp::AnyPointer::Reader root;
  if (kj::runCatchingExceptions([&] { root = reader->getRoot<capnp::AnyPointer>(); }) != nullptr) return 0;
  absl::Status s = paseo::CheckReadable(root, type);
  if (s.ok()) {
    // A reader of its own, as the method's reading is bounded apart from the check's.
    capnp::FlatArrayMessageReader again(words, options);
    auto read = kj::runCatchingExceptions([&] {
      capnp::prettyPrint(again.getRoot<capnp::DynamicStruct>(type)).flatten();
    });
    Check(read == nullptr);
  } else {
    Check(s.code() == absl::StatusCode::kInvalidArgument);
    Check(absl::StartsWith(s.message(), "malformed request: "));
    Check(s.message().find("Message") == std::string::npos);
    Check(s.message().find("expected") == std::string::npos);
  }
  return 0;
}
