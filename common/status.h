// Status conventions for synchronous system code: absl::Status with the failing syscall and
// path in the message, plus the two small propagation macros Debian's Abseil does not ship.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace paseo {

// An error for a failed syscall: "<op> <subject>: <strerror(err)>".
inline absl::Status ErrnoStatus(absl::string_view op, absl::string_view subject, int err = errno) {
  std::string msg = absl::StrCat(op, subject.empty() ? "" : " ", subject, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EINVAL:
    case ELOOP:
    case ENOTDIR:
    case EXDEV:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace paseo

#define PASEO_CONCAT_INNER(a, b) a##b
#define PASEO_CONCAT(a, b) PASEO_CONCAT_INNER(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                   \
  do {                                          \
    ::absl::Status _paseo_status = (expr);      \
    if (!_paseo_status.ok()) return _paseo_status; \
  } while (0)

// `lhs = value of expr` (an absl::StatusOr<T>), or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(PASEO_CONCAT(_paseo_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
