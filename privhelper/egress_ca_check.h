// The privhelper's check of the CA certificate the egress proxy answers addSandbox with
// (decision 59), before it goes into a sandbox's trust: the proxy is unprivileged and may be
// compromised, and a CA without the name constraint would let it impersonate any host to that
// sandbox, not only the secrets' hosts.
//
//   RETURN_IF_ERROR(CheckEgressCa(pem, {"api.anthropic.com"}));
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace paseo {

// The most bytes the answer may take (one P-256 certificate is under 1 KiB).
inline constexpr size_t kMaxEgressCaBytes = 8192;

// OK only for exactly one PEM certificate, at most kMaxEgressCaBytes, that is a CA (critical
// basicConstraints CA:TRUE, pathlen 0) with a critical nameConstraints extension whose
// permitted subtrees are exactly DNS:<each of `hosts`> and that excludes nothing else it would
// need: no other permitted name of any kind.
absl::Status CheckEgressCa(const std::string& pem, const std::vector<std::string>& hosts);

}  // namespace paseo
