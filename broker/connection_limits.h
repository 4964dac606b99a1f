// Bounds on what client connections can make the broker hold, decided before any message is
// parsed and without trusting the client:
//
// - MeteredStream sits between a connection's socket and capnp. capnp allocates a message's
//   declared size as soon as its segment table arrives, so the stream reads that table itself
//   and, before capnp sees it, checks the size against the connection's per-message limit and
//   charges it to the peer's pool (ReceiveBudget) until the whole message has arrived. A
//   message must also arrive within a deadline. A refusal ends that connection only.
// - MeteredStream also decides what fds cross the connection: it sends the ones capnp attaches
//   (Sandbox.connect's Socket, one per message) and never receives any: it reads with read(2),
//   so the kernel closes every fd a client sends before the broker could hold it.
// - CallLimiter bounds calls that wait (a parked wait(), a subscription, queued input, a
//   create) per connection and per uid: each holds broker state however small it is on the
//   wire, so flow control by message bytes alone does not bound them.
//
// Peers that may use no deployment get a much smaller pool and message size: they need only
// info() and a refusal.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <map>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/timer.h>

#include "absl/status/statusor.h"

namespace paseo {

struct ReceivePool {
  size_t total;          // bytes of unfinished messages across all connections of the pool
  size_t per_uid;        // ... of one uid
  size_t per_message;    // the largest message a connection may send
  size_t connections_per_uid;
};

// Limits for peers that may use a deployment, and for every other peer.
inline constexpr ReceivePool kAllowedPool{64 << 20, 16 << 20, 8 << 20, 1024};
inline constexpr ReceivePool kUnknownPool{4 << 20, 256 << 10, 64 << 10, 16};
inline constexpr kj::Duration kMessageDeadline = 10 * kj::SECONDS;

// Bytes of unfinished messages, charged per pool and per uid.
class ReceiveBudget {
 public:
  ReceiveBudget(ReceivePool allowed = kAllowedPool, ReceivePool unknown = kUnknownPool)
      : pools_{{allowed, 0, {}}, {unknown, 0, {}}} {}

  const ReceivePool& limits(bool allowed) const { return pools_[allowed ? 0 : 1].limits; }
  bool Charge(bool allowed, uid_t uid, size_t bytes);
  void Release(bool allowed, uid_t uid, size_t bytes);
  size_t used(bool allowed) const { return pools_[allowed ? 0 : 1].used; }

 private:
  struct Pool {
    ReceivePool limits;
    size_t used;
    std::map<uid_t, size_t> per_uid;
  };
  Pool pools_[2];
};

class MeteredStream final : public kj::AsyncCapabilityStream {
 public:
  MeteredStream(kj::Own<kj::AsyncCapabilityStream> inner, ReceiveBudget& budget, bool allowed, uid_t uid,
                kj::Timer& timer, kj::Duration deadline = kMessageDeadline);
  ~MeteredStream() noexcept(false);

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override;
  kj::Promise<void> write(const void* buffer, size_t size) override;
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override;
  kj::Promise<void> whenWriteDisconnected() override;
  void shutdownWrite() override;
  void abortRead() override;
  kj::Maybe<int> getFd() const override;
  // Sends `fds` with the bytes (SCM_RIGHTS).
  kj::Promise<void> writeWithFds(kj::ArrayPtr<const kj::byte> data,
                                 kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> more_data,
                                 kj::ArrayPtr<const int> fds) override;
  // Reads as tryRead and reports no fds: none are ever received (see the file comment).
  kj::Promise<ReadResult> tryReadWithFds(void* buffer, size_t min_bytes, size_t max_bytes,
                                         kj::AutoCloseFd* fd_buffer, size_t max_fds) override;
  // Streams are never passed: unimplemented.
  kj::Promise<void> writeWithStreams(kj::ArrayPtr<const kj::byte> data,
                                     kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> more_data,
                                     kj::Array<kj::Own<kj::AsyncCapabilityStream>> streams) override;
  kj::Promise<ReadResult> tryReadWithStreams(void* buffer, size_t min_bytes, size_t max_bytes,
                                             kj::Own<kj::AsyncCapabilityStream>* stream_buffer,
                                             size_t max_streams) override;

