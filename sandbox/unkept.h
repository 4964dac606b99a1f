// The advisory "not kept" report (docs/running.md, "What is kept"): which paths a command
// created or changed in the sandbox's writable filesystems outside its kept directories
// (/.paseo/kept), so an agent learns as it works that those writes go with the sandbox. Never a
// boundary: it only reads, bounded in paths, entries and time. Runs inside the sandbox, from
// `shim exec --report-unkept`, after the command ended.
#pragma once

#include <time.h>

#include <string>
#include <vector>

namespace paseo::shim {

struct UnkeptReport {
  std::vector<std::string> kept;   // what /.paseo/kept lists
  std::vector<std::string> paths;  // outermost changed paths, at most kMaxUnkeptPaths
  bool truncated = false;          // stopped at a bound: there may be more
};

inline constexpr size_t kMaxUnkeptPaths = 32;
inline constexpr size_t kMaxUnkeptEntries = 100000;
inline constexpr long kMaxUnkeptMillis = 1000;

// Paths whose status changed at or after `since` (CLOCK_REALTIME), on writable mounts
// (/proc/self/mountinfo) other than the kept ones and the kernel's (proc, sysfs, devpts, ...),
// never inside a kept path; a changed directory stands for everything beneath it.
UnkeptReport FindUnkept(const timespec& since);

// The report as the lines written to the command's stderr; empty when nothing was found.
std::string FormatUnkept(const UnkeptReport& report);

}  // namespace paseo::shim
