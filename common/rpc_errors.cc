// See rpc_errors.h.
#include "common/rpc_errors.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace paseo {
namespace {

// Each token and the code it maps back to (the first code of each token in ReasonToken).
constexpr std::pair<absl::string_view, absl::StatusCode> kReasons[] = {
    {"invalid-argument", absl::StatusCode::kInvalidArgument},
    {"permission-denied", absl::StatusCode::kPermissionDenied},
    {"not-found", absl::StatusCode::kNotFound},
    {"already-exists", absl::StatusCode::kAlreadyExists},
    {"failed-precondition", absl::StatusCode::kFailedPrecondition},
    {"unimplemented", absl::StatusCode::kUnimplemented},
    {"unavailable", absl::StatusCode::kUnavailable},
    {"internal", absl::StatusCode::kInternal},
};

}  // namespace

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

void ThrowStatus(const absl::Status& status) {
  kj::throwFatalException(StatusToException(status));
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

std::string ClientFacingDescription(const kj::Exception& e) {
  absl::string_view d = e.getDescription().cStr();
  constexpr absl::string_view kRemote = "remote exception: ";
  while (d.substr(0, kRemote.size()) == kRemote) d.remove_prefix(kRemote.size());
  return std::string(d);
}

absl::Status StatusFromException(const kj::Exception& e) {
  std::string d = ClientFacingDescription(e);
  for (const auto& [token, code] : kReasons) {
    if (d.size() > token.size() + 1 && absl::string_view(d).substr(0, token.size()) == token &&
        d.compare(token.size(), 2, ": ") == 0) {
      return absl::Status(code, d.substr(token.size() + 2));
    }
  }
  return absl::InternalError(d);
}

}  // namespace paseo
