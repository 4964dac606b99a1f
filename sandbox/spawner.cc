// See spawner.h. Single-threaded: one poll loop over the channel, a signalfd for SIGCHLD and
// every child's pipes.
//
// A child is set up as `runsc exec` sets up a process, from what the spawner itself got from
// its own `runsc exec` (same uid, gids, no capabilities, no_new_privs, rlimits, umask): a
// session of its own, an empty signal mask and default dispositions, exactly the environment
// and cwd it was sent, and argv[0] looked up in the search path it was sent (the tool
// directories, then the environment's PATH or a default), not in the environment itself. It dies
// with the spawner (PR_SET_PDEATHSIG): a process nobody relays for must not run on unseen.
//
// Output is read only against credit (spawner_frames.h), so a child whose reader is slow
// blocks on its own full pipe and nobody else. A child's exit is reported after what it wrote
// before exiting has been read (both pipes at end-of-file, or empty after the exit); output a
// descendant writes later still follows.
#include "sandbox/spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "common/spawner_frames.h"

namespace paseo::shim {
namespace {

using spawner::Type;

struct Child {
  pid_t pid = 0;
  int in = -1;  // write end of its stdin
  int out = -1, err = -1;  // read ends of its stdout and stderr (-1: at end-of-file or merged)
  uint32_t out_credit = spawner::kInitialOutputWindow;
  uint32_t err_credit = spawner::kInitialOutputWindow;
  std::string pending_in;  // input it has not taken yet
  bool close_in = false;   // close its stdin once pending_in is written
  bool exited = false;
  bool exit_sent = false;
  int status = 0;
};

bool g_channel_broken = false;

void WriteChannel(const std::string& frame) {
  if (g_channel_broken) return;
  size_t done = 0;
  while (done < frame.size()) {
    ssize_t n = write(STDOUT_FILENO, frame.data() + done, frame.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // The privhelper is gone (or dropped the channel): the loop ends at its next turn, and
      // the children go. Not _exit: as the sandbox's init, that would end the sandbox.
      g_channel_broken = true;
      return;
    }
    done += static_cast<size_t>(n);
  }
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// What a starting child needs, prepared by the spawner before the clone: the child shares the
// spawner's memory until it execs (CLONE_VM | CLONE_VFORK: no address space is copied, which
// under gVisor's ptrace platform saves a stub process per start), so it allocates nothing.
struct ChildStart {
  const char* cwd;
  char** argv;
  char** envp;
  std::vector<std::string> candidates;  // where argv[0] is looked up, in order
  int in, out, err;
  pid_t spawner;
  // Written by the child when it cannot run the program (read once the clone returns).
  int error = 0;
  uint8_t stage = 0;  // 1 chdir, 2 exec
};

// The paths execvp would try for `file` in `path` (a PATH value); an empty entry is the cwd.
std::vector<std::string> Candidates(const std::string& file, const char* path) {
  if (file.find('/') != std::string::npos) return {file};
  std::vector<std::string> out;
  for (const char* dir = path;; ++dir) {
    const char* end = strchrnul(dir, ':');
    std::string d(dir, static_cast<size_t>(end - dir));
    out.push_back(d.empty() ? file : d + "/" + file);
    if (*end == '\0') return out;
    dir = end;
  }
}

// The child, on its own small stack: only system calls until the exec.
int RunChild(void* arg) {
  auto* c = static_cast<ChildStart*>(arg);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);  // the handler table is the child's own (no CLONE_SIGHAND)
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != c->spawner) _exit(127);
  setsid();
  if (dup2(c->in, 0) < 0 || dup2(c->out, 1) < 0 || dup2(c->err, 2) < 0) {
    c->error = errno;
    _exit(127);
  }
  if (chdir(c->cwd) != 0) {
    c->error = errno;
    c->stage = 1;
    _exit(127);
  }
  int err = ENOENT;
  for (const auto& candidate : c->candidates) {
    execve(candidate.c_str(), c->argv, c->envp);
    if (errno == EACCES) err = EACCES;
    else if (errno != ENOENT && errno != ENOTDIR) {
      err = errno;
      break;
    }
  }
  c->error = err;
  c->stage = 2;
  _exit(127);
}

class Spawner {
 public:
  Spawner() : self_(getpid()) {}

