// paseo-sandbox-shim: the supervisor's own code inside every sandbox, bind-mounted read-only
// at /.paseo/shim. Static, with no dependency beyond libc, so it runs in any rootfs.
//
//   /.paseo/shim init                           the sandbox's init
//   /.paseo/shim tty ROWS COLS PROGRAM [ARGS...] runs PROGRAM on a pseudo-terminal
//   /.paseo/shim exec [--unset=NAME]... -- PROGRAM [ARGS...]
//                                               runs PROGRAM without the NAMEd variables
//   /.paseo/shim spawner [--init]               starts the sandbox's processes for the
//                                               privhelper (sandbox/spawner.cc); with --init
//                                               it is also the sandbox's init
//   /.paseo/shim attach                         hands a new channel to the spawner (a
//                                               restarted privhelper's reattach)
//
// exec: runsc sets HOME (from the sandbox's /etc/passwd, else "/") for every process whose
// environment lacks it (measured on 20221219), so a client that asked for an exact
// environment (api.capnp ProcessSpec.exactEnv) without HOME would get one anyway. The
// privhelper runs such a process through `exec --unset=HOME`, which removes it and execs the
// program in place: same pid, same stdio, same exit status and signals.
//
// exec and tty look PROGRAM (without a '/') up in $PASEO_SHIM_SEARCH_PATH, the privhelper's
// search path (the sandbox's tool directories, then the process's PATH or the default:
// common/search_path.h), which need not be the PATH the program is given; without it, in the
// PATH the process was given (before anything is unset), or the default. With
// $PASEO_SHIM_REPORT_UNKEPT=1, exec runs PROGRAM as its child and then reports what it wrote
// that is not kept (sandbox/unkept.h). Both variables are removed before PROGRAM starts; they
// come through the environment so that an older shim ignores them (privhelper/bundle.h).
//
// init: idles and reaps. Every process a `runsc exec` started whose parent dies is
// reparented to the sandbox's init; an init that never waits (busybox `sleep`, measured)
// leaves each of them a zombie until the sandbox is deleted.
//
// tty: Debian's runsc (20221219) gives a process started with `runsc exec --console-socket`
// a pty that gVisor does not treat as its terminal, so the pty is made here, inside the
// sandbox, from gVisor's own devpts (docs/decisions.md). stdin carries frames from the
// broker (common/tty_frames.h): typed bytes, window sizes and end-of-input. Everything the
// terminal shows goes to stdout unchanged. The relay exits the way the program did (same
// code, or the same signal), so `runsc exec` reports the program's own status.
//
// gVisor's line discipline in that release does not turn VINTR/VQUIT/VSUSP into signals
// (measured: Ctrl-C is echoed as a raw 0x03 and reaches the program as a byte), so the relay
// does what Linux's n_tty does with ISIG set: it signals the terminal's foreground process
// group instead of passing the character on.
//
// To know that group the relay leads the terminal's session (gVisor, unlike Linux, answers
// TIOCGPGRP only to a process of the terminal's session, on the master not at all; measured)
// and the program runs as its own process group, made the foreground group before it is
// exec'd. A job-control shell then moves the foreground to its jobs and Ctrl-C reaches them.
// The relay reads no input until the program is exec'd, so a Ctrl-C typed before the program
// runs still reaches it, never nobody.
//
// Signals sent to the relay (the supervisor's signal() targets the process runsc started) go
// on to the program; SIGKILL cannot be passed on, so the program is made to die with the
// relay (PR_SET_PDEATHSIG).
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "common/search_path.h"
#include "common/tty_frames.h"
#include "sandbox/spawner.h"
#include "sandbox/unkept.h"

namespace {

using paseo::tty::FrameReader;
using paseo::tty::FrameType;

// Typed input the program has not taken yet, before the relay stops reading stdin (and the
// broker's flow control pushes back on the client). As on Linux, where a master write blocks
// once the line discipline's buffer is full, a Ctrl-C typed behind such a backlog waits too.
constexpr size_t kMaxPendingInput = 64 * 1024;

[[noreturn]] void Die(const char* what) {
  dprintf(STDERR_FILENO, "paseo-sandbox-shim: %s: %s\r\n", what, strerror(errno));
  _exit(126);
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p = {fd, POLLOUT, 0};
        poll(&p, 1, -1);
        continue;
      }
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

uint16_t ParseSize(const char* text, uint16_t fallback) {
  char* end = nullptr;
  long v = strtol(text, &end, 10);
  return (end != text && *end == '\0' && v >= 1 && v <= 65535) ? static_cast<uint16_t>(v)
                                                                : fallback;
}

class Relay {
 public:
  // `slave`: the relay's own descriptor of the terminal, its controlling terminal.
  Relay(int master, int slave, pid_t child) : master_(master), slave_(slave), child_(child) {}

