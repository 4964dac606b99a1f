// See client.h.
#include "client/client.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <kj/debug.h>

#include "common/rpc_errors.h"
#include "common/status.h"

namespace paseo::client {

std::string DefaultSocketPath() {
  const char* env = std::getenv("PASEO_SANDBOX_SOCKET");
  return env != nullptr && *env != '\0' ? env : kDefaultSocket;
}

std::string DefaultDeployment() {
  const char* env = std::getenv("PASEO_SANDBOX_DEPLOYMENT");
  return env != nullptr ? env : "";
}

namespace {

[[noreturn]] void ThrowCannotConnect(const std::string& message) {
  kj::throwFatalException(kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                                        kj::heapString(message.c_str())));
}

int ConnectUnix(const std::string& path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    ThrowCannotConnect("cannot connect to " + path + ": a socket path has at most " +
                       std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) ThrowCannotConnect(std::string("socket(AF_UNIX): ") + std::strerror(errno));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    std::string msg = "cannot connect to " + path + ": " + std::strerror(err);
    if (err == EACCES) msg += " (is your user in the socket's group?)";
    if (err == ENOENT || err == ECONNREFUSED) msg += " (is the paseo-sandbox service running?)";
    ThrowCannotConnect(msg);
  }
  return fd;
}

}  // namespace

// One fd per message: Sandbox.connect's answer carries one (capnp closes any beyond it).
constexpr unsigned kMaxFdsPerMessage = 1;

Connection::Connection(kj::AsyncIoContext& io, const std::string& socket_path)
    : stream_(io.lowLevelProvider->wrapUnixSocketFd(ConnectUnix(socket_path),
                                                    kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP)),
      client_(kj::heap<capnp::TwoPartyClient>(*stream_, kMaxFdsPerMessage)),
      supervisor_(client_->bootstrap().castAs<api::Supervisor>()) {}

Connection::Connection(kj::AsyncIoContext& io, kj::AutoCloseFd connected)
    : stream_(io.lowLevelProvider->wrapUnixSocketFd(connected.release(),
                                                    kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP)),
      client_(kj::heap<capnp::TwoPartyClient>(*stream_, kMaxFdsPerMessage)),
      supervisor_(client_->bootstrap().castAs<api::Supervisor>()) {}

kj::Promise<kj::AutoCloseFd> Connect(api::Sandbox::Client sandbox, uint16_t port) {
  auto req = sandbox.connectRequest();
  req.setPort(port);
  return req.send().then([](capnp::Response<api::Sandbox::ConnectResults> res) {
    api::Socket::Client socket = res.getSocket();
    // The received fd belongs to the capability: duplicate it before the capability goes.
    return socket.getFd().then([socket](kj::Maybe<int> fd) mutable -> kj::AutoCloseFd {
      KJ_IF_MAYBE(f, fd) {
        int mine = fcntl(*f, F_DUPFD_CLOEXEC, 3);
        if (mine < 0) ThrowStatus(ErrnoStatus("dup", "the connected socket"));
        return kj::AutoCloseFd(mine);
      }
      ThrowStatus(absl::FailedPreconditionError(
          "the service sent the connection but no file descriptor arrived (this connection "
          "must accept fds: a TwoPartyVatNetwork with maxFdsPerMessage of at least 1)"));
    });
  });
}

std::string ErrorText(const kj::Exception& e) { return ClientFacingDescription(e); }

}  // namespace paseo::client
