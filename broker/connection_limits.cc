// See connection_limits.h.
#include "broker/connection_limits.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/rpc_errors.h"

namespace paseo {
namespace {

constexpr uint32_t kMaxSegments = 512;  // capnp refuses more itself

uint32_t LittleEndian32(const kj::byte* b) {
  return uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
}

}  // namespace

bool ReceiveBudget::Charge(bool allowed, uid_t uid, size_t bytes) {
  Pool& pool = pools_[allowed ? 0 : 1];
  size_t& mine = pool.per_uid[uid];
  if (pool.used + bytes > pool.limits.total || mine + bytes > pool.limits.per_uid) {
    if (mine == 0) pool.per_uid.erase(uid);
    return false;
  }
  pool.used += bytes;
  mine += bytes;
  return true;
}

void ReceiveBudget::Release(bool allowed, uid_t uid, size_t bytes) {
  Pool& pool = pools_[allowed ? 0 : 1];
  pool.used -= bytes;
  auto it = pool.per_uid.find(uid);
  if (it != pool.per_uid.end() && (it->second -= bytes) == 0) pool.per_uid.erase(it);
}

MeteredStream::MeteredStream(kj::Own<kj::AsyncCapabilityStream> inner, ReceiveBudget& budget,
                             bool allowed, uid_t uid, kj::Timer& timer, kj::Duration deadline)
    : inner_(kj::mv(inner)),
      budget_(budget),
      allowed_(allowed),
      uid_(uid),
      timer_(timer),
      deadline_(deadline),
      aborted_(nullptr) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  aborted_ = paf.promise.fork();
  abort_ = kj::mv(paf.fulfiller);
}

void MeteredStream::Abort(const absl::Status& status) {
  if (failed_ != nullptr) return;
  failed_ = StatusToException(status);
  abort_->reject(StatusToException(status));
}

MeteredStream::~MeteredStream() noexcept(false) {
  if (charged_ > 0) budget_.Release(allowed_, uid_, charged_);
}

absl::Status MeteredStream::Account(const kj::byte* data, size_t size) {
  size_t i = 0;
  while (i < size) {
    if (phase_ == Phase::kBody) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(body_left_, size - i));
      body_left_ -= n;
      i += n;
    } else if (table_left_ > 0) {  // padding after the sizes
      size_t n = std::min(table_left_, size - i);
      table_left_ -= n;
      i += n;
      if (table_left_ == 0) phase_ = Phase::kBody;
    } else {
      if (segments_ == 0 && word_fill_ == 0 && message_deadline_ == nullptr)
        message_deadline_ = timer_.now() + deadline_;
      size_t n = std::min(sizeof(word_) - word_fill_, size - i);
      std::memcpy(word_ + word_fill_, data + i, n);
      word_fill_ += n;
      i += n;
      if (word_fill_ < sizeof(word_)) continue;
      word_fill_ = 0;
      uint32_t value = LittleEndian32(word_);
      if (segments_ == 0) {
        if (value >= kMaxSegments)
          return absl::InvalidArgumentError("a message with too many segments");
        segments_ = value + 1;
        continue;
      }
      body_left_ += uint64_t(value) * 8;
      if (++sizes_read_ < segments_) continue;
      // The table is complete: this is what capnp is about to allocate.
      size_t table = 4 * (1 + segments_) + ((1 + segments_) % 2 ? 4 : 0);
      uint64_t declared = table + body_left_;
      const ReceivePool& limits = budget_.limits(allowed_);
      if (declared > limits.per_message)
        return absl::InvalidArgumentError(absl::StrCat(
            "a message of ", declared, " bytes; at most ", limits.per_message, " are accepted"));
      if (!budget_.Charge(allowed_, uid_, declared))
        return absl::UnavailableError("too many unfinished messages; try again later");
      charged_ = declared;
      table_left_ = (1 + segments_) % 2 ? 4 : 0;
      phase_ = table_left_ > 0 ? Phase::kTable : Phase::kBody;
      if (table_left_ > 0) continue;
    }
    if (phase_ == Phase::kBody && body_left_ == 0) {
      // The whole message is here; capnp owns it now (and its calls are bounded elsewhere).
      budget_.Release(allowed_, uid_, charged_);
      charged_ = 0;
      phase_ = Phase::kTable;
      segments_ = sizes_read_ = 0;
      message_deadline_ = nullptr;
    }
  }
  return absl::OkStatus();
}

