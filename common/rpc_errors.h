// The one place where synchronous absl::Status errors become client-facing RPC exceptions.
// Every exception description a client can see starts with a stable reason token
// ("invalid-argument: ...", see schema/api.capnp); this maps codes to those tokens and back.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include <kj/exception.h>

#include "absl/status/status.h"

namespace paseo {

// "invalid-argument", "permission-denied", "not-found", "already-exists",
// "failed-precondition", "unavailable" or "internal".
absl::string_view ReasonToken(absl::StatusCode code);

// A kj::Exception (FAILED) whose description is "<reason>: <message>".
kj::Exception StatusToException(const absl::Status& status);

// Strips kj's "remote exception: " prefixes so a forwarded error keeps its reason token first.
std::string ClientFacingDescription(const kj::Exception& e);

// [[noreturn]] helper: throws StatusToException(status) if it is not OK.
void ThrowIfError(const absl::Status& status);

}  // namespace paseo
