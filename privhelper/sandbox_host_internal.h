// What the files of SandboxHost (sandbox_host.h) share: small helpers for files the privhelper
// writes, pipes, runsc results, records and runsc's state file. Internal to privhelper/.
#pragma once


#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <kj/debug.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/dir_entries.h"
#include "common/ids.h"
#include "common/rpc_errors.h"
#include "common/search_path.h"
#include "common/status.h"
#include "privhelper/bundle.h"
#include "privhelper/exit_status.h"
#include "privhelper/rootfs_overlay.h"
#include "privhelper/sandbox_identity.h"
#include "privhelper/workspace_resolver.h"
#include "schema/records.capnp.h"

#include "privhelper/sandbox_host.h"

namespace paseo::host_internal {

// Writes a file the privhelper generated, root-only, refusing to follow or reuse anything.
inline absl::Status WriteNewFile(const std::string& path, const std::string& content,
                          mode_t mode = 0600) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus("create", path);
  kj::AutoCloseFd owned(fd);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

struct Pipe {
  kj::AutoCloseFd read, write;
};

inline absl::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", "");
  return Pipe{kj::AutoCloseFd(fds[0]), kj::AutoCloseFd(fds[1])};
}

// A close-on-exec duplicate (above stdio), or no fd for no fd.
inline kj::AutoCloseFd Dup(const kj::AutoCloseFd& fd) {
  return fd.get() < 0 ? kj::AutoCloseFd() : kj::AutoCloseFd(fcntl(fd.get(), F_DUPFD_CLOEXEC, 3));
}

// Ok if runsc succeeded; else an error of `code` whose message ends with what runsc said.
inline absl::Status RunscStatus(const RunscResult& result, absl::StatusCode code,
                         absl::string_view context) {
  if (result.ok()) return absl::OkStatus();
  return absl::Status(code, absl::StrCat(context, result.Describe()));
}

// The host's asynchronous errors carry the same reason tokens as its synchronous ones.
inline kj::Promise<void> Settle(const absl::Status& status) {
  if (status.ok()) return kj::READY_NOW;
  return StatusToException(status);
}

// The pid `runsc exec` wrote for its process (inside the sandbox's pid namespace).
inline absl::StatusOr<long> ReadInternalPid(const std::string& pid_file) {
  std::ifstream in(pid_file);
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return absl::UnavailableError("process is still starting; retry");
  return pid;
}

// What a restarted privhelper reads to know what a surviving container is.
inline std::string RenderRecord(const std::string& id, const std::string& deployment,
                         const std::string& profile, uid_t uid, gid_t gid,
                         const std::string& default_cwd, const std::string& home,
                         int64_t created_ms, const std::string& network_block,
                         const std::vector<std::string>& kept, bool deleting = false) {
  capnp::MallocMessageBuilder message;
  auto record = message.initRoot<records::SandboxRecord>();
  record.setId(id);
  record.setDeploymentId(deployment);
  record.setProfile(profile);
  record.setUid(uid);
  record.setGid(gid);
  record.setDefaultCwd(default_cwd);
  record.setHome(home);
  record.setCreatedAtUnixMs(created_ms);
  record.setNetworkBlock(network_block);
  record.setDeleting(deleting);
  auto k = record.initKept(static_cast<unsigned>(kept.size()));
  for (unsigned i = 0; i < kept.size(); ++i) k.set(i, kept[i]);
  capnp::JsonCodec codec;
  auto text = codec.encode(record.asReader());
  return std::string(text.cStr(), text.size());
}

inline absl::StatusOr<records::SandboxRecord::Reader> ReadRecord(const std::string& path,
                                                          capnp::MallocMessageBuilder& message) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(path + ": no record");
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  capnp::JsonCodec codec;
  auto root = message.initRoot<records::SandboxRecord>();
  auto error = kj::runCatchingExceptions(
      [&] { codec.decode(kj::ArrayPtr<const char>(s.data(), s.size()), root); });
  if (error != nullptr) return absl::InvalidArgumentError(path + ": unreadable record");
  return root.asReader();
}

