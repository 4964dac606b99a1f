// See spawner_frames.h.
#include "common/spawner_frames.h"

namespace paseo::spawner {
namespace {

void PutU32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

uint32_t GetU32(std::string_view in, size_t at) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(in[at + i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

void PutU64(std::string& out, uint64_t v) {
  PutU32(out, static_cast<uint32_t>(v >> 32));
  PutU32(out, static_cast<uint32_t>(v));
}

uint64_t GetU64(std::string_view in, size_t at) {
  return uint64_t{GetU32(in, at)} << 32 | GetU32(in, at + 4);
}

void PutString(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

// Reads a length-prefixed string at *at; false if it runs past the end or holds a NUL.
bool GetString(std::string_view in, size_t* at, std::string* out) {
  if (in.size() - *at < 4) return false;
  uint32_t n = GetU32(in, *at);
  *at += 4;
  if (in.size() - *at < n) return false;
  std::string_view s = in.substr(*at, n);
  if (s.find('\0') != std::string_view::npos) return false;
  out->assign(s);
  *at += n;
  return true;
}

bool GetStrings(std::string_view in, size_t* at, std::vector<std::string>* out) {
  if (in.size() - *at < 4) return false;
  uint32_t count = GetU32(in, *at);
  *at += 4;
  // Each string takes at least its 4-byte length: a count beyond that is a lie.
  if (count > (in.size() - *at) / 4) return false;
  out->resize(count);
  for (auto& s : *out) {
    if (!GetString(in, at, &s)) return false;
  }
  return true;
}

}  // namespace

std::string Encode(Type type, uint32_t id, std::string_view payload) {
  std::string out;
  out.reserve(kHeaderBytes + payload.size());
  out.push_back(static_cast<char>(type));
  PutU32(out, id);
  PutU32(out, static_cast<uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

std::string EncodeU32(Type type, uint32_t id, uint32_t value) {
  std::string payload;
  PutU32(payload, value);
  return Encode(type, id, payload);
}

std::string EncodeGrant(uint32_t id, uint8_t stream, uint32_t bytes, uint64_t logged) {
  std::string payload(1, static_cast<char>(stream));
  PutU32(payload, bytes);
  PutU64(payload, logged);
  return Encode(Type::kGrant, id, payload);
}

std::optional<Grant> DecodeGrant(std::string_view payload) {
  if (payload.size() != 13) return std::nullopt;
  Grant g{static_cast<uint8_t>(payload[0]), GetU32(payload, 1), GetU64(payload, 5)};
  if (g.stream != kStdout && g.stream != kStderr) return std::nullopt;
  return g;
}

std::string EncodeOffsets(Type type, uint32_t id, uint64_t out, uint64_t err) {
  std::string payload;
  PutU64(payload, out);
  PutU64(payload, err);
  return Encode(type, id, payload);
}

std::optional<std::pair<uint64_t, uint64_t>> DecodeOffsets(std::string_view payload) {
  if (payload.size() != 16) return std::nullopt;
  return std::make_pair(GetU64(payload, 0), GetU64(payload, 8));
}

namespace {
constexpr uint8_t kHeldMerged = 1, kHeldDropOldest = 2, kHeldInputClosed = 4, kHeldOutEof = 8,
                  kHeldErrEof = 16;
constexpr size_t kHeldFixedBytes = 4 + 1 + 4 * 8;
}  // namespace

std::string EncodeHeld(uint32_t id, const HeldProcess& held) {
  std::string payload;
  PutU32(payload, held.pid);
  payload.push_back(static_cast<char>((held.merged ? kHeldMerged : 0) |
                                      (held.drop_oldest ? kHeldDropOldest : 0) |
                                      (held.input_closed ? kHeldInputClosed : 0) |
                                      (held.out_eof ? kHeldOutEof : 0) |
                                      (held.err_eof ? kHeldErrEof : 0)));
  for (uint64_t v : {held.out_base, held.out_end, held.err_base, held.err_end}) PutU64(payload, v);
  payload.append(held.name);
  return Encode(Type::kHeld, id, payload);
}

std::optional<HeldProcess> DecodeHeld(std::string_view payload) {
  if (payload.size() <= kHeldFixedBytes || payload.size() > kHeldFixedBytes + kMaxNameBytes)
    return std::nullopt;
  HeldProcess h;
  h.pid = GetU32(payload, 0);
  uint8_t flags = static_cast<uint8_t>(payload[4]);
  if (flags >= 32) return std::nullopt;
  h.merged = flags & kHeldMerged;
  h.drop_oldest = flags & kHeldDropOldest;
  h.input_closed = flags & kHeldInputClosed;
  h.out_eof = flags & kHeldOutEof;
  h.err_eof = flags & kHeldErrEof;
  h.out_base = GetU64(payload, 5);
  h.out_end = GetU64(payload, 13);
  h.err_base = GetU64(payload, 21);
  h.err_end = GetU64(payload, 29);
  h.name.assign(payload.substr(kHeldFixedBytes));
  if (h.out_base > h.out_end || h.err_base > h.err_end ||
      h.name.find('\0') != std::string::npos)
    return std::nullopt;
  return h;
}

std::optional<std::string> EncodeStart(uint32_t id, const StartRequest& request) {
  std::string payload(1, static_cast<char>((request.merge_stderr ? 1 : 0) |
                                           (request.drop_oldest ? 2 : 0)));
  PutString(payload, request.cwd);
  PutU32(payload, static_cast<uint32_t>(request.argv.size()));
  for (const auto& a : request.argv) PutString(payload, a);
  PutU32(payload, static_cast<uint32_t>(request.env.size()));
  for (const auto& e : request.env) PutString(payload, e);
  PutString(payload, request.search_path);
  PutString(payload, request.name);
  if (payload.size() > kMaxDownPayload || request.name.size() > kMaxNameBytes) return std::nullopt;
  return Encode(Type::kStart, id, payload);
}

std::optional<StartRequest> DecodeStart(std::string_view payload) {
  if (payload.empty() || static_cast<uint8_t>(payload[0]) > 3) return std::nullopt;
  StartRequest request;
  request.merge_stderr = (payload[0] & 1) != 0;
  request.drop_oldest = (payload[0] & 2) != 0;
  size_t at = 1;
  if (!GetString(payload, &at, &request.cwd) || !GetStrings(payload, &at, &request.argv) ||
      !GetStrings(payload, &at, &request.env) || !GetString(payload, &at, &request.search_path) ||
      !GetString(payload, &at, &request.name) || at != payload.size() || request.argv.empty() ||
      request.name.size() > kMaxNameBytes)
    return std::nullopt;
  return request;
}

std::optional<Frame> FrameReader::Next(bool* error) {
  std::string_view rest = std::string_view(buffer_).substr(consumed_);
  if (rest.size() < kHeaderBytes) return std::nullopt;
  uint32_t length = GetU32(rest, 5);
  if (length > max_payload_) {
    *error = true;
    return std::nullopt;
  }
  if (rest.size() - kHeaderBytes < length) return std::nullopt;
  Frame frame{static_cast<Type>(rest[0]), GetU32(rest, 1),
              std::string(rest.substr(kHeaderBytes, length))};
  consumed_ += kHeaderBytes + length;
  // Compact once the consumed prefix dominates, so the buffer stays about one frame long.
  if (consumed_ > 64 * 1024 && consumed_ * 2 > buffer_.size()) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  return frame;
}

std::optional<UpEvent> DecodeUp(const Frame& frame) {
  UpEvent event;
  event.type = frame.type;
  event.id = frame.id;
  const std::string& p = frame.payload;
  bool channel_frame = frame.type == Type::kHello || frame.type == Type::kHeldEnd;
  if (channel_frame != (frame.id == 0)) return std::nullopt;
  auto valid_stream = [](uint8_t s) { return s == kStdout || s == kStderr; };
  switch (frame.type) {
    case Type::kHello:
    case Type::kStarted:
    case Type::kExit:
    case Type::kInputCredit:
      if (p.size() != 4) return std::nullopt;
      event.value = GetU32(p, 0);
      return event;
    case Type::kFailed:
      if (p.size() != 5 || static_cast<uint8_t>(p[4]) > 2) return std::nullopt;
      event.value = GetU32(p, 0);
      event.stream = static_cast<uint8_t>(p[4]);
      return event;
    case Type::kOutput:
      if (p.size() < 2 || p.size() > kMaxUpPayload) return std::nullopt;
      event.stream = static_cast<uint8_t>(p[0]) & ~kStarved;
      event.starved = (static_cast<uint8_t>(p[0]) & kStarved) != 0;
      if (!valid_stream(event.stream)) return std::nullopt;
      event.data = p.substr(1);
      return event;
    case Type::kEnd:
      if (p.size() != 1) return std::nullopt;
      event.stream = static_cast<uint8_t>(p[0]);
      if (!valid_stream(event.stream)) return std::nullopt;
      return event;
    case Type::kHeld: {
      auto held = DecodeHeld(p);
      if (!held) return std::nullopt;
      event.held = std::move(*held);
      return event;
    }
    case Type::kHeldEnd:
      if (!p.empty()) return std::nullopt;
      return event;
    case Type::kResumed: {
      auto offsets = DecodeOffsets(p);
      if (!offsets) return std::nullopt;
      event.out_offset = offsets->first;
      event.err_offset = offsets->second;
      return event;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace paseo::spawner
