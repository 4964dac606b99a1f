// Paseo's git project sources (`project.source.kind = "git"`): what the runtime checks of one
// before anything is created, and the commands that clone it inside the workspace's sandbox
// (docs/paseo.md, "Git sources"). Pure: no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/protocol.h"

namespace paseo::runtime {

// Where a git URL leads: the name the sandbox must resolve and the port it must reach.
struct GitRemote {
  std::string scheme;  // "https", "http" or "git"
  std::string host;    // lower case
  uint16_t port = 0;
};

// https://, http:// and git:// URLs with a host name (no user name or password: a private
// repository authenticates by a credential the deployment registered), an optional port and a
// path. Anything else (ssh, file, an address instead of a name) is invalid-argument.
absl::StatusOr<GitRemote> ParseGitUrl(const std::string& url);

// The revision, subdirectory and URL as they will be argv and paths: invalid-argument for a
// revision that is empty, starts with '-' or holds a control character or space, and for a
// subdirectory that is absolute, not normalized or leaves the repository ("..").
absl::Status CheckGitSource(const GitSource& source);

// The source as the sandbox's paseo.source label records it (idempotent creates compare it):
// "git:<url>#<revision>[:<subdirectory>]".
std::string GitSourceLabel(const GitSource& source);

// Whether a profile's allowNames (name, ports) let the sandbox reach `remote`: a name equal to
// the host, or "*.suffix" strictly below it (as the resolver matches), listing the port.
bool AllowsRemote(const std::vector<std::pair<std::string, std::vector<uint16_t>>>& allow_names,
                  const GitRemote& remote);

// The clone, run in the sandbox with its workspace (an empty directory) as cwd: into ".", so
// the workspace itself is the repository. No prompt for credentials (GIT_TERMINAL_PROMPT=0 in
// GitEnvironment); git's `store` helper reads a registered credential (~/.config/git/credentials,
// where the profile mounts it).
std::vector<std::string> GitCloneArgv(const GitSource& source);
// Then the revision, checked out (detached for a commit, a local branch for a branch name).
std::vector<std::string> GitCheckoutArgv(const GitSource& source);
std::vector<std::string> GitEnvironment();

}  // namespace paseo::runtime
