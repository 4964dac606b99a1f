// The shim's `spawner` mode (sandbox/spawner.cc): one long-lived process per sandbox that
// starts the sandbox's processes with its own fork/exec and relays their stdio over one framed
// channel to the privhelper (common/spawner_frames.h).
#pragma once

namespace paseo::shim {

// /.paseo/shim spawner: stdin and stdout are the first channel. It returns only when told to
// exit (kSpawnerToldToExit), having killed what it started: when a channel ends its processes
// run on, and a new channel may come through the attach socket (spawner_frames.h).
int RunSpawner();
inline constexpr int kSpawnerToldToExit = 3;

// /.paseo/shim attach: hands stdin and stdout (a new channel) to the sandbox's spawner. Exits 0
// once the spawner took them, 1 if it did not, 2 if no spawner listens.
int RunAttach();

}  // namespace paseo::shim
