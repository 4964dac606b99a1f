// The framed control channel between the privhelper and the spawner inside a sandbox (the
// shim's `spawner` mode, sandbox/shim.cc): the spawner starts the sandbox's processes with a
// fork/exec of its own instead of a `runsc exec` each (docs/decisions.md), and relays their
// stdio over this one channel.
//
// A frame is a 9-byte header -- type (1 byte), process id (big-endian 32-bit, issued by the
// privhelper; 0 for the channel itself), payload length (big-endian 32-bit) -- and the payload.
// Everything the spawner sends comes from inside the sandbox: the privhelper decodes it with
// DecodeUp, which accepts only the types and exact payload shapes below and at most
// kMaxUpPayload bytes of payload; anything else ends the channel.
//
// Flow control: output is sent only against credit the privhelper granted per stream (kGrant),
// and it grants more only once it has written what it got into the broker's pipe, so a process
// whose reader is slow stops only itself. A stream starts with kInitialOutputWindow of credit;
// the privhelper widens the window of a stream its reader keeps up with (up to
// kMaxOutputWindow, within a per-channel budget, privhelper/spawner_channel.h), since one
// window per round trip is what a stream can move. Input runs the other way against credit the
// spawner grants (kInputCredit).
//
// Reattach (version 3, docs/decisions.md 54): the spawner outlives its channel. When the channel
// ends it keeps its children and what they write (within kMaxRetainedBytes per stream), and
// listens on the in-sandbox abstract Unix socket kAttachSocket for a new one: a `runsc exec` of
// `shim attach` hands it its stdin and stdout (SCM_RIGHTS), whose first frame must be kAttach
// with the key the privhelper gave on the first channel (kKey). The spawner then says hello,
// lists what it holds (kHeld ... kHeldEnd), and continues each process once the privhelper
// says from which byte offset of each stream (kResume -> kResumed): the offsets are the
// stream's own, from the process's start, so output continues exactly after what the broker's
// log holds. Until its channel's kGrant says a byte is in the broker's log (`logged`), the
// spawner keeps it: at most the widest window plus one broker pipe is ever in flight.
//
// Stable across versions, so that a privhelper and a spawner of different versions can tell
// each other so: kHello (version, u32), kAttach (key), kDropAll.
//
// Only the C++ standard library: the shim links this statically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace paseo::spawner {

// 2: a start carries the search path its program is looked up in (StartRequest.search_path).
// 3: reattach (kKey, kAttach, kHeld, kResume, kRelease, kDropAll; kGrant carries `logged`; a
// start carries its process's name and whether its output may drop the oldest bytes).
inline constexpr uint32_t kVersion = 3;
inline constexpr size_t kHeaderBytes = 9;
// Spawner -> privhelper: the most any one frame may carry (an output chunk and its stream byte).
inline constexpr size_t kMaxOutputChunk = 128 * 1024;
inline constexpr size_t kMaxUpPayload = kMaxOutputChunk + 1;
// Privhelper -> spawner: a start carries argv, env and cwd (request_checks.h bounds argv and
// env to 1 MiB each side; a command that does not fit goes through `runsc exec` instead).
inline constexpr size_t kMaxDownPayload = 4 << 20;
inline constexpr size_t kMaxInputChunk = 16 * 1024;
// Credit each output stream starts with, the most it may ever hold, and each process's stdin.
inline constexpr uint32_t kInitialOutputWindow = 32 * 1024;
inline constexpr uint32_t kMaxOutputWindow = 1024 * 1024;
inline constexpr uint32_t kInputWindow = 32 * 1024;
// What a spawner keeps of each output stream beyond what the broker's log holds: the widest
// window (what the privhelper may hold unwritten) plus one broker pipe (what the broker may not
// have read yet), plus a chunk. A drop-oldest stream whose channel is down keeps its newest
// kMaxRetainedBytes; a lossless one stops reading there, so its writer waits.
inline constexpr uint64_t kMaxRetainedBytes = 2 * uint64_t{kMaxOutputWindow} + kMaxOutputChunk;
// The key a reattach must present, and the name the spawner listens on (abstract namespace:
// no file a process in the sandbox could replace).
inline constexpr size_t kKeyBytes = 32;
inline constexpr char kAttachSocket[] = "paseo-spawner-v3";
// The longest process name (the privhelper's process id) a start or a held process carries.
inline constexpr size_t kMaxNameBytes = 128;

