// Checking the pinned runsc (helper.json "runsc": path + sha256): the privhelper opens and
// hashes it before it serves, and `paseo-sandbox-admin doctor` runs the very same check so the
// two can never disagree about what "pinned" means.
//   absl::StatusOr<int> fd = OpenPinnedRunsc(config.helper().getRunsc());  // execveat on *fd
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "schema/config.capnp.h"

namespace paseo {

// Lower-case hex sha256 of everything readable from `fd` (read with pread from offset 0).
// `what` names the file in the error.
absl::StatusOr<std::string> Sha256OfFd(int fd, const std::string& what);

// Opens an executable the privhelper will run, refusing one that anyone but root could have
// replaced: it must be a root-owned regular file, not writable by group or others.
absl::StatusOr<int> OpenRootOwnedExecutable(const std::string& path);

// Opens the pinned runsc and checks its digest (FailedPrecondition on a mismatch, naming both
// digests). The returned fd is what every runsc call executes (execveat), so replacing the
// file on disk later changes nothing.
absl::StatusOr<int> OpenPinnedRunsc(const config::RunscPin::Reader& pin);

}  // namespace paseo
