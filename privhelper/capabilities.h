// The privhelper's capability budget. Start-up (config, socket, broker spawn, control netns)
// runs as full root; before serving its first request the privhelper keeps only the list
// below, in every set, and the bounding set bounds what the runsc it executes can have.
// testing/capability_test.cc proves each entry necessary: without it, the named operation fails.
#pragma once

#include <sys/capability.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace paseo {

struct KeptCapability {
  cap_value_t cap;
  const char* name;
  const char* needed_for;
  // Which runsc needs it: every one, or only one whose gofer runs in the host's user namespace
  // (20221219) or in one of its own (20240729). privhelper/runsc_probe.h tells which at start.
  enum class When { kAlways, kGoferInHostUserns, kGoferInOwnUserns } when = When::kAlways;
};

// The serving-phase list for a runsc whose gofer runs in a user namespace of its own
// (`gofer_userns`, runsc_probe.h) or in the host's.
std::vector<KeptCapability> ServingCapabilities(bool gofer_userns);

// Keeps exactly `keep` in the permitted and effective sets and the bounding set; empties the
// inheritable and ambient sets. Must run while CAP_SETPCAP is still effective.
absl::Status KeepOnlyCapabilities(const std::vector<cap_value_t>& keep);

}  // namespace paseo