inline int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A JSON object's top-level fields (capnp's codec, as for `runsc list`); nullopt if `text` is
// not one.
inline std::optional<std::map<std::string, capnp::JsonValue::Reader>> JsonFields(
    const std::string& text, capnp::MallocMessageBuilder& message) {
  auto root = message.initRoot<capnp::JsonValue>();
  capnp::JsonCodec codec;
  auto error = kj::runCatchingExceptions(
      [&] { codec.decodeRaw(kj::ArrayPtr<const char>(text.data(), text.size()), root); });
  if (error != nullptr || !root.isObject()) return std::nullopt;
  std::map<std::string, capnp::JsonValue::Reader> fields;
  for (auto field : root.asReader().getObject())
    fields.emplace(field.getName().cStr(), field.getValue());
  return fields;
}

// A sandbox's two host processes, from runsc's own record of the container,
// <runsc root>/<id>_sandbox:<id>.state (root-only, written by the pinned runsc): "sandbox":
// {"pid": N} is the sentry (runsc-sandbox `boot`; `runsc state` reports the same pid, measured
// on 20221219) and "goferPid" the gofer, which `runsc state` does not report. Read from the file
// because a `runsc state` costs a runsc process, about 30 ms on the create path. 0 for what is
// not there; the pids are checked against the sandbox's cgroup before they are believed.
struct HostPids {
  pid_t sentry = 0;
  pid_t gofer = 0;
};

inline HostPids ReadHostPids(const std::string& state_file) {
  std::ifstream in(state_file);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  HostPids pids;
  if (text.size() > (1 << 20)) return pids;
  capnp::MallocMessageBuilder message;
  auto fields = JsonFields(text, message);
  if (!fields) return pids;
  auto number = [](std::map<std::string, capnp::JsonValue::Reader>& f, const char* name) {
    auto it = f.find(name);
    return it != f.end() && it->second.isNumber() ? static_cast<pid_t>(it->second.getNumber()) : 0;
  };
  pids.gofer = number(*fields, "goferPid");
  auto sandbox = fields->find("sandbox");
  if (sandbox != fields->end() && sandbox->second.isObject()) {
    std::map<std::string, capnp::JsonValue::Reader> inner;
    for (auto f : sandbox->second.getObject()) inner.emplace(f.getName().cStr(), f.getValue());
    pids.sentry = number(inner, "pid");
  }
  return pids;
}

// <bundle>/spawner.key: the key a reattach presents (hex), and whether the spawner is the init.
inline constexpr char kSpawnerKeyFile[] = "/spawner.key";

inline std::string ToHex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

inline std::optional<std::string> FromHex(const std::string& hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

struct SpawnerKey {
  std::string key;
  bool is_init = false;
};

// What the bundle says of the sandbox's spawner; nullopt without a (well-formed) key file.
inline std::optional<SpawnerKey> ReadSpawnerKey(const std::string& bundle_dir) {
  std::ifstream in(bundle_dir + kSpawnerKeyFile);
  std::string hex, role;
  if (!(in >> hex >> role)) return std::nullopt;
  auto key = FromHex(hex);
  if (!key || key->size() != spawner::kKeyBytes || (role != "init" && role != "exec"))
    return std::nullopt;
  return SpawnerKey{*key, role == "init"};
}

inline constexpr char kSentryExited[] = "its gVisor kernel (runsc-sandbox) exited";
inline constexpr char kGoferExited[] = "its gVisor file server (runsc-gofer) exited";

// " (killed by signal 9)", " (exit status 2)", or "" if the status is unknown.
inline std::string DescribeWaitStatus(std::optional<int> status) {
  if (!status) return "";
  if (WIFSIGNALED(*status)) return absl::StrCat(" (killed by signal ", WTERMSIG(*status), ")");
  if (WIFEXITED(*status)) return absl::StrCat(" (exit status ", WEXITSTATUS(*status), ")");
  return "";
}

// Why a sandbox stopped, from which of its processes was seen to exit first and their statuses.
// Either one's death takes the other (measured: a killed sentry's gofer exits 0 within 3 ms; a
// killed gofer's sentry exits 137), so both may be seen at once, in either order: a killed one
// is the cause rather than one that exited by itself.
inline std::string DescribeStop(bool sentry_first, std::optional<int> sentry, std::optional<int> gofer) {
  auto killed = [](std::optional<int> s) { return s && WIFSIGNALED(*s); };
  bool sentry_caused = sentry_first ? !(killed(gofer) && !killed(sentry))
                                    : killed(sentry) && !killed(gofer);
  return sentry_caused ? absl::StrCat(kSentryExited, DescribeWaitStatus(sentry))
                       : absl::StrCat(kGoferExited, DescribeWaitStatus(gofer));
}

}  // namespace paseo::host_internal
