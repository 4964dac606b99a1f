// The one place where synchronous absl::Status errors become client-facing RPC exceptions, and
// back. Every exception description a client can see starts with a stable reason token
// ("invalid-argument: ...", see schema/api.capnp). Only RPC servers call Throw*; everything
// below them returns absl::Status / absl::StatusOr.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include <kj/exception.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace paseo {

// "invalid-argument", "permission-denied", "not-found", "already-exists",
// "failed-precondition", "unimplemented", "unavailable" or "internal".
absl::string_view ReasonToken(absl::StatusCode code);

// A kj::Exception (FAILED) whose description is "<reason>: <message>".
kj::Exception StatusToException(const absl::Status& status);

// Throws StatusToException(status). `status` must not be OK.
[[noreturn]] void ThrowStatus(const absl::Status& status);

// Throws StatusToException(status) if it is not OK.
void ThrowIfError(const absl::Status& status);

// The value of `result`, or throws its error as above.
template <typename T>
T ValueOrThrow(absl::StatusOr<T> result) {
  ThrowIfError(result.status());
  return std::move(result).value();
}

// Strips kj's "remote exception: " prefixes so a forwarded error keeps its reason token first.
std::string ClientFacingDescription(const kj::Exception& e);

// The status an exception from a peer (the privhelper, the broker) stands for: its reason
// token is matched against the known list above; anything else (a capnp internal error, a
// disconnect) becomes an internal error that keeps the description as its message.
absl::Status StatusFromException(const kj::Exception& e);

}  // namespace paseo