  int Run() {
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, nullptr);
    sfd_ = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd_ < 0) return 126;
    WriteChannel(spawner::EncodeU32(Type::kHello, 0, spawner::kVersion));
    std::vector<pollfd> fds;
    std::vector<std::pair<uint32_t, int>> owners;  // (child id, which: 0 in, 1 out, 2 err)
    char buf[64 * 1024];
    for (;;) {
      if (g_channel_broken) return Shutdown();
      fds.assign({{STDIN_FILENO, POLLIN, 0}, {sfd_, POLLIN, 0}});
      owners.clear();
      for (auto& [id, c] : children_) {
        if (c.in >= 0 && !c.pending_in.empty()) Watch(fds, owners, id, 0, c.in, POLLOUT);
        if (c.out >= 0 && c.out_credit > 0) Watch(fds, owners, id, 1, c.out, POLLIN);
        if (c.err >= 0 && c.err_credit > 0) Watch(fds, owners, id, 2, c.err, POLLIN);
      }
      if (poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        return 126;
      }
      if (fds[0].revents) {
        ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return Shutdown();
        if (n > 0 && !Receive(std::string_view(buf, static_cast<size_t>(n)))) return Shutdown();
        if (told_to_exit_) return Shutdown(kSpawnerToldToExit);
      }
      if (fds[1].revents) Reap();
      for (size_t i = 0; i < owners.size(); ++i) {
        if (fds[i + 2].revents == 0) continue;
        auto it = children_.find(owners[i].first);
        if (it == children_.end()) continue;
        if (owners[i].second == 0) FeedInput(owners[i].first, it->second);
        else RelaySome(owners[i].first, it->second, owners[i].second == 1 ? spawner::kStdout : spawner::kStderr);
      }
      Settle();
    }
  }

 private:
  static void Watch(std::vector<pollfd>& fds, std::vector<std::pair<uint32_t, int>>& owners,
                    uint32_t id, int which, int fd, short events) {
    fds.push_back({fd, events, 0});
    owners.emplace_back(id, which);
  }

  // The privhelper closed the channel (it exited or dropped this sandbox): nothing can be
  // relayed any more, so the children go too.
  int Shutdown(int code = 0) {
    for (auto& [id, c] : children_) {
      if (!c.exited) kill(c.pid, SIGKILL);
    }
    return code;
  }

  bool Receive(std::string_view bytes) {
    reader_.Feed(bytes);
    bool error = false;
    while (auto frame = reader_.Next(&error)) Apply(*frame);
    return !error;
  }

  static uint32_t U32(const std::string& p, size_t at = 0) {
    auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(p[at + i])); };
    return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
  }

  // Frames from the privhelper; one it should not have sent is ignored.
  void Apply(const spawner::Frame& f) {
    if (f.type == Type::kExitSpawner) {
      told_to_exit_ = true;
      return;
    }
    if (f.type == Type::kStart) {
      if (auto request = spawner::DecodeStart(f.payload); request && !children_.count(f.id))
        Start(f.id, *request);
      return;
    }
    auto it = children_.find(f.id);
    if (it == children_.end()) {
      // Input for a process already gone: give the credit back so the privhelper keeps draining.
      if (f.type == Type::kInput && !f.payload.empty())
        WriteChannel(spawner::EncodeU32(Type::kInputCredit, f.id, static_cast<uint32_t>(f.payload.size())));
      return;
    }
    Child& c = it->second;
    switch (f.type) {
      case Type::kInput:
        if (c.in >= 0) c.pending_in += f.payload;
        else if (!f.payload.empty())
          WriteChannel(spawner::EncodeU32(Type::kInputCredit, f.id, static_cast<uint32_t>(f.payload.size())));
        break;
      case Type::kCloseInput:
        c.close_in = true;
        if (c.pending_in.empty()) CloseFd(c.in);
        break;
      case Type::kSignal:
        if (f.payload.size() == 4 && !c.exited) kill(c.pid, static_cast<int>(U32(f.payload)));
        break;
      case Type::kGrant:
        if (f.payload.size() == 5) {
          uint32_t& credit = Credit(c, static_cast<uint8_t>(f.payload[0]));
          credit = std::min<uint64_t>(spawner::kMaxOutputWindow, uint64_t{credit} + U32(f.payload, 1));
        }
        break;
      default:
        break;
    }
  }

  void Start(uint32_t id, const spawner::StartRequest& request) {
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};  // closed on failure: never garbage
    bool ok = pipe2(in, O_CLOEXEC) == 0;
    ok = ok && pipe2(out, O_CLOEXEC) == 0;
    ok = ok && (request.merge_stderr || pipe2(err, O_CLOEXEC) == 0);
    ChildStart c;
    std::vector<char*> argv, envp;
    for (const auto& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    c.cwd = request.cwd.c_str();
    c.argv = argv.data();
    c.envp = envp.data();
    c.candidates = Candidates(request.argv[0], request.search_path.c_str());
    c.in = in[0];
    c.out = out[1];
    c.err = request.merge_stderr ? out[1] : err[1];
    c.spawner = self_;
    // The parent waits in clone until the child has exec'd or exited (CLONE_VFORK).
    pid_t pid = ok ? clone(RunChild, stack_.data() + stack_.size(),
                           CLONE_VM | CLONE_VFORK | SIGCHLD, &c)
                   : -1;
    int start_errno = errno;
    for (int fd : {in[0], out[1], err[1]}) if (fd >= 0) close(fd);
    if (pid < 0 || c.error != 0) {
      if (pid > 0) {
        while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
      }
      for (int fd : {in[1], out[0], err[0]}) if (fd >= 0) close(fd);
      WriteChannel(spawner::Encode(Type::kFailed, id,
                                   FailedPayload(pid < 0 ? start_errno : c.error, c.stage)));
      return;
    }
    Child& child = children_[id];
    child.pid = pid;
    child.in = in[1];
    child.out = out[0];
    child.err = err[0];
    for (int fd : {child.in, child.out, child.err}) if (fd >= 0) SetNonBlocking(fd);
    for (int fd : {child.out, child.err}) if (fd >= 0) fcntl(fd, F_SETPIPE_SZ, 1 << 20);
    WriteChannel(spawner::EncodeU32(Type::kStarted, id, static_cast<uint32_t>(pid)));
  }

  static std::string FailedPayload(int e, uint8_t stage) {
    std::string p = spawner::EncodeU32(Type::kFailed, 0, static_cast<uint32_t>(e)).substr(spawner::kHeaderBytes);
    p.push_back(static_cast<char>(stage));
    return p;
  }

  void FeedInput(uint32_t id, Child& c) {
    ssize_t n = write(c.in, c.pending_in.data(), c.pending_in.size());
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    // Taken, or nobody reads it any more (EPIPE): either way the privhelper may send more.
    size_t taken = n > 0 ? static_cast<size_t>(n) : c.pending_in.size();
    c.pending_in.erase(0, taken);
    WriteChannel(spawner::EncodeU32(Type::kInputCredit, id, static_cast<uint32_t>(taken)));
    if (n < 0) {
      CloseFd(c.in);
      c.pending_in.clear();
    } else if (c.close_in && c.pending_in.empty()) {
      CloseFd(c.in);
    }
  }

  static int& Fd(Child& c, uint8_t stream) { return stream == spawner::kStdout ? c.out : c.err; }
  static uint32_t& Credit(Child& c, uint8_t stream) {
    return stream == spawner::kStdout ? c.out_credit : c.err_credit;
  }

  // Reads one chunk of a stream against its credit; false if nothing was read (no credit, at
  // end-of-file already, or empty for now).
  bool Relay(uint32_t id, Child& c, uint8_t stream) {
    int& fd = Fd(c, stream);
    uint32_t& credit = Credit(c, stream);
    if (fd < 0 || credit == 0) return false;
    char buf[spawner::kMaxOutputChunk + 1];
    size_t want = std::min<size_t>(credit, spawner::kMaxOutputChunk);
    ssize_t n = read(fd, buf + 1, want);
    if (n < 0) return false;  // EAGAIN: empty for now
    if (n == 0) {
      CloseFd(fd);
      WriteChannel(spawner::Encode(Type::kEnd, id, std::string(1, static_cast<char>(stream))));
      return false;
    }
    credit -= static_cast<uint32_t>(n);
    buf[0] = static_cast<char>(credit == 0 ? stream | spawner::kStarved : stream);
    WriteChannel(spawner::Encode(Type::kOutput, id, std::string_view(buf, static_cast<size_t>(n) + 1)));
    return true;
  }

  // A few chunks while the stream has them and credit lasts: one poll per chunk costs as much
  // as the chunk's read under gVisor. Bounded, so one busy stream cannot hold up the others.
  void RelaySome(uint32_t id, Child& c, uint8_t stream) {
    for (int i = 0; i < 8 && Relay(id, c, stream); ++i) {
    }
  }

  void Reap() {
    signalfd_siginfo info;
    while (read(sfd_, &info, sizeof(info)) == sizeof(info)) {
    }
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& [id, c] : children_) {
        if (c.pid == pid && !c.exited) {
          c.exited = true;
          c.status = status;
        }
      }
    }
  }

  // Reports exits whose output before the exit has been read, and forgets finished children.
  void Settle() {
    for (auto it = children_.begin(); it != children_.end();) {
      uint32_t id = it->first;
      Child& c = it->second;
      if (c.exited && !c.exit_sent) {
        // Drain what is there now; a stream without credit waits for the privhelper.
        bool drained = true;
        for (uint8_t s : {spawner::kStdout, spawner::kStderr}) {
          while (Relay(id, c, s)) {
          }
          if (Fd(c, s) >= 0 && Credit(c, s) == 0) drained = false;
        }
        if (drained) {
          c.exit_sent = true;
          // Its input goes with it: nothing is relayed to a process that has ended.
          CloseFd(c.in);
          c.pending_in.clear();
          WriteChannel(spawner::EncodeU32(Type::kExit, id, static_cast<uint32_t>(c.status)));
        }
      }
      if (c.exit_sent && c.out < 0 && c.err < 0) it = children_.erase(it);
      else ++it;
    }
  }

  pid_t self_;
  std::vector<char> stack_ = std::vector<char>(64 * 1024);  // the starting child's
  int sfd_ = -1;
  bool told_to_exit_ = false;
  spawner::FrameReader reader_{spawner::kMaxDownPayload};
  std::map<uint32_t, Child> children_;
};

}  // namespace

int RunSpawner() { return Spawner().Run(); }

}  // namespace paseo::shim
