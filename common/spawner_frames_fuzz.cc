// Fuzzes the spawner channel's framing in both directions: what a spawner inside a sandbox (or
// anything that took it over) sends the privhelper (FrameReader with kMaxUpPayload, DecodeUp),
// and what the spawner decodes from the privhelper (DecodeStart, DecodeGrant, DecodeOffsets).
// Checks that reassembly does not depend on how the bytes were split into reads, that a bad
// header stops the stream for good, that every event DecodeUp accepts has the shape the
// privhelper relies on, and that each payload decoder accepts exactly what its encoder writes:
// decoding, encoding again and decoding gives the same value, and the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/spawner_frames.h"

namespace {

namespace sp = paseo::spawner;

void Check(bool ok) {
  if (!ok) abort();
}

struct Read {
  std::vector<sp::Frame> frames;
  bool error = false;
};

Read Frames(std::string_view bytes, std::string_view cuts, size_t max_payload) {
  sp::FrameReader reader(max_payload);
  Read out;
  size_t at = 0, k = 0;
  while (at < bytes.size() && !out.error) {
    size_t n = cuts.empty() ? bytes.size() : 1 + static_cast<uint8_t>(cuts[k++ % cuts.size()]) % 64;
    n = std::min(n, bytes.size() - at);
    reader.Feed(bytes.substr(at, n));
    at += n;
    while (auto f = reader.Next(&out.error)) {
      Check(f->payload.size() <= max_payload);
      out.frames.push_back(std::move(*f));
    }
  }
  return out;
}

bool SameHeld(const sp::HeldProcess& a, const sp::HeldProcess& b) {
  return a.pid == b.pid && a.merged == b.merged && a.drop_oldest == b.drop_oldest &&
         a.input_closed == b.input_closed && a.out_eof == b.out_eof && a.err_eof == b.err_eof &&
         a.out_base == b.out_base && a.out_end == b.out_end && a.err_base == b.err_base &&
         a.err_end == b.err_end && a.name == b.name;
}

bool SameStart(const sp::StartRequest& a, const sp::StartRequest& b) {
  return a.merge_stderr == b.merge_stderr && a.cwd == b.cwd && a.argv == b.argv && a.env == b.env &&
         a.search_path == b.search_path && a.drop_oldest == b.drop_oldest && a.name == b.name;
}

// The payload of the one frame `encoded` is.
std::string PayloadOf(const std::string& encoded) {
  Check(encoded.size() >= sp::kHeaderBytes);
  return encoded.substr(sp::kHeaderBytes);
}

void Up(const sp::Frame& f) {
  auto event = sp::DecodeUp(f);
  if (!event) return;
  Check(event->type == f.type && event->id == f.id);
  Check((f.id == 0) == (f.type == sp::Type::kHello || f.type == sp::Type::kHeldEnd));
  switch (f.type) {
    case sp::Type::kOutput:
      Check(event->stream == sp::kStdout || event->stream == sp::kStderr);
      Check(!event->data.empty() && event->data.size() <= sp::kMaxOutputChunk);
      break;
    case sp::Type::kEnd:
      Check(event->stream == sp::kStdout || event->stream == sp::kStderr);
      break;
    case sp::Type::kHeld: {
      const sp::HeldProcess& h = event->held;
      Check(h.out_base <= h.out_end && h.err_base <= h.err_end);
      Check(!h.name.empty() && h.name.size() <= sp::kMaxNameBytes);
      Check(h.name.find('\0') == std::string::npos);
      Check(PayloadOf(sp::EncodeHeld(f.id, h)) == f.payload);
      break;
    }
    case sp::Type::kResumed:
      Check(PayloadOf(sp::EncodeOffsets(f.type, f.id, event->out_offset, event->err_offset)) ==
            f.payload);
      break;
    case sp::Type::kHello:
    case sp::Type::kStarted:
    case sp::Type::kExit:
    case sp::Type::kInputCredit:
      Check(PayloadOf(sp::EncodeU32(f.type, f.id, event->value)) == f.payload);
      break;
    case sp::Type::kFailed:
      Check(event->stream <= 2);
      break;
    case sp::Type::kHeldEnd:
      Check(f.payload.empty());
      break;
    default:
      Check(false);  // DecodeUp accepted a type the privhelper never gets
  }
}

void Down(const sp::Frame& f) {
  if (auto start = sp::DecodeStart(f.payload)) {
    for (const auto& s : start->argv) Check(s.find('\0') == std::string::npos);
    for (const auto& s : start->env) Check(s.find('\0') == std::string::npos);
    auto again = sp::EncodeStart(f.id, *start);
    Check(again.has_value());
    auto decoded = sp::DecodeStart(PayloadOf(*again));
    Check(decoded.has_value() && SameStart(*decoded, *start));
  }
  if (auto grant = sp::DecodeGrant(f.payload)) {
    Check(PayloadOf(sp::EncodeGrant(f.id, grant->stream, grant->bytes, grant->logged)) == f.payload);
  }
  if (auto offsets = sp::DecodeOffsets(f.payload)) {
    Check(PayloadOf(sp::EncodeOffsets(sp::Type::kResume, f.id, offsets->first, offsets->second)) ==
          f.payload);
  }
  if (auto held = sp::DecodeHeld(f.payload)) {
    auto again = sp::DecodeHeld(PayloadOf(sp::EncodeHeld(f.id, *held)));
    Check(again.has_value() && SameHeld(*again, *held));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t ncuts = std::min<size_t>(data[0] % 16, size - 1);
  std::string_view cuts(reinterpret_cast<const char*>(data + 1), ncuts);
  std::string_view bytes(reinterpret_cast<const char*>(data + 1 + ncuts), size - 1 - ncuts);
  for (size_t max : {sp::kMaxUpPayload, size_t{64}}) {
    Read whole = Frames(bytes, {}, max);
    Read pieces = Frames(bytes, cuts, max);
    Check(whole.error == pieces.error && whole.frames.size() == pieces.frames.size());
    for (size_t i = 0; i < whole.frames.size(); ++i) {
      Check(whole.frames[i].type == pieces.frames[i].type && whole.frames[i].id == pieces.frames[i].id &&
            whole.frames[i].payload == pieces.frames[i].payload);
    }
  }
  Read up = Frames(bytes, {}, sp::kMaxUpPayload);
  for (const auto& f : up.frames) {
    Up(f);
    Down(f);
  }
  // The payload alone, as each decoder would get it.
  Down(sp::Frame{sp::Type::kStart, 1, std::string(bytes)});
  return 0;
}
