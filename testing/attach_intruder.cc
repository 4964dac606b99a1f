// Runs inside a sandbox as its (hostile) user and goes after the spawner's reattach socket
// (common/spawner_frames.h kAttachSocket), for reattach_test:
//   attach_intruder squat   tries to take the socket's name; prints "squat: <errno name>"
//   attach_intruder flood   forever: connects, hands over pipes of its own with a wrong key,
//                           garbage or nothing, and holds connections open
// Static, libc only, like the shim.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <vector>

namespace {

constexpr char kName[] = "paseo-spawner-v3";

socklen_t Address(sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  memcpy(addr->sun_path + 1, kName, strlen(kName));
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + strlen(kName));
}

int Squat() {
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr;
  socklen_t len = Address(&addr);
  if (bind(s, reinterpret_cast<sockaddr*>(&addr), len) == 0 && listen(s, 1) == 0) {
    printf("squat: took it\n");
    fflush(stdout);
    // Whoever connects gets nothing useful from us.
    for (;;) {
      int c = accept(s, nullptr, nullptr);
      if (c >= 0) close(c);
    }
  }
  printf("squat: %s\n", strerror(errno));
  return 0;
}

// Hands over `fds` (two pipes' ends) with one byte, SCM_RIGHTS.
void Hand(int s, int a, int b) {
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
  int fds[2] = {a, b};
  memcpy(CMSG_DATA(c), fds, sizeof(fds));
  sendmsg(s, &msg, MSG_NOSIGNAL);
}

int Flood() {
  signal(SIGPIPE, SIG_IGN);
  std::vector<int> held;
  printf("flooding\n");
  fflush(stdout);
  for (unsigned round = 0;; ++round) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_un addr;
    socklen_t len = Address(&addr);
    if (connect(s, reinterpret_cast<sockaddr*>(&addr), len) != 0 && errno != EINPROGRESS &&
        errno != EAGAIN) {
      close(s);
      usleep(1000);
      continue;
    }
    int in[2], out[2];
    if (pipe(in) == 0 && pipe(out) == 0) {
      switch (round % 4) {
        case 0: {  // a kAttach frame with the wrong key
          char frame[9 + 32] = {'A', 0, 0, 0, 0, 0, 0, 0, 32};
          memset(frame + 9, 'x', 32);
          (void)!write(in[1], frame, sizeof(frame));
          Hand(s, in[0], out[1]);
          break;
        }
        case 1:  // garbage
          (void)!write(in[1], "garbage garbage garbage garbage garbage", 39);
          Hand(s, in[0], out[1]);
          break;
        case 2:  // fds, then silence
          Hand(s, in[0], out[1]);
          break;
        default:  // nothing at all
          break;
      }
      for (int fd : {in[0], out[1]}) close(fd);
      held.push_back(in[1]);
      held.push_back(out[0]);
    }
    held.push_back(s);
    usleep(500);  // hard, but not a whole core of a shared test machine
    // Hold a few hundred descriptors at most, then let the oldest go.
    while (held.size() > 300) {
      close(held.front());
      held.erase(held.begin());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "squat") == 0) return Squat();
  if (argc == 2 && strcmp(argv[1], "flood") == 0) return Flood();
  fprintf(stderr, "usage: attach_intruder squat|flood\n");
  return 2;
}
