// How a process ended: the one type the broker and the privhelper share, with the one pair of
// converters to and from the wire form (api.capnp ExitStatus).
#pragma once

#include "schema/api.capnp.h"

namespace paseo {

struct ProcessExit {
  enum Kind { kRunning, kExited, kSignaled, kOomKilled, kUnknown } kind = kRunning;
  int value = 0;  // exit code (kExited) or signal number (kSignaled)

  static ProcessExit Exited(int code) { return {kExited, code}; }
  static ProcessExit Signaled(int sig) { return {kSignaled, sig}; }
  static ProcessExit OomKilled() { return {kOomKilled, 0}; }
  static ProcessExit Unknown() { return {kUnknown, 0}; }

  bool ended() const { return kind != kRunning; }
  bool operator==(const ProcessExit&) const = default;
};

// Why a sandbox is `oom-killed` (SandboxInfo.stateReason): every process in it ends kOomKilled.
inline constexpr char kOomKilledSandboxReason[] =
    "it exceeded its memory limit and the host's OOM killer stopped it";

void ToCapnp(const ProcessExit& exit, api::ExitStatus::Builder out);
ProcessExit FromCapnp(api::ExitStatus::Reader in);

}  // namespace paseo
