// See port_relay.h.
#include "broker/port_relay.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <kj/debug.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace paseo {
namespace {

// Copies `from` to `to` until `from` ends, then ends `to`'s writing half.
kj::Promise<void> Copy(kj::AsyncIoStream& from, kj::AsyncIoStream& to, kj::ArrayPtr<kj::byte> buf) {
  return from.tryRead(buf.begin(), 1, buf.size()).then([&from, &to, buf](size_t n) -> kj::Promise<void> {
    if (n == 0) {
      to.shutdownWrite();
      return kj::READY_NOW;
    }
    return to.write(buf.begin(), n).then([&from, &to, buf] { return Copy(from, to, buf); });
  });
}

}  // namespace

// Held by the map and by each running relay (whose end, after a cancel, comes later).
struct PortRelays::PerSandbox : public kj::Refcounted {
  kj::Canceler canceler;
  size_t open = 0;
};

PortRelays::PortRelays(kj::LowLevelAsyncIoProvider& low) : low_(low), tasks_(errors_) {}

PortRelays::~PortRelays() {
  for (auto& [id, sandbox] : sandboxes_) sandbox->canceler.cancel("the broker is stopping");
}

void PortRelays::ErrorHandler::taskFailed(kj::Exception&& exception) {
  // A peer that reset or went away ends its relay; nothing else to do.
  KJ_LOG(INFO, "a connection relay ended", exception.getDescription());
}

absl::StatusOr<kj::AutoCloseFd> PortRelays::Start(const std::string& sandbox_id,
                                                  kj::AutoCloseFd connection) {
  auto& slot = sandboxes_[sandbox_id];
  if (slot.get() == nullptr) slot = kj::refcounted<PerSandbox>();
  PerSandbox& sandbox = *slot;
  if (sandbox.open >= kMaxPerSandbox)
    return absl::ResourceExhaustedError(absl::StrCat(
        "this sandbox already has ", kMaxPerSandbox, " open connections"));
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, pair) != 0)
    return ErrnoStatus("socketpair", "");
  kj::AutoCloseFd client_end(pair[1]);
  // The client's end blocks like an ordinary socket; ours is driven by the event loop.
  int flags = fcntl(pair[1], F_GETFL);
  if (flags < 0 || fcntl(pair[1], F_SETFL, flags & ~O_NONBLOCK) != 0) {
    close(pair[0]);
    return ErrnoStatus("fcntl", "");
  }
  int tcp_flags = fcntl(connection.get(), F_GETFL);
  if (tcp_flags < 0 || fcntl(connection.get(), F_SETFL, tcp_flags | O_NONBLOCK) != 0) {
    close(pair[0]);
    return ErrnoStatus("fcntl", "");
  }
  using Flags = kj::LowLevelAsyncIoProvider;
  auto ours = low_.wrapSocketFd(pair[0], Flags::TAKE_OWNERSHIP | Flags::ALREADY_NONBLOCK |
                                             Flags::ALREADY_CLOEXEC);
  auto remote = low_.wrapSocketFd(connection.release(), Flags::TAKE_OWNERSHIP |
                                                            Flags::ALREADY_NONBLOCK);
  auto up = kj::heapArray<kj::byte>(kChunk);
  auto down = kj::heapArray<kj::byte>(kChunk);
  // Both directions run to their ends; the first error ends both (evaluated eagerly: a join
  // looks at its branches only once all are done).
  auto failed = kj::newPromiseAndFulfiller<void>();
  auto fail = [f = failed.fulfiller.get()](kj::Exception&& e) {
    if (f->isWaiting()) f->reject(kj::mv(e));
  };
  auto to_client = Copy(*remote, *ours, up).catch_(kj::cp(fail)).eagerlyEvaluate(nullptr);
  auto from_client = Copy(*ours, *remote, down).catch_(kj::cp(fail)).eagerlyEvaluate(nullptr);
  auto relay = kj::joinPromises(kj::arr(kj::mv(to_client), kj::mv(from_client)))
                   .exclusiveJoin(kj::mv(failed.promise))
                   .attach(kj::mv(failed.fulfiller), kj::mv(up), kj::mv(down), kj::mv(ours),
                           kj::mv(remote));
  ++sandbox.open;
  tasks_.add(sandbox.canceler.wrap(kj::mv(relay))
                 .attach(kj::defer([held = kj::addRef(sandbox)]() mutable { --held->open; })));
  return client_end;
}

void PortRelays::EndSandbox(const std::string& sandbox_id) {
  auto it = sandboxes_.find(sandbox_id);
  if (it == sandboxes_.end()) return;
  it->second->canceler.cancel("the sandbox was deleted");  // closes their sockets now
  sandboxes_.erase(it);
}

size_t PortRelays::Open(const std::string& sandbox_id) const {
  auto it = sandboxes_.find(sandbox_id);
  return it == sandboxes_.end() ? 0 : it->second->open;
}

}  // namespace paseo