  // Applies one frame from the broker.
  void Apply(const paseo::tty::Frame& frame) {
    switch (frame.type) {
      case FrameType::kData:
        Type(frame.payload);
        break;
      case FrameType::kWinsize:
        if (auto size = paseo::tty::DecodeWinsize(frame.payload)) Resize(size->first, size->second);
        break;
      case FrameType::kEof:
        EndOfInput();
        break;
    }
  }

  void EndOfInput() {
    if (eof_sent_) return;
    eof_sent_ = true;
    termios t;
    if (tcgetattr(slave_, &t) == 0 && t.c_cc[VEOF] != _POSIX_VDISABLE)
      pending_.push_back(static_cast<char>(t.c_cc[VEOF]));
  }

  // Writes what the terminal accepts of the typed input not yet taken.
  void FlushInput() {
    // runsc 20240729's line discipline turns a typed VINTR, VQUIT or VSUSP into a signal even
    // with ISIG off (measured: in `stty raw`, Ctrl-C sent SIGINT and the program never read the
    // byte). With ISIG off those characters mean nothing to the terminal, so they are disabled
    // for the write and restored after it: the same on Linux and on runsc 20221219, which do
    // not signal then anyway.
    termios saved;
    bool quiet = false;
    if (!pending_.empty() && tcgetattr(slave_, &saved) == 0 && !(saved.c_lflag & ISIG)) {
      termios t = saved;
      for (int cc : {VINTR, VQUIT, VSUSP}) {
        if (saved.c_cc[cc] != _POSIX_VDISABLE &&
            pending_.find(static_cast<char>(saved.c_cc[cc])) != std::string::npos) {
          t.c_cc[cc] = _POSIX_VDISABLE;
          quiet = true;
        }
      }
      if (quiet) quiet = tcsetattr(slave_, TCSANOW, &t) == 0;
    }
    WritePending();
    if (quiet) tcsetattr(slave_, TCSANOW, &saved);
  }

  void WritePending() {
    while (!pending_.empty()) {
      ssize_t n = write(master_, pending_.data(), pending_.size());
      if (n == 0) return;  // gVisor: a canonical line is still unread; retried on a timer
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN) pending_.clear();  // nobody will read it
        return;
      }
      pending_.erase(0, static_cast<size_t>(n));
    }
  }

  bool has_pending() const { return !pending_.empty(); }
  bool wants_input() const { return pending_.size() < kMaxPendingInput; }

 private:
  void Type(const std::string& bytes) {
    termios t;
    // The slave's termios, which the program sets: runsc 20240729's master does not follow a
    // `stty raw` made on the slave (measured: raw mode's Ctrl-C still became a SIGINT).
    bool isig = tcgetattr(slave_, &t) == 0 && (t.c_lflag & ISIG);
    for (char c : bytes) {
      int sig = 0;
      if (isig && c != static_cast<char>(_POSIX_VDISABLE)) {
        if (c == static_cast<char>(t.c_cc[VINTR])) sig = SIGINT;
        else if (c == static_cast<char>(t.c_cc[VQUIT])) sig = SIGQUIT;
        // The relay has no job control: stopping the program's own group would leave nobody
        // to continue it (a job-control shell's jobs are its business, so those are stopped).
        else if (c == static_cast<char>(t.c_cc[VSUSP]) && Foreground() != child_) sig = SIGTSTP;
      }
      if (sig == 0) {
        pending_.push_back(c);
        continue;
      }
      if (!(t.c_lflag & NOFLSH)) pending_.clear();
      if (t.c_lflag & ECHO) {
        char echo[2] = {'^', static_cast<char>(c ^ 0x40)};
        if (t.c_lflag & ECHOCTL) WriteAll(STDOUT_FILENO, echo, 2);
        else WriteAll(STDOUT_FILENO, &c, 1);
      }
      SignalForeground(sig);
    }
  }

  void Resize(uint16_t rows, uint16_t cols) {
    winsize ws = {};
    ws.ws_row = rows;
    ws.ws_col = cols;
    if (ioctl(master_, TIOCSWINSZ, &ws) == 0) SignalForeground(SIGWINCH);
  }

  pid_t Foreground() const {
    pid_t group = tcgetpgrp(slave_);
    return group > 0 ? group : child_;  // the program leads its own group
  }

  void SignalForeground(int sig) { kill(-Foreground(), sig); }

  int master_;
  int slave_;
  pid_t child_;
  std::string pending_;  // typed bytes the program has not read yet
  bool eof_sent_ = false;
};

