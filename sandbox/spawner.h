// The shim's `spawner` mode (sandbox/spawner.cc): one long-lived process per sandbox that
// starts the sandbox's processes with its own fork/exec and relays their stdio over one framed
// channel to the privhelper (common/spawner_frames.h).
#pragma once

namespace paseo::shim {

// /.paseo/shim spawner: stdin and stdout are the channel. Returns when the privhelper closes it.
int RunSpawner();

// execv of argv[0] looked up as execvp would, but in `path` (a PATH value); returns the errno of
// the most telling failure (EACCES over ENOENT). Defined in shim.cc.
int ExecInPath(char** argv, const char* path);

}  // namespace paseo::shim
