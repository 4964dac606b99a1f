// Reading a whole Cap'n Proto message before anything acts on it. capnp checks a message lazily:
// a pointer out of bounds, a pointer of the wrong kind, text without its NUL or a message
// nested too deeply is found only when an accessor reaches it, and then as a KJ_REQUIRE failure
// whose text ("expected boundsCheck(segment, ...)") is capnp's, not ours. CheckReadable walks
// every field a typed reader could reach, as that type (api.capnp's method parameters), so a
// message that fails anywhere fails here, once, with a stable reason of ours naming where.
#pragma once

#include <capnp/any.h>
#include <capnp/schema.h>
#include <kj/exception.h>

#include <optional>

#include "absl/status/status.h"

namespace paseo {

// OK if every field of `message`, read as `type`, can be read; else invalid-argument
// "malformed request: <what> at <field path>" (e.g. "spec.argv[2]"). `what` is one of a fixed
// set (kMalformedWhat); capnp's own words never reach the status. Bounded as reading is: by the
// message's traversal and nesting limits.
absl::Status CheckReadable(capnp::AnyPointer::Reader message, capnp::StructSchema type);

// The status a method's exception stands for if capnp threw it while reading the request (a
// message whose reading the check's own could not foresee, e.g. one that reaches its
// traversal limit only on a second reading): invalid-argument "malformed request: <what>";
// nullopt for any other exception.
std::optional<absl::Status> MalformedRequest(const kj::Exception& e);

// The words a malformed-request reason may use for what failed, in the order matched.
inline constexpr const char* kMalformedWhat[] = {
    "a pointer out of bounds",
    "a pointer of the wrong kind",
    "text without its terminating NUL",
    "nesting too deep",
    "more data than the message may hold",
    "an unreadable value",
};

}  // namespace paseo