// Ends this process the way `status` says the program ended.
[[noreturn]] void ExitLike(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, nullptr);
    raise(sig);
    _exit(128 + sig);  // a signal that does not terminate
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 126);
}

// Signals the relay passes on to the program rather than acting on: everything a sender can
// mean for the program, but not the ones the relay needs (SIGCHLD), cannot catch (SIGKILL,
// SIGSTOP) or that only a fault of its own would raise.
sigset_t ForwardedSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig = 1; sig <= SIGRTMAX; ++sig) {
    switch (sig) {
      case SIGKILL: case SIGSTOP: case SIGCHLD: case SIGSEGV: case SIGBUS: case SIGILL:
      case SIGFPE: case SIGTRAP: case SIGSYS:
        continue;
      default:
        sigaddset(&set, sig);  // fails harmlessly for the C library's reserved signals
    }
  }
  return set;
}

// execv of `file` looked up as execvp would, in `path` (a PATH value) instead of the
// environment's; returns the errno of the most telling failure (EACCES over ENOENT).
int ExecInPath(char** argv, const char* path) {
  const char* file = argv[0];
  if (strchr(file, '/') != nullptr) {
    execv(file, argv);
    return errno;
  }
  int err = ENOENT;
  char candidate[4096];
  for (const char* dir = path;; ++dir) {
    const char* end = strchrnul(dir, ':');
    size_t len = static_cast<size_t>(end - dir);
    // An empty entry is the working directory, as for execvp.
    int n = len == 0 ? snprintf(candidate, sizeof(candidate), "%s", file)
                     : snprintf(candidate, sizeof(candidate), "%.*s/%s", static_cast<int>(len),
                                dir, file);
    if (n > 0 && static_cast<size_t>(n) < sizeof(candidate)) {
      execv(candidate, argv);
      if (errno == EACCES) err = EACCES;
      else if (errno != ENOENT && errno != ENOTDIR) return errno;
    }
    if (*end == '\0') return err;
    dir = end;
  }
}

// Where a program is looked up when the privhelper named no search path (an older privhelper):
// the PATH the process was given, else the default the privhelper itself uses.
const char* GivenSearchPath() {
  const char* given = getenv("PATH");
  return given != nullptr ? given : paseo::kDefaultSearchPath;
}

// What the privhelper tells the shim through the environment (privhelper/bundle.h ShimEnv),
// taken out of it before anything runs: the program gets the environment it was given.
struct ShimSettings {
  std::string search_path;  // empty: GivenSearchPath()
  bool report_unkept = false;
};
// The privhelper appends both, after the client's own entries (clients may not send these
// names: common/request_checks.h): the last entry of each name is the privhelper's, and only
// that one is taken out. `take` false: read only (the program this process execs is the shim
// again, which takes them).
ShimSettings TakeShimSettings(bool take = true) {
  ShimSettings out;
  int search = -1, report = -1;
  int n = 0;
  for (; environ[n] != nullptr; ++n) {
    if (strncmp(environ[n], "PASEO_SHIM_SEARCH_PATH=", 23) == 0) search = n;
    if (strncmp(environ[n], "PASEO_SHIM_REPORT_UNKEPT=", 25) == 0) report = n;
  }
  if (search >= 0) out.search_path = environ[search] + 23;
  if (report >= 0) out.report_unkept = strcmp(environ[report] + 25, "1") == 0;
  if (take) {
    // Removed in place, later index first (environ is this process's own array).
    for (int drop : {std::max(search, report), std::min(search, report)}) {
      if (drop < 0) continue;
      for (int i = drop; i < n; ++i) environ[i] = environ[i + 1];
      --n;
    }
  }
  return out;
}

// Runs in the forked child: becomes its own process group, the terminal's foreground group,
// then the program. Every signal the relay handles is still blocked here, SIGTTOU included,
// which is what lets a background group take the foreground.
[[noreturn]] void RunChild(int slave, char** argv, const char* search_path,
                           const sigset_t& old_mask, pid_t relay) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != relay) _exit(126);
  if (setpgid(0, 0) != 0) Die("setpgid");
  if (tcsetpgrp(slave, getpid()) != 0) Die("make the program the terminal's foreground");
  for (int fd = 0; fd < 3; ++fd) {
    if (dup2(slave, fd) < 0) Die("dup2");
  }
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  signal(SIGPIPE, SIG_DFL);
  int err = ExecInPath(argv, search_path);
  dprintf(STDERR_FILENO, "paseo-sandbox-shim: cannot run %s: %s\r\n", argv[0], strerror(err));
  _exit(err == ENOENT ? 127 : 126);
}

