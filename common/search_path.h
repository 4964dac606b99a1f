// Where a sandboxed process's program is looked up (docs/paseo.md, "Finding commands"): apart
// from its environment, so a client that asks for an exact environment gets exactly that and
// still finds the sandbox's tools. Only the C++ standard library: the shim links this statically.
#pragma once

#include <string>
#include <vector>

namespace paseo {

// The fixed PATH a process without one is looked up in (and given, unless its environment is
// exact): Debian's default for a login shell's root, which every rootfs we build follows.
inline constexpr char kDefaultSearchPath[] =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// The search path for a process: the sandbox's tool directories first, then the PATH its `env`
// ("KEY=VALUE" entries) sets (the first, as a shell would read it), else kDefaultSearchPath.
// A PATH that is set but empty stays empty (execvp reads it as the working directory).
std::string SearchPath(const std::vector<std::string>& tool_dirs,
                       const std::vector<std::string>& env);

}  // namespace paseo
