// See rpc_errors.h.
#include "absl/strings/string_view.h"
#include "common/rpc_errors.h"

#include "absl/strings/str_cat.h"

namespace paseo {

absl::string_view ReasonToken(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return "invalid-argument";
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return "permission-denied";
    case absl::StatusCode::kNotFound:
      return "not-found";
    case absl::StatusCode::kAlreadyExists:
      return "already-exists";
    case absl::StatusCode::kFailedPrecondition:
      return "failed-precondition";
    case absl::StatusCode::kUnimplemented:
      return "unimplemented";
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kResourceExhausted:
      return "unavailable";
    default:
      return "internal";
  }
}

kj::Exception StatusToException(const absl::Status& status) {
  std::string text = absl::StrCat(ReasonToken(status.code()), ": ", status.message());
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::heapString(text.data(), text.size()));
}

std::string ClientFacingDescription(const kj::Exception& e) {
  absl::string_view d = e.getDescription().cStr();
  constexpr absl::string_view kRemote = "remote exception: ";
  while (d.substr(0, kRemote.size()) == kRemote) d.remove_prefix(kRemote.size());
  return std::string(d);
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) kj::throwFatalException(StatusToException(status));
}

}  // namespace paseo
