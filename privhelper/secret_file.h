// A registered secret's value, read by the privhelper at each create from the root-owned file
// the deployment registered (decision 59), and the placeholder the sandbox gets instead.
//
//   ASSIGN_OR_RETURN(std::string value, ReadSecretFile("/etc/paseo-sandbox/secrets/anthropic"));
//   std::string placeholder = NewPlaceholder("anthropic");
//
// The file is trusted only as root's: no symlink anywhere on its path, a regular file with one
// link, owned by root with no group or other permission, in a directory owned by root that no
// one else may write. So no other user can make the privhelper send another file's content (a
// hard link to /etc/shadow, a swapped directory) as a header to an API host.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace paseo {

// The most a secret's value may take.
inline constexpr size_t kMaxSecretBytes = 4096;

// The file's content without one trailing "\n" (or "\r\n"): one line of printable ASCII (0x20 to
// 0x7e), 1..kMaxSecretBytes bytes. FailedPrecondition naming the path and the problem, never a
// byte of the content. `owner` is root but for tests, which run as another user.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, uid_t owner = 0);

// "paseo-secret-<name>-" and 32 random hex digits (getrandom): unguessable, so a placeholder
// names one secret of one sandbox.
std::string NewPlaceholder(const std::string& name);

}  // namespace paseo