// init: reap whatever is reparented to us, forever. Signals without a handler do not reach
// a pid namespace's init, so only SIGKILL (the supervisor deleting the sandbox) ends it.
[[noreturn]] void RunInit() {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  for (;;) {
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    int sig = 0;
    sigwait(&chld, &sig);
  }
}

int RunTty(int argc, char** argv) {
  if (argc < 4) {
    dprintf(STDERR_FILENO, "usage: paseo-sandbox-shim tty ROWS COLS PROGRAM [ARGS...]\n");
    return 126;
  }
  // A shim again (`shim exec` under the terminal): it takes the settings itself.
  ShimSettings settings = TakeShimSettings(strcmp(argv[3], "/.paseo/shim") != 0);
  std::string search = settings.search_path.empty() ? GivenSearchPath() : settings.search_path;
  const char* search_path = search.c_str();
  winsize ws = {};
  ws.ws_row = ParseSize(argv[1], 24);
  ws.ws_col = ParseSize(argv[2], 80);

  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) Die("open /dev/ptmx");
  if (grantpt(master) != 0 || unlockpt(master) != 0) Die("unlock the terminal");
  char slave_name[128];
  if (ptsname_r(master, slave_name, sizeof(slave_name)) != 0) Die("ptsname");
  if (ioctl(master, TIOCSWINSZ, &ws) != 0) Die("set the window size");
  // The relay leads the terminal's session (runsc starts every process in a session of its
  // own). Opening the slave makes it the controlling terminal; TIOCSCTTY is for kernels that
  // want it asked explicitly (gVisor answers EINVAL when it is already).
  if (getsid(0) != getpid() && setsid() < 0) Die("setsid");
  int slave = open(slave_name, O_RDWR | O_CLOEXEC);
  if (slave < 0) Die("open the terminal");
  (void)ioctl(slave, TIOCSCTTY, 0);
  if (tcgetpgrp(slave) != getpgrp()) Die("make the terminal the controlling terminal");

  sigset_t handled = ForwardedSignals(), old_mask;
  sigaddset(&handled, SIGCHLD);
  sigprocmask(SIG_BLOCK, &handled, &old_mask);
  int sfd = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) Die("signalfd");

  // Closed by the child's exec, after it made itself the terminal's foreground group: until
  // then no input is read, so a Ctrl-C typed early signals the program, not the relay.
  int started[2];
  if (pipe2(started, O_CLOEXEC) != 0) Die("pipe");
  pid_t self = getpid();
  pid_t child = fork();
  if (child < 0) Die("fork");
  if (child == 0) {
    close(started[0]);
    RunChild(slave, argv + 3, search_path, old_mask, self);
  }
  close(started[1]);
  char ignored;
  while (read(started[0], &ignored, 1) < 0 && errno == EINTR) {
  }
  close(started[0]);

  signal(SIGPIPE, SIG_IGN);
  fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
  Relay relay(master, slave, child);
  FrameReader frames;
  bool input_open = true;
  bool hung_up = false;  // the terminal hung up while the program runs: stop polling
  int status = 0;
  char buf[65536];
  for (;;) {
    pollfd fds[3] = {
        {hung_up ? -1 : master, POLLIN, 0},
        {input_open && relay.wants_input() ? STDIN_FILENO : -1, POLLIN, 0},
        {sfd, POLLIN, 0},
    };
    // gVisor does not wake a master writer when the program reads its terminal: while typed
    // input waits, retry every few milliseconds instead of polling for POLLOUT.
    if (poll(fds, 3, relay.has_pending() ? 10 : -1) < 0) {
      if (errno == EINTR) continue;
      Die("poll");
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t n = read(master, buf, sizeof(buf));
      if (n > 0) WriteAll(STDOUT_FILENO, buf, static_cast<size_t>(n));
      else if (n == 0 || (errno != EAGAIN && errno != EINTR)) hung_up = true;
    }
    if (relay.has_pending()) relay.FlushInput();
    if (fds[1].revents) {
      ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
      if (n > 0) {
        frames.Feed(std::string_view(buf, static_cast<size_t>(n)));
        while (auto frame = frames.Next()) relay.Apply(*frame);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        input_open = false;  // nobody can send more: as if the client closed its input
        relay.EndOfInput();
      }
      relay.FlushInput();
    }
    if (fds[2].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(sfd, &info, sizeof(info)) == sizeof(info)) {
        if (info.ssi_signo != SIGCHLD) kill(child, static_cast<int>(info.ssi_signo));
      }
      bool ended = false;
      while (!ended && waitpid(child, &status, WNOHANG | WUNTRACED) == child) {
        ended = !WIFSTOPPED(status);
        // The program suspended its own group (vim's and less's Ctrl-Z do): the relay has no
        // job control to return to, so it continues it, as if the stop had been discarded
        // (what Linux does for the orphaned group of a program that leads its session).
        if (!ended && WSTOPSIG(status) == SIGTSTP && kill(-child, SIGCONT) != 0)
          kill(child, SIGCONT);
      }
      if (ended) break;
    }
  }
  // What the program wrote before it ended is still in the terminal: pass it on.
  for (;;) {
    ssize_t n = read(master, buf, sizeof(buf));
    if (n <= 0) break;
    WriteAll(STDOUT_FILENO, buf, static_cast<size_t>(n));
  }
  ExitLike(status);
}

