// See spawner.h. Single-threaded: one poll loop over the channel, a signalfd for SIGCHLD, the
// reattach listener and every child's pipes.
//
// A child is set up as `runsc exec` sets up a process, from what the spawner itself got from
// its own `runsc exec` (same uid, gids, no capabilities, no_new_privs, rlimits, umask): a
// session of its own, an empty signal mask and default dispositions, exactly the environment
// and cwd it was sent, and argv[0] looked up in the search path it was sent (the tool
// directories, then the environment's PATH or a default), not in the environment itself. It dies
// with the spawner (PR_SET_PDEATHSIG): a process nobody can relay for again must not run on
// unseen.
//
// Output: what a child writes is read into its stream's retained bytes and sent from there
// against credit (spawner_frames.h), so a child whose reader is slow blocks on its own full
// pipe and nobody else. The bytes stay until the privhelper says they are in the broker's log
// (kGrant's `logged`), so a reattached channel continues at exactly the offset the log ends at.
// A child's exit is reported after what it wrote before exiting has been sent (both pipes at
// end-of-file, or empty after the exit); output a descendant writes later still follows.
//
// Without a channel (the privhelper died or restarts) the children run on: a lossless stream is
// read until kMaxRetainedBytes are kept, then its writer waits on its full pipe; a drop-oldest
// one keeps its newest kMaxRetainedBytes. Exits are kept until a channel has them. A new channel
// comes through the listener (spawner_frames.h): at most kMaxCandidates connections wait at
// once, each at most kCandidatePatience, and only one whose first frame carries the key becomes
// the channel. Everything else on the socket is closed and changes nothing.
#include "sandbox/spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "common/spawner_frames.h"

namespace paseo::shim {
namespace {

using spawner::Type;

constexpr size_t kMaxCandidates = 8;
constexpr int64_t kCandidatePatienceMs = 2000;
constexpr int kAcceptsPerTurn = 4;

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }
void SetBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); }

// One output stream of a child: the bytes [base, end) it still keeps, by the stream's own
// offsets (from the process's start).
struct Stream {
  int fd = -1;  // read end of the child's pipe; -1 at end-of-file (or for a terminal's stderr)
  std::deque<std::string> chunks;
  size_t skip = 0;  // bytes of chunks.front() before base
  uint64_t base = 0, end = 0;
  // On the current channel: bytes before `sent` were sent; `credit` more may be.
  uint64_t sent = 0;
  uint32_t credit = 0;
  bool end_sent = false;

  uint64_t kept() const { return end - base; }
  void Append(const char* data, size_t n) {
    chunks.emplace_back(data, n);
    end += n;
  }
  // Forgets the bytes before `to` (clamped to what is kept).
  void Trim(uint64_t to) {
    to = std::min(to, end);
    while (base < to && !chunks.empty()) {
      size_t left = chunks.front().size() - skip;
      uint64_t drop = std::min<uint64_t>(left, to - base);
      base += drop;
      skip += drop;
      if (skip == chunks.front().size()) {
        chunks.pop_front();
        skip = 0;
      }
    }
    base = std::max(base, to);
  }
  // Copies up to `n` bytes from offset `at` (base <= at <= end) into `out`.
  void Copy(uint64_t at, size_t n, std::string& out) const {
    uint64_t pos = base;
    size_t first_skip = skip;
    for (const std::string& c : chunks) {
      size_t len = c.size() - first_skip;
      if (pos + len > at && n > 0) {
        size_t from = first_skip + static_cast<size_t>(at > pos ? at - pos : 0);
        size_t take = std::min(n, c.size() - from);
        out.append(c, from, take);
        n -= take;
        at += take;
      }
      pos += len;
      first_skip = 0;
      if (n == 0) break;
    }
  }
};

