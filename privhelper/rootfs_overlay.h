// Each sandbox gets its rootfs as an overlay: the shared, versioned rootfs as the read-only
// lower layer and a per-sandbox upper layer in its bundle. Debian's runsc (20221219) creates
// missing mount points inside the root it is given, on the host, even for a read-only root:
// without the overlay a client's mount destination would add directories to the shared rootfs.
// The sandbox itself still sees its root read-only (root.readonly in config.json).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace paseo {

// Mounts the overlay at <bundle_dir>/rootfs (upper and work dirs beside it, all 0700) and
// returns that path. `lower` must be a normalized absolute path without ',', ':' or '\'.
absl::StatusOr<std::string> MountRootfsOverlay(const std::string& lower,
                                               const std::string& bundle_dir);

// Unmounts the overlay and removes rootfs/, upper/ and work/ (whatever runsc created in upper
// is removed without following symlinks or leaving the bundle's filesystem). Missing parts are
// fine, so it also cleans up after a half-done MountRootfsOverlay.
absl::Status RemoveRootfsOverlay(const std::string& bundle_dir);

}  // namespace paseo