kj::Promise<size_t> MeteredStream::tryRead(void* buffer, size_t min_bytes, size_t max_bytes) {
  KJ_IF_MAYBE(e, failed_) { return kj::cp(*e); }
  auto read = inner_->tryRead(buffer, min_bytes, max_bytes)
                  .then([this, buffer](size_t n) -> kj::Promise<size_t> {
                    absl::Status st = Account(static_cast<const kj::byte*>(buffer), n);
                    if (st.ok()) return n;
                    failed_ = StatusToException(st);
                    return StatusToException(st);
                  });
  read = read.exclusiveJoin(aborted_.addBranch().then([]() -> size_t { return 0; }));
  KJ_IF_MAYBE(when, message_deadline_) {
    auto expired = timer_.atTime(*when).then([this]() -> kj::Promise<size_t> {
      auto st = absl::UnavailableError("a message took too long to arrive");
      failed_ = StatusToException(st);
      return StatusToException(st);
    });
    return read.exclusiveJoin(kj::mv(expired));
  }
  return read;
}

kj::Promise<void> MeteredStream::write(const void* buffer, size_t size) {
  return inner_->write(buffer, size);
}
kj::Promise<void> MeteredStream::write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  return inner_->write(pieces);
}
kj::Promise<void> MeteredStream::whenWriteDisconnected() { return inner_->whenWriteDisconnected(); }
void MeteredStream::shutdownWrite() { inner_->shutdownWrite(); }
void MeteredStream::abortRead() { inner_->abortRead(); }
kj::Maybe<int> MeteredStream::getFd() const { return inner_->getFd(); }

kj::Promise<void> MeteredStream::writeWithFds(
    kj::ArrayPtr<const kj::byte> data, kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> more_data,
    kj::ArrayPtr<const int> fds) {
  return inner_->writeWithFds(data, more_data, fds);
}

kj::Promise<kj::AsyncCapabilityStream::ReadResult> MeteredStream::tryReadWithFds(
    void* buffer, size_t min_bytes, size_t max_bytes, kj::AutoCloseFd*, size_t) {
  // tryRead reads with read(2): no control buffer, so the kernel closes any fd a client sent
  // with these bytes (unix(7)); none ever reaches the broker's fd table.
  return tryRead(buffer, min_bytes, max_bytes).then([](size_t n) { return ReadResult{n, 0}; });
}

kj::Promise<void> MeteredStream::writeWithStreams(
    kj::ArrayPtr<const kj::byte>, kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>>,
    kj::Array<kj::Own<kj::AsyncCapabilityStream>>) {
  return KJ_EXCEPTION(UNIMPLEMENTED, "streams are not passed on a client connection");
}

kj::Promise<kj::AsyncCapabilityStream::ReadResult> MeteredStream::tryReadWithStreams(
    void*, size_t, size_t, kj::Own<kj::AsyncCapabilityStream>*, size_t) {
  return KJ_EXCEPTION(UNIMPLEMENTED, "streams are not passed on a client connection");
}

ClientConnection::ClientConnection(kj::Own<MeteredStream> s, uint64_t traversal_words,
                                   capnp::Capability::Client bootstrap, size_t flow_limit_bytes)
    : stream(kj::mv(s)),
      // capnp 0.9.2 sends no fd on a network whose maxFdsPerMessage is 0 (see
      // testing/fd_passing_test.cc); receiving is refused by MeteredStream whatever this says.
      network(*stream, /*maxFdsPerMessage=*/1, capnp::rpc::twoparty::Side::SERVER,
              [traversal_words] {
                capnp::ReaderOptions options;
                options.traversalLimitInWords = traversal_words;
                options.nestingLimit = 32;
                return options;
              }()),
      rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {
  // Calls a client has in flight (pending waits, queued input) hold broker memory: past this
  // many bytes of them, stop reading the connection until some complete.
  rpc.setFlowLimit(flow_limit_bytes);
}

CallLimiter::Ticket::~Ticket() {
  Connection& c = *connection_;
  --c.waiting_;
  auto it = c.limiter_.by_uid_.find(c.uid_);
  if (it != c.limiter_.by_uid_.end() && --it->second == 0) c.limiter_.by_uid_.erase(it);
}

absl::StatusOr<kj::Own<CallLimiter::Ticket>> CallLimiter::Connection::Acquire() {
  size_t& by_uid = limiter_.by_uid_[uid_];
  if (waiting_ >= limiter_.per_connection_ || by_uid >= limiter_.per_uid_) {
    if (by_uid == 0) limiter_.by_uid_.erase(uid_);
    if (++refused_ == limiter_.per_connection_) on_abuse_();
    return absl::UnavailableError(absl::StrCat(
        "too many calls waiting (at most ", limiter_.per_connection_, " per connection and ",
        limiter_.per_uid_, " per uid); wait for some to finish"));
  }
  ++waiting_;
  ++by_uid;
  return kj::heap<Ticket>(kj::addRef(*this));
}

size_t CallLimiter::waiting(uid_t uid) const {
  auto it = by_uid_.find(uid);
  return it == by_uid_.end() ? 0 : it->second;
}

size_t CallLimiter::waiting() const {
  size_t total = 0;
  for (const auto& [uid, n] : by_uid_) total += n;
  return total;
}

}  // namespace paseo
