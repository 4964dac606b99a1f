// See netns_connect.h.
#include "privhelper/netns_connect.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <kj/debug.h>

#include "absl/strings/str_cat.h"
#include "common/rpc_errors.h"

namespace paseo {
namespace {

absl::Status NothingListening(uint16_t port) {
  return absl::UnavailableError(absl::StrCat("nothing listening on port ", port));
}

// Failing to reach the namespace is our fault, not the client's: internal, whatever errno says
// (ErrnoStatus would turn EPERM into permission-denied, which reads as "port not allowed").
absl::Status NamespaceError(const char* op, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat(op, " ", path, ": ", std::strerror(err)));
}

// Runs on its own thread: setns(2) changes only the calling thread's namespace, and this thread
// ends right after, so no other code ever runs in the sandbox's namespace.
absl::StatusOr<kj::AutoCloseFd> ConnectFromInside(const std::string& netns_path, uint32_t addr,
                                                  uint16_t port, uint32_t mark) {
  int ns = open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ns < 0) return NamespaceError("open", netns_path, errno);
  kj::AutoCloseFd ns_fd(ns);
  if (setns(ns, CLONE_NEWNET) != 0) return NamespaceError("setns", netns_path, errno);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (s < 0) return NamespaceError("socket in", netns_path, errno);
  kj::AutoCloseFd sock(s);
  if (mark != 0 && setsockopt(s, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) != 0)
    return NamespaceError("setsockopt(SO_MARK) in", netns_path, errno);
  sockaddr_in to = {};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(addr);
  if (connect(s, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 && errno != EINPROGRESS) {
    if (errno == ECONNREFUSED || errno == ENETUNREACH || errno == EHOSTUNREACH ||
        errno == ETIMEDOUT)
      return NothingListening(port);
    return NamespaceError("connect in", netns_path, errno);
  }
  return sock;
}

// The outcome of a non-blocking connect that has become writable.
absl::Status ConnectResult(int fd, uint16_t port) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    return absl::InternalError(absl::StrCat("getsockopt(SO_ERROR): ", std::strerror(errno)));
  if (err == 0) return absl::OkStatus();
  if (err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == ETIMEDOUT)
    return NothingListening(port);
  return absl::InternalError(absl::StrCat("connect to port ", port, ": ", std::strerror(err)));
}

}  // namespace

absl::StatusOr<kj::AutoCloseFd> StartConnectInNetns(const std::string& netns_path, uint32_t addr,
                                                     uint16_t port, uint32_t mark) {
  absl::StatusOr<kj::AutoCloseFd> result = absl::InternalError("the connect thread did not run");
  std::thread inside([&] { result = ConnectFromInside(netns_path, addr, port, mark); });
  inside.join();
  return result;
}

kj::Promise<kj::AutoCloseFd> NetnsPortConnector::Connect(const std::string& netns_path,
                                                         uint32_t addr, uint16_t port) {
  absl::StatusOr<kj::AutoCloseFd> started = StartConnectInNetns(netns_path, addr, port, mark_);
  if (!started.ok()) return StatusToException(started.status());
  // The socket outlives the observer (attached outside it): an fd must leave epoll before it
  // is closed, or a reused number would lose its registration.
  auto sock = kj::heap<kj::AutoCloseFd>(kj::mv(*started));
  kj::AutoCloseFd* socket = sock.get();
  auto observer = kj::heap<kj::UnixEventPort::FdObserver>(
      events_, socket->get(), kj::UnixEventPort::FdObserver::OBSERVE_WRITE);
  auto connected = observer->whenBecomesWritable().then(
      [socket, port, marked = mark_ != 0]() -> kj::Promise<kj::AutoCloseFd> {
        absl::Status result = ConnectResult(socket->get(), port);
        if (!result.ok()) return StatusToException(result);
        // The mark opened this one connection into the link; it must not outlive it (whoever
        // holds the socket could disconnect it and connect it again, marked, anywhere).
        uint32_t none = 0;
        if (marked && setsockopt(socket->get(), SOL_SOCKET, SO_MARK, &none, sizeof(none)) != 0)
          return StatusToException(absl::InternalError(
              absl::StrCat("setsockopt(SO_MARK, 0): ", std::strerror(errno))));
        return kj::mv(*socket);
      });
  auto late = timer_.afterDelay(patience_).then(
      [port]() -> kj::Promise<kj::AutoCloseFd> { return StatusToException(NothingListening(port)); });
  return connected.exclusiveJoin(kj::mv(late)).attach(kj::mv(observer)).attach(kj::mv(sock));
}

}  // namespace paseo