struct Child {
  pid_t pid = 0;
  std::string name;
  bool merged = false;       // a tty relay: one stream (err unused)
  bool drop_oldest = false;  // its output may drop the oldest bytes without a channel
  int in = -1;               // write end of its stdin
  Stream out, err;
  std::string pending_in;  // input it has not taken yet
  // A tty relay's input is frames (common/tty_frames.h): only the complete ones before this are
  // written, so a channel that ends mid-frame leaves no half frame in the relay.
  size_t complete_in = 0;
  size_t uncredited_in = 0;  // bytes of pending_in from an earlier channel: not credited
  bool close_in = false;     // close its stdin once pending_in is written
  bool exited = false;
  int status = 0;
  // On the current channel: its output flows (kResume), its exit was reported.
  bool resumed = false;
  bool exit_sent = false;
};

// A connection to the listener that may become the channel.
struct Candidate {
  int sock = -1;
  int in = -1, out = -1;  // the fds it handed over (SCM_RIGHTS)
  std::string first;      // what `in` said so far (the kAttach frame)
  int64_t deadline = 0;
};

void CloseCandidate(Candidate& c) {
  CloseFd(c.sock);
  CloseFd(c.in);
  CloseFd(c.out);
}

// What the child needs, prepared by the spawner before the clone: the child shares the
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

