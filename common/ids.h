// Opaque, unguessable identifiers for sandboxes and processes, and the check applied wherever
// an identifier becomes a path component or a runsc container id.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

namespace paseo {

// A new random id: `prefix` followed by 24 lowercase hex digits (96 bits from getrandom).
std::string NewId(absl::string_view prefix);

// True for 1..64 bytes of [a-z0-9-] not starting with '-'. Such a string is safe as a single
// path component and as a runsc container id ('.', '/', NUL and '..' are impossible).
bool IsValidId(absl::string_view id);

}  // namespace paseo
