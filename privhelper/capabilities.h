// The privhelper's capability budget. Start-up (config, socket, broker spawn, control netns)
// runs as full root; before serving its first request the privhelper keeps only the list
// below, in every set, and the bounding set bounds what the runsc it executes can have.
// testing/capability_test.cc proves each entry necessary: without it, the named operation fails.
#pragma once

#include <sys/types.h>

#include <sys/capability.h>

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace paseo {

struct KeptCapability {
  cap_value_t cap;
  const char* name;
  const char* needed_for;
};

// The serving-phase list.
const std::vector<KeptCapability>& ServingCapabilities();

// Keeps exactly `keep` in the permitted and effective sets and the bounding set; empties the
// inheritable and ambient sets. Must run while CAP_SETPCAP is still effective.
absl::Status KeepOnlyCapabilities(const std::vector<cap_value_t>& keep);

// In a child before exec (async-signal-safe work only): becomes `uid`/`gid` with no
// capabilities at all (bounding, ambient, permitted, effective), a fresh session keyring (the
// privhelper's keys stay its own), "/" as the working directory and no_new_privs. Returns an
// errno value, 0 on success. The broker and the egress proxy start this way.
int BecomeUnprivileged(uid_t uid, gid_t gid);

}  // namespace paseo