uint32_t U32(const std::string& p, size_t at = 0) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(p[at + i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

// Bytes at the front of `pending` that are whole tty frames, scanning on from `from` (a frame
// boundary): a 3-byte header (type, big-endian 16-bit length) and the payload.
size_t CompleteTtyFrames(const std::string& pending, size_t from) {
  while (pending.size() - from >= 3) {
    size_t len = static_cast<size_t>(static_cast<uint8_t>(pending[from + 1])) << 8 |
                 static_cast<uint8_t>(pending[from + 2]);
    if (pending.size() - from - 3 < len) break;
    from += 3 + len;
  }
  return from;
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
    Listen();
    ch_in_ = STDIN_FILENO;
    ch_out_ = STDOUT_FILENO;
    SayHello();
    std::vector<pollfd> fds;
    // What each pollfd past the fixed ones is: (kind, child id or candidate index).
    enum Kind { kChildIn, kChildOut, kChildErr, kCandidateSock, kCandidateIn };
    std::vector<std::pair<Kind, uint32_t>> owners;
    char buf[64 * 1024];
    for (;;) {
      fds.assign({{ch_in_, POLLIN, 0}, {sfd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}});
      owners.clear();
      for (auto& [id, c] : children_) {
        if (c.in >= 0 && WritableInput(c) > 0) {
          fds.push_back({c.in, POLLOUT, 0});
          owners.emplace_back(kChildIn, id);
        }
        if (ReadRoom(c, c.out) > 0) {
          fds.push_back({c.out.fd, POLLIN, 0});
          owners.emplace_back(kChildOut, id);
        }
        if (ReadRoom(c, c.err) > 0) {
          fds.push_back({c.err.fd, POLLIN, 0});
          owners.emplace_back(kChildErr, id);
        }
      }
      int64_t now = NowMs();
      int timeout = -1;
      for (uint32_t i = 0; i < candidates_.size(); ++i) {
        Candidate& k = candidates_[i];
        fds.push_back({k.in >= 0 ? k.in : k.sock, POLLIN, 0});
        owners.emplace_back(k.in >= 0 ? kCandidateIn : kCandidateSock, i);
        int64_t left = std::max<int64_t>(0, k.deadline - now);
        timeout = timeout < 0 ? static_cast<int>(left) : std::min(timeout, static_cast<int>(left));
      }
      if (poll(fds.data(), fds.size(), timeout) < 0) {
        if (errno == EINTR) continue;
        return 126;
      }
      if (ch_in_ >= 0 && fds[0].revents) {
        ssize_t n = read(ch_in_, buf, sizeof(buf));
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
          Detach();
        } else if (n > 0 && !Receive(std::string_view(buf, static_cast<size_t>(n)))) {
          Detach();  // a frame it could not read: the channel is unusable
        }
        if (told_to_exit_) return Shutdown(kSpawnerToldToExit);
      }
      if (fds[1].revents) Reap();
      std::vector<uint32_t> candidates_ready;
      for (size_t i = 0; i < owners.size(); ++i) {
        if (fds[i + 3].revents == 0) continue;
        auto [kind, key] = owners[i];
        if (kind == kCandidateSock || kind == kCandidateIn) {
          candidates_ready.push_back(key);
          continue;
        }
        auto it = children_.find(key);
        if (it == children_.end()) continue;
        if (kind == kChildIn) FeedInput(key, it->second);
        else ReadSome(it->second, kind == kChildOut ? it->second.out : it->second.err);
      }
      // Candidates first: an accept may drop the oldest, which moves the indexes polled.
      ServeCandidates(candidates_ready);
      if (listen_fd_ >= 0 && fds[2].revents) Accept();
      Flush();
    }
  }

 private:
  // ------------------------------------------------------------- the channel

  void WriteChannel(const std::string& frame) {
    if (ch_out_ < 0) return;
    size_t done = 0;
    while (done < frame.size()) {
      ssize_t n = write(ch_out_, frame.data() + done, frame.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // The privhelper is gone (or dropped the channel): the children stay, for the next one.
        // Not _exit: as the sandbox's init, that would end the sandbox.
        broken_ = true;
        return;
      }
      done += static_cast<size_t>(n);
    }
  }

  // Hello, and what it holds: on the first channel nothing, on a reattached one every process
  // not yet released, each to be continued by a kResume.
  void SayHello() {
    WriteChannel(spawner::EncodeU32(Type::kHello, 0, spawner::kVersion));
    for (auto& [id, c] : children_) {
      spawner::HeldProcess h;
      h.pid = static_cast<uint32_t>(c.pid);
      h.merged = c.merged;
      h.drop_oldest = c.drop_oldest;
      h.input_closed = c.in < 0;
      h.out_eof = c.out.fd < 0;
      h.err_eof = c.err.fd < 0;
      h.out_base = c.out.base;
      h.out_end = c.out.end;
      h.err_base = c.err.base;
      h.err_end = c.err.end;
      h.name = c.name;
      WriteChannel(spawner::EncodeHeld(id, h));
    }
    WriteChannel(spawner::Encode(Type::kHeldEnd, 0, ""));
  }

  // The channel ended (or could not be read): the children run on, their output kept, until a
  // new one comes through the listener.
  void Detach() {
    if (ch_in_ >= 0) close(ch_in_);
    if (ch_out_ >= 0 && ch_out_ != ch_in_) close(ch_out_);
    ch_in_ = ch_out_ = -1;
    broken_ = false;
    reader_ = spawner::FrameReader(spawner::kMaxDownPayload);
    for (auto& [id, c] : children_) {
      c.resumed = false;
      c.exit_sent = false;
      // Half a tty frame whose rest went with the channel is never written.
      c.pending_in.resize(c.complete_in);
    }
  }

  bool Receive(std::string_view bytes) {
    reader_.Feed(bytes);
    bool error = false;
    while (auto frame = reader_.Next(&error)) {
      Apply(*frame);
      if (ch_in_ < 0) return true;  // the frame ended the channel
    }
    return !error;
  }

  // The privhelper ends its channel without kExitSpawner when it exits or restarts: nothing is
  // killed then. Told to exit, every process goes.
  int Shutdown(int code) {
    for (auto& [id, c] : children_) {
      if (!c.exited) kill(c.pid, SIGKILL);
    }
    return code;
  }

  // Frames from the privhelper; one it should not have sent is ignored.
  void Apply(const spawner::Frame& f) {
    switch (f.type) {
      case Type::kExitSpawner:
        told_to_exit_ = true;
        return;
      case Type::kKey:
        if (f.id == 0 && f.payload.size() == spawner::kKeyBytes) key_ = f.payload;
        return;
      case Type::kDropAll:
        for (auto& [id, c] : children_) {
          if (!c.exited) kill(c.pid, SIGKILL);
          Forget(c);
        }
        children_.clear();
        return;
      case Type::kStart:
        if (auto request = spawner::DecodeStart(f.payload); request && !children_.count(f.id))
          Start(f.id, *request);
        return;
      default:
        break;
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
        if (c.in >= 0) {
          c.pending_in += f.payload;
          c.complete_in = c.merged ? CompleteTtyFrames(c.pending_in, c.complete_in)
                                   : c.pending_in.size();
        } else if (!f.payload.empty()) {
          WriteChannel(spawner::EncodeU32(Type::kInputCredit, f.id, static_cast<uint32_t>(f.payload.size())));
        }
        break;
      case Type::kCloseInput:
        c.close_in = true;
        if (c.pending_in.empty()) CloseFd(c.in);
        break;
      case Type::kSignal:
        if (f.payload.size() == 4 && !c.exited) kill(c.pid, static_cast<int>(U32(f.payload)));
        break;
      case Type::kGrant:
        if (auto g = spawner::DecodeGrant(f.payload); g && c.resumed) {
          Stream& s = g->stream == spawner::kStdout ? c.out : c.err;
          s.credit = static_cast<uint32_t>(
              std::min<uint64_t>(spawner::kMaxOutputWindow, uint64_t{s.credit} + g->bytes));
          s.Trim(std::min(g->logged, s.sent));
        }
        break;
      case Type::kResume:
        if (auto offsets = spawner::DecodeOffsets(f.payload); offsets && !c.resumed) {
          uint64_t out = ResumeAt(c.out, offsets->first);
          uint64_t err = ResumeAt(c.err, offsets->second);
          c.resumed = true;
          WriteChannel(spawner::EncodeOffsets(Type::kResumed, f.id, out, err));
        }
        break;
      case Type::kRelease:
        if (c.exited) {
          // The privhelper waits for both ends of a released process before it forgets it.
          if (c.resumed) {
            for (auto [s, which] : {std::pair{&c.out, spawner::kStdout}, {&c.err, spawner::kStderr}}) {
              if (!s->end_sent && !(c.merged && which == spawner::kStderr))
                WriteChannel(spawner::Encode(Type::kEnd, f.id, std::string(1, static_cast<char>(which))));
            }
          }
          Forget(c);
          children_.erase(it);
        }
        break;
      default:
        break;
    }
  }

  // Where a stream continues on this channel, asked to continue at `at` (the broker's log end):
  // there if it still has that byte, at its oldest kept byte if that is later (the gap is what
  // a drop-oldest stream lost), and at `at` itself if that is beyond what it ever read (the
  // stream's offsets follow the log's from then on).
  static uint64_t ResumeAt(Stream& s, uint64_t at) {
    if (at > s.end) {
      s.Trim(s.end);
      s.base = s.end = at;
    } else {
      s.Trim(at);
    }
    s.sent = s.base;
    s.credit = spawner::kInitialOutputWindow;
    s.end_sent = false;
    return s.base;
  }

  // ------------------------------------------------------------- reattach

  void Listen() {
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    size_t len = strlen(spawner::kAttachSocket);
    memcpy(addr.sun_path + 1, spawner::kAttachSocket, len);  // abstract: sun_path[0] is NUL
    socklen_t size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), size) != 0 ||
        listen(listen_fd_, static_cast<int>(kMaxCandidates)) != 0) {
      // Taken (another spawner of this sandbox holds it): this one cannot be reattached.
      CloseFd(listen_fd_);
    }
  }

  void Accept() {
    for (int i = 0; i < kAcceptsPerTurn; ++i) {
      int s = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (s < 0) return;
      if (candidates_.size() == kMaxCandidates) {
        // A flood: the oldest goes. One that is really the privhelper's has its key waiting in
        // its channel already, so it is through long before kMaxCandidates newer ones came.
        CloseCandidate(candidates_.front());
        candidates_.erase(candidates_.begin());
      }
      candidates_.push_back({s, -1, -1, "", NowMs() + kCandidatePatienceMs});
    }
  }

  void ServeCandidates(const std::vector<uint32_t>& ready) {
    std::vector<bool> drop(candidates_.size(), false);
    int64_t now = NowMs();
    int adopted = -1;
    for (uint32_t i : ready) {
      if (i >= candidates_.size() || adopted >= 0) continue;
      Candidate& k = candidates_[i];
      if (k.in < 0) {
        drop[i] = !TakeFds(k);
        continue;
      }
      char buf[spawner::kHeaderBytes + spawner::kKeyBytes];
      ssize_t n = read(k.in, buf, sizeof(buf) - k.first.size());
      if (n <= 0) {
        drop[i] = n == 0 || (errno != EAGAIN && errno != EINTR);
        continue;
      }
      k.first.append(buf, static_cast<size_t>(n));
      if (k.first.size() < sizeof(buf)) continue;
      if (KeyMatches(k.first)) adopted = static_cast<int>(i);
      else drop[i] = true;
    }
    for (uint32_t i = 0; i < candidates_.size(); ++i) {
      if (candidates_[i].deadline <= now && static_cast<int>(i) != adopted) drop[i] = true;
    }
    if (adopted >= 0) Adopt(candidates_[static_cast<size_t>(adopted)]);
    std::vector<Candidate> kept;
    for (uint32_t i = 0; i < candidates_.size(); ++i) {
      if (static_cast<int>(i) == adopted) continue;
      if (drop[i]) CloseCandidate(candidates_[i]);
      else kept.push_back(candidates_[i]);
    }
    candidates_ = std::move(kept);
  }

  // The connection's one message: a byte and exactly two fds (the new channel's ends).
  static bool TakeFds(Candidate& k) {
    char byte;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(k.sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    std::vector<int> got;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t j = 0; j < count; ++j) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + j * sizeof(int), sizeof(int));
        got.push_back(fd);
      }
    }
    if (n != 1 || got.size() != 2 || (msg.msg_flags & MSG_CTRUNC)) {
      for (int fd : got) close(fd);
      return false;
    }
    k.in = got[0];
    k.out = got[1];
    SetNonBlocking(k.in);
    return true;
  }

  bool KeyMatches(const std::string& first) const {
    if (key_.size() != spawner::kKeyBytes) return false;  // never given one: no reattach
    std::string want = spawner::Encode(Type::kAttach, 0, key_);
    unsigned char diff = 0;
    for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(want[i] ^ first[i]);
    return diff == 0;
  }

  // The privhelper's new channel: the old one (if it is still there) goes, the attach is told
  // it was taken, and the new privhelper hears what is held.
  void Adopt(Candidate& k) {
    Detach();
    ch_in_ = k.in;
    ch_out_ = k.out;
    SetBlocking(ch_out_);
    k.in = k.out = -1;
    (void)!write(k.sock, "k", 1);
    CloseFd(k.sock);
    for (auto& [id, c] : children_) c.uncredited_in = c.pending_in.size();
    SayHello();
  }

  // ------------------------------------------------------------- children

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
    child.name = request.name;
    child.merged = request.merge_stderr;
    child.drop_oldest = request.drop_oldest;
    child.resumed = true;  // started on this channel: its output flows at once
    child.in = in[1];
    child.out.fd = out[0];
    child.err.fd = err[0];
    for (Stream* s : {&child.out, &child.err}) s->credit = spawner::kInitialOutputWindow;
    for (int fd : {child.in, child.out.fd, child.err.fd}) if (fd >= 0) SetNonBlocking(fd);
    for (int fd : {child.out.fd, child.err.fd}) if (fd >= 0) fcntl(fd, F_SETPIPE_SZ, 1 << 20);
    WriteChannel(spawner::EncodeU32(Type::kStarted, id, static_cast<uint32_t>(pid)));
  }

  static std::string FailedPayload(int e, uint8_t stage) {
    std::string p = spawner::EncodeU32(Type::kFailed, 0, static_cast<uint32_t>(e)).substr(spawner::kHeaderBytes);
    p.push_back(static_cast<char>(stage));
    return p;
  }

  static void Forget(Child& c) {
    CloseFd(c.in);
    CloseFd(c.out.fd);
    CloseFd(c.err.fd);
  }

  static size_t WritableInput(const Child& c) { return c.complete_in; }

  void FeedInput(uint32_t id, Child& c) {
    ssize_t n = write(c.in, c.pending_in.data(), WritableInput(c));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    // Taken, or nobody reads it any more (EPIPE): either way the privhelper may send more.
    size_t taken = n > 0 ? static_cast<size_t>(n) : c.pending_in.size();
    size_t old = std::min(taken, c.uncredited_in);
    c.uncredited_in -= old;
    c.pending_in.erase(0, taken);
    c.complete_in -= std::min(taken, c.complete_in);
    if (taken > old)
      WriteChannel(spawner::EncodeU32(Type::kInputCredit, id, static_cast<uint32_t>(taken - old)));
    if (n < 0) {
      CloseFd(c.in);
      c.pending_in.clear();
      c.complete_in = 0;
      c.uncredited_in = 0;
    } else if (c.close_in && c.pending_in.empty()) {
      CloseFd(c.in);
    }
  }

  bool Flowing(const Child& c) const { return ch_out_ >= 0 && c.resumed; }

  // How much of `s` may be read now: against credit while it flows, else what it may keep.
  size_t ReadRoom(const Child& c, const Stream& s) const {
    if (s.fd < 0) return 0;
    uint64_t keep_room = s.kept() < spawner::kMaxRetainedBytes ? spawner::kMaxRetainedBytes - s.kept() : 0;
    if (Flowing(c)) {
      uint64_t unsent = s.end - s.sent;
      uint64_t credit_room = s.credit > unsent ? s.credit - unsent : 0;
      return static_cast<size_t>(std::min<uint64_t>({credit_room, keep_room, uint64_t{spawner::kMaxOutputChunk}}));
    }
    // No channel: a drop-oldest stream reads on and forgets its oldest bytes.
    if (c.drop_oldest) return spawner::kMaxOutputChunk;
    return static_cast<size_t>(std::min<uint64_t>(keep_room, spawner::kMaxOutputChunk));
  }

  // Reads one chunk of a stream; false if nothing was read (no room, at end-of-file already, or
  // empty for now).
  bool Read(Child& c, Stream& s) {
    size_t want = ReadRoom(c, s);
    if (want == 0) return false;
    ssize_t n = read(s.fd, read_buf_.data(), want);
    if (n < 0) return false;  // EAGAIN: empty for now
    if (n == 0) {
      CloseFd(s.fd);
      return false;
    }
    s.Append(read_buf_.data(), static_cast<size_t>(n));
    if (s.kept() > spawner::kMaxRetainedBytes) s.Trim(s.end - spawner::kMaxRetainedBytes);
    return true;
  }

  // A few chunks while the stream has them: one poll per chunk costs as much as the chunk's read
  // under gVisor. Bounded, so one busy stream cannot hold up the others.
  void ReadSome(Child& c, Stream& s) {
    for (int i = 0; i < 8 && Read(c, s); ++i) {
    }
  }

  // Sends what credit allows of every flowing stream, its end once all of it is sent, and exits
  // whose output before the exit is sent.
  void Flush() {
    for (auto& [id, c] : children_) {
      if (!Flowing(c)) continue;
      for (auto [s, which] : {std::pair{&c.out, spawner::kStdout}, {&c.err, spawner::kStderr}}) {
        if (c.merged && which == spawner::kStderr) continue;  // a terminal has one stream
        Send(id, *s, which);
        if (c.exited && !c.exit_sent) {
          // Drain what is there now; a stream without credit or room waits for the privhelper.
          while (Read(c, *s)) Send(id, *s, which);
          // The drain may have read its end-of-file: its end goes now, before the exit. Nothing
          // else may wake this loop again (regression: the last of processes that exited
          // together had its exit sent without its ends, and the broker never saw it end).
          Send(id, *s, which);
        }
      }
      if (c.exited && !c.exit_sent && Drained(c.out) && Drained(c.err)) {
        c.exit_sent = true;
        // Its input goes with it: nothing is relayed to a process that has ended.
        CloseFd(c.in);
        c.pending_in.clear();
        c.complete_in = 0;
        WriteChannel(spawner::EncodeU32(Type::kExit, id, static_cast<uint32_t>(c.status)));
      }
      if (broken_) return Detach();
    }
    if (broken_) Detach();
  }

  void Send(uint32_t id, Stream& s, uint8_t which) {
    while (s.credit > 0 && s.sent < s.end) {
      size_t n = static_cast<size_t>(
          std::min<uint64_t>({uint64_t{s.credit}, uint64_t{spawner::kMaxOutputChunk}, s.end - s.sent}));
      frame_.assign(1, static_cast<char>(n == s.credit ? which | spawner::kStarved : which));
      s.Copy(s.sent, n, frame_);
      s.credit -= static_cast<uint32_t>(n);
      s.sent += n;
      WriteChannel(spawner::Encode(Type::kOutput, id, frame_));
    }
    if (s.fd < 0 && s.sent == s.end && !s.end_sent) {
      s.end_sent = true;
      WriteChannel(spawner::Encode(Type::kEnd, id, std::string(1, static_cast<char>(which))));
    }
  }

  // Everything the stream had when its process ended was sent.
  static bool Drained(const Stream& s) {
    if (s.sent != s.end) return false;
    if (s.fd < 0) return true;
    int queued = 0;
    return ioctl(s.fd, FIONREAD, &queued) == 0 && queued == 0;
  }

  void Reap() {
    signalfd_siginfo info;
    while (read(sfd_, &info, sizeof(info)) == sizeof(info)) {
    }
    int status;
    pid_t pid;
    // As the sandbox's init it also reaps what others left (orphans are reparented to it).
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& [id, c] : children_) {
        if (c.pid == pid && !c.exited) {
          c.exited = true;
          c.status = status;
        }
      }
    }
  }

  pid_t self_;
  std::vector<char> stack_ = std::vector<char>(64 * 1024);  // the starting child's
  std::vector<char> read_buf_ = std::vector<char>(spawner::kMaxOutputChunk);
  std::string frame_;
  int sfd_ = -1;
  int listen_fd_ = -1;
  int ch_in_ = -1, ch_out_ = -1;  // the channel (-1: none now)
  bool broken_ = false;           // a write to it failed
  bool told_to_exit_ = false;
  std::string key_;  // what a reattach must present (kKey); empty: none may
  spawner::FrameReader reader_{spawner::kMaxDownPayload};
  std::map<uint32_t, Child> children_;
  std::vector<Candidate> candidates_;
};

}  // namespace

