// See process_exit.h.
#include "common/process_exit.h"

namespace paseo {

void ToCapnp(const ProcessExit& exit, api::ExitStatus::Builder out) {
  switch (exit.kind) {
    case ProcessExit::kRunning:
      out.setRunning();
      break;
    case ProcessExit::kExited:
      out.setExitCode(exit.value);
      break;
    case ProcessExit::kSignaled:
      out.setSignal(exit.value);
      break;
    case ProcessExit::kOomKilled:
      out.setOomKilled();
      break;
    case ProcessExit::kUnknown:
      out.setUnknown();
      break;
  }
}

ProcessExit FromCapnp(api::ExitStatus::Reader in) {
  switch (in.which()) {
    case api::ExitStatus::RUNNING:
      return {};
    case api::ExitStatus::EXIT_CODE:
      return ProcessExit::Exited(in.getExitCode());
    case api::ExitStatus::SIGNAL:
      return ProcessExit::Signaled(in.getSignal());
    case api::ExitStatus::OOM_KILLED:
      return ProcessExit::OomKilled();
    default:
      return ProcessExit::Unknown();
  }
}

}  // namespace paseo
