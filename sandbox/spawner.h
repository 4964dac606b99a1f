// The shim's `spawner` mode (sandbox/spawner.cc): one long-lived process per sandbox that
// starts the sandbox's processes with its own fork/exec and relays their stdio over one framed
// channel to the privhelper (common/spawner_frames.h).
#pragma once

namespace paseo::shim {

// /.paseo/shim spawner: stdin and stdout are the channel. Returns when the privhelper closes it
// (0) or tells it to exit (kSpawnerToldToExit), having killed what it started.
int RunSpawner();
inline constexpr int kSpawnerToldToExit = 3;

}  // namespace paseo::shim