  // Ends the connection: the pending read and every later one fail with `status`.
  void Abort(const absl::Status& status);

  // For tests: bytes of the message in progress charged to the budget.
  size_t charged() const { return charged_; }

 private:
  // Follows the capnp framing of the bytes just read; an error ends the connection.
  absl::Status Account(const kj::byte* data, size_t size);

  kj::Own<kj::AsyncCapabilityStream> inner_;
  ReceiveBudget& budget_;
  bool allowed_;
  uid_t uid_;
  kj::Timer& timer_;
  kj::Duration deadline_;

  // Framing state: a segment table (count, sizes, padding) then the segments' bytes.
  enum class Phase { kTable, kBody } phase_ = Phase::kTable;
  kj::byte word_[4];
  size_t word_fill_ = 0;
  uint32_t segments_ = 0;      // in the table being read (0: count not read yet)
  uint32_t sizes_read_ = 0;
  size_t table_left_ = 0;      // padding bytes still to skip after the sizes
  uint64_t body_left_ = 0;     // bytes of segments still to come
  size_t charged_ = 0;
  kj::Maybe<kj::TimePoint> message_deadline_;
  kj::Maybe<kj::Exception> failed_;
  kj::ForkedPromise<void> aborted_;  // rejected by Abort()
  kj::Own<kj::PromiseFulfiller<void>> abort_;
};

// One public connection: its metered stream, the capnp network on it (sending at most one fd
// per message, the most any answer carries), and the RPC system serving `bootstrap`, with
// messages bounded to `traversal_words` and calls in flight to `flow_limit_bytes`.
struct ClientConnection {
  ClientConnection(kj::Own<MeteredStream> stream, uint64_t traversal_words,
                   capnp::Capability::Client bootstrap, size_t flow_limit_bytes);
  kj::Own<MeteredStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

// Outstanding waiting calls, per connection and per uid.
class CallLimiter {
 public:
  static constexpr size_t kPerConnection = 1024;
  static constexpr size_t kPerUid = 4096;

  explicit CallLimiter(size_t per_connection = kPerConnection, size_t per_uid = kPerUid)
      : per_connection_(per_connection), per_uid_(per_uid) {}

  class Connection;
  // Released when destroyed.
  class Ticket {
   public:
    explicit Ticket(kj::Own<Connection> connection) : connection_(kj::mv(connection)) {}
    ~Ticket();

   private:
    kj::Own<Connection> connection_;
  };

  class Connection : public kj::Refcounted {
   public:
    Connection(CallLimiter& limiter, uid_t uid, kj::Function<void()> on_abuse)
        : limiter_(limiter), uid_(uid), on_abuse_(kj::mv(on_abuse)) {}
    // unavailable when this connection or its uid has too many calls waiting. A refused call
    // still holds an answer in the RPC system until the client acknowledges it, so a
    // connection refused more than the per-connection bound again is ended (on_abuse).
    absl::StatusOr<kj::Own<Ticket>> Acquire();
    size_t waiting() const { return waiting_; }

   private:
    friend class Ticket;
    CallLimiter& limiter_;
    uid_t uid_;
    kj::Function<void()> on_abuse_;
    size_t waiting_ = 0;
    size_t refused_ = 0;
  };

  // `on_abuse` ends the connection (MeteredStream::Abort).
  kj::Own<Connection> Open(uid_t uid, kj::Function<void()> on_abuse = [] {}) {
    return kj::refcounted<Connection>(*this, uid, kj::mv(on_abuse));
  }
  size_t waiting(uid_t uid) const;
  // Calls of every connection waiting now (the operator's parked calls).
  size_t waiting() const;

 private:
  size_t per_connection_;
  size_t per_uid_;
  std::map<uid_t, size_t> by_uid_;
};

}  // namespace paseo