// exec with $PASEO_SHIM_REPORT_UNKEPT=1: the program runs as this process's child (every signal this process
// can catch is passed on; it dies with us), and once it has ended the report of what it wrote
// outside the kept directories goes to stderr (sandbox/unkept.h); then this process ends the
// way the program did.
[[noreturn]] void RunReportingUnkept(char** program, const char* path) {
  timespec since;
  clock_gettime(CLOCK_REALTIME, &since);
  sigset_t handled = ForwardedSignals(), old_mask;
  sigaddset(&handled, SIGCHLD);
  sigprocmask(SIG_BLOCK, &handled, &old_mask);
  bool in_foreground = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
  pid_t self = getpid();
  pid_t child = fork();
  if (child < 0) Die("fork");
  if (child == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != self) _exit(126);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    int err = ExecInPath(program, path);
    dprintf(STDERR_FILENO, "paseo-sandbox-shim: cannot run %s: %s\n", program[0], strerror(err));
    _exit(err == ENOENT ? 127 : 126);
  }
  int status = 0;
  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(&handled, &info);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      // On a terminal the program is in our process group, the foreground one: what the
      // terminal (or its relay) signals reaches it already. Passing it on would double it.
      if (!in_foreground) kill(child, sig);
      continue;
    }
    pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) break;
  }
  std::string report = paseo::shim::FormatUnkept(paseo::shim::FindUnkept(since));
  if (!report.empty()) WriteAll(STDERR_FILENO, report.data(), report.size());
  ExitLike(status);
}

int RunExec(int argc, char** argv) {
  int i = 1;
  while (i < argc && strncmp(argv[i], "--unset=", 8) == 0) ++i;
  if (i + 1 >= argc || strcmp(argv[i], "--") != 0) {
    dprintf(STDERR_FILENO,
            "usage: paseo-sandbox-shim exec [--unset=NAME]... -- PROGRAM [ARGS...]\n");
    return 126;
  }
  ShimSettings settings = TakeShimSettings();
  // The lookup uses the search path, or the PATH the process was given before it is unset.
  std::string path = settings.search_path.empty() ? GivenSearchPath() : settings.search_path;
  for (int u = 1; u < i; ++u) unsetenv(argv[u] + 8);
  char** program = argv + i + 1;
  if (settings.report_unkept) RunReportingUnkept(program, path.c_str());
  int err = ExecInPath(program, path.c_str());
  dprintf(STDERR_FILENO, "paseo-sandbox-shim: cannot run %s: %s\n", program[0], strerror(err));
  return err == ENOENT ? 127 : 126;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "init") == 0) RunInit();
  if (argc >= 2 && strcmp(argv[1], "tty") == 0) return RunTty(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "exec") == 0) return RunExec(argc - 1, argv + 1);
  if (argc == 2 && strcmp(argv[1], "spawner") == 0) return paseo::shim::RunSpawner();
  if (argc == 3 && strcmp(argv[1], "spawner") == 0 && strcmp(argv[2], "--init") == 0) {
    // The sandbox's init: it ends the sandbox only when told to (kExitSpawner); when its
    // channel just ends (the privhelper restarted) it keeps its processes for the next one.
    if (paseo::shim::RunSpawner() == paseo::shim::kSpawnerToldToExit) return 0;
    RunInit();  // it could not run at all (no signalfd): a plain init
  }
  if (argc == 2 && strcmp(argv[1], "attach") == 0) return paseo::shim::RunAttach();
  dprintf(STDERR_FILENO,
          "usage: paseo-sandbox-shim init | tty ROWS COLS PROGRAM [ARGS...] | "
          "exec [--unset=NAME]... -- PROGRAM [ARGS...] | spawner [--init] | attach\n");
  return 126;
}