enum class Type : uint8_t {
  // privhelper -> spawner
  kStart = 'S',     // payload: StartRequest (EncodeStart)
  kInput = 'I',     // payload: bytes for the process's stdin
  kCloseInput = 'C',  // payload: none
  kSignal = 'K',    // payload: signal (u32)
  kGrant = 'G',     // payload: stream (u8: 1 stdout, 2 stderr), bytes (u32)
  kExitSpawner = 'Q',  // id 0, payload: none: kill every process and exit (as the sandbox's
                       // init, this ends the sandbox)
  kKey = 'Y',       // id 0, payload: kKeyBytes: what a later kAttach must carry (first channel)
  kAttach = 'A',    // id 0, payload: the key: the first frame of a reattached channel (stable)
  kResume = 'R',    // payload: stdout offset (u64), stderr offset (u64): continue from there
  kRelease = 'L',   // payload: none: forget the (ended) process; its pipes close
  kDropAll = 'D',   // id 0, payload: none: kill and forget every process held (stable)
  // spawner -> privhelper
  kHello = 'H',     // id 0; payload: version (u32)
  kStarted = 'P',   // payload: pid inside the sandbox (u32)
  kFailed = 'F',    // payload: errno (u32), stage (u8: 0 fork, 1 chdir, 2 exec)
  kOutput = 'O',    // payload: stream (u8, | kStarved), bytes (1..kMaxOutputChunk)
  kEnd = 'Z',       // payload: stream (u8): it reached end-of-file
  kExit = 'X',      // payload: wait status (u32)
  kInputCredit = 'W',  // payload: bytes (u32) the process took from its stdin
  kHeld = 'E',      // after a reattached hello: a process it holds (EncodeHeld)
  kHeldEnd = 'N',   // id 0, payload: none: that was every one
  kResumed = 'M',   // payload: stdout offset (u64), stderr offset (u64) its output starts at now
};

inline constexpr uint8_t kStdout = 1;
inline constexpr uint8_t kStderr = 2;
// Or'd into an output frame's stream byte: this chunk used the stream's last credit, so the
// spawner stops reading it until a grant arrives (a hint that the window is what limits it).
inline constexpr uint8_t kStarved = 0x80;

struct Frame {
  Type type;
  uint32_t id = 0;
  std::string payload;
};

std::string Encode(Type type, uint32_t id, std::string_view payload);
std::string EncodeU32(Type type, uint32_t id, uint32_t value);
// kGrant: `bytes` more credit for `stream`, and every byte before `logged` is in the broker's
// log (the spawner may forget it).
std::string EncodeGrant(uint32_t id, uint8_t stream, uint32_t bytes, uint64_t logged);
struct Grant {
  uint8_t stream;
  uint32_t bytes;
  uint64_t logged;
};
std::optional<Grant> DecodeGrant(std::string_view payload);
// kResume and kResumed: one offset per stream.
std::string EncodeOffsets(Type type, uint32_t id, uint64_t out, uint64_t err);
std::optional<std::pair<uint64_t, uint64_t>> DecodeOffsets(std::string_view payload);

// What a reattached spawner says of each process it holds. Offsets are the stream's own: base is
// the oldest byte it still has, end the next it will read.
struct HeldProcess {
  uint32_t pid = 0;
  bool merged = false;        // a tty relay: one stream
  bool drop_oldest = false;   // its output may drop the oldest bytes (else lossless)
  bool input_closed = false;  // its stdin was closed (or it ended)
  bool out_eof = false, err_eof = false;  // the stream reached end-of-file
  uint64_t out_base = 0, out_end = 0, err_base = 0, err_end = 0;
  std::string name;
};
std::string EncodeHeld(uint32_t id, const HeldProcess& held);
// nullopt unless well-formed: known flags only, base <= end, a name of 1..kMaxNameBytes bytes
// without NUL, nothing after it.
std::optional<HeldProcess> DecodeHeld(std::string_view payload);

struct StartRequest {
  bool merge_stderr = false;  // a tty relay: its stderr joins stdout (one pty stream)
  std::string cwd;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  // Where argv[0] without a '/' is looked up, a PATH value: the sandbox's tool directories, then
  // env's PATH (or the fixed default without one). Separate from env, which the program gets
  // exactly as sent.
  std::string search_path;
  // Its output may drop the oldest bytes while the channel is down (api.capnp dropOldest);
  // otherwise the spawner stops reading it, and the process waits.
  bool drop_oldest = false;
  // The privhelper's process id, said back on a reattach (at most kMaxNameBytes).
  std::string name;
};
// nullopt if it would exceed kMaxDownPayload.
std::optional<std::string> EncodeStart(uint32_t id, const StartRequest& request);
// nullopt unless `payload` is exactly one well-formed start without NULs in any string.
std::optional<StartRequest> DecodeStart(std::string_view payload);

// Reassembles frames from a byte stream read in arbitrary pieces. A header announcing more than
// `max_payload` bytes is an error (the stream is then unusable).
class FrameReader {
 public:
  explicit FrameReader(size_t max_payload) : max_payload_(max_payload) {}
  void Feed(std::string_view bytes) { buffer_.append(bytes); }
  // The next complete frame; nullopt when none is complete yet. Sets *error on a bad header.
  std::optional<Frame> Next(bool* error);
  size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  size_t max_payload_;
  std::string buffer_;
  size_t consumed_ = 0;
};

// What the spawner said, checked for shape (not yet against what the privhelper issued).
struct UpEvent {
  Type type;
  uint32_t id = 0;
  uint32_t value = 0;  // version, pid, errno, wait status, credit bytes
  uint8_t stream = 0;  // kOutput, kEnd; stage for kFailed
  bool starved = false;  // kOutput: kStarved was set
  std::string data;    // kOutput
  HeldProcess held;    // kHeld
  uint64_t out_offset = 0, err_offset = 0;  // kResumed
};
// nullopt for an unknown type, a payload of the wrong size, a stream other than 1 or 2, an
// empty or oversized output chunk, a malformed held process, or a frame with id 0 other than
// kHello and kHeldEnd (and those with another id).
std::optional<UpEvent> DecodeUp(const Frame& frame);

}  // namespace paseo::spawner