int RunSpawner() { return Spawner().Run(); }

// `shim attach`: hands its stdin and stdout (the privhelper's new channel) to the sandbox's
// spawner and waits for it to take them.
int RunAttach() {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return 2;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  size_t len = strlen(spawner::kAttachSocket);
  memcpy(addr.sun_path + 1, spawner::kAttachSocket, len);
  socklen_t size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + len);
  if (connect(s, reinterpret_cast<sockaddr*>(&addr), size) != 0) {
    dprintf(STDERR_FILENO, "no spawner listens in this sandbox (%s)\n", strerror(errno));
    return 2;
  }
  char byte = 'a';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(2 * sizeof(int));
  int fds[2] = {STDIN_FILENO, STDOUT_FILENO};
  memcpy(CMSG_DATA(c), fds, sizeof(fds));
  if (sendmsg(s, &msg, MSG_NOSIGNAL) != 1) {
    dprintf(STDERR_FILENO, "cannot hand the channel over (%s)\n", strerror(errno));
    return 2;
  }
  pollfd p{s, POLLIN, 0};
  char reply = 0;
  if (poll(&p, 1, 5000) != 1 || read(s, &reply, 1) != 1 || reply != 'k') {
    dprintf(STDERR_FILENO, "the spawner did not take the channel\n");
    return 1;
  }
  return 0;
}

}  // namespace paseo::shim
