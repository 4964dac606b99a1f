// See unkept.h.
#include "sandbox/unkept.h"

#include <sys/stat.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace paseo::shim {
namespace {

std::string ReadSmallFile(const char* path) {
  std::string out;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0 && out.size() < (1 << 20);)
    out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    if (nl > at) out.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

bool IsUnder(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

// mountinfo escapes space, tab, newline and backslash as \ooo (three octal digits).
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    bool octal = s[i] == '\\' && i + 3 < s.size();
    for (size_t k = 1; octal && k <= 3; ++k) octal = s[i + k] >= '0' && s[i + k] <= '7';
    if (octal) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct Mount {
  std::string point;
  bool writable = false;
  bool kernel = false;  // proc, sysfs, devpts, ...: nothing a command keeps files in
};

std::vector<Mount> Mounts() {
  std::vector<Mount> out;
  for (const auto& line : Lines(ReadSmallFile("/proc/self/mountinfo"))) {
    // id parent major:minor root point options [optional...] - type source super-options
    std::vector<std::string> f;
    size_t at = 0;
    while (at <= line.size()) {
      size_t sp = line.find(' ', at);
      if (sp == std::string::npos) sp = line.size();
      f.push_back(line.substr(at, sp - at));
      at = sp + 1;
    }
    if (f.size() < 7) continue;
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 1 >= f.size()) continue;
    Mount m;
    m.point = Unescape(f[4]);
    m.writable = f[5] == "rw" || f[5].compare(0, 3, "rw,") == 0;
    const std::string& type = f[dash + 1];
    for (const char* k : {"proc", "sysfs", "devpts", "cgroup", "cgroup2", "mqueue", "devtmpfs",
                          "securityfs", "debugfs", "tracefs", "binfmt_misc"}) {
      if (type == k) m.kernel = true;
    }
    out.push_back(m);
  }
  return out;
}

long MillisSince(const timespec& t0) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
}

bool ChangedSince(const struct stat& st, const timespec& since) {
  const timespec& c = st.st_ctim;
  return c.tv_sec > since.tv_sec || (c.tv_sec == since.tv_sec && c.tv_nsec >= since.tv_nsec);
}

}  // namespace

UnkeptReport FindUnkept(const timespec& since) {
  UnkeptReport report;
  report.kept = Lines(ReadSmallFile("/.paseo/kept"));
  timespec started;
  clock_gettime(CLOCK_MONOTONIC, &started);
  std::vector<Mount> mounts = Mounts();
  auto skipped = [&](const std::string& path) {
    for (const auto& k : report.kept) {
      if (IsUnder(path, k)) return true;
    }
    return IsUnder(path, "/proc") || IsUnder(path, "/sys") || IsUnder(path, "/.paseo") ||
           path == "/dev" || IsUnder(path, "/dev/pts");
  };
  // Mount points are walked as their own roots (or not at all), never from their parent.
  auto is_mount_point = [&](const std::string& path) {
    for (const auto& m : mounts) {
      if (m.point == path) return true;
    }
    return false;
  };
  size_t entries = 0;
  for (const auto& m : mounts) {
    if (!m.writable || m.kernel || skipped(m.point)) continue;
    std::vector<std::string> stack = {m.point};
    while (!stack.empty()) {
      std::string dir = stack.back();
      stack.pop_back();
      DIR* d = opendir(dir.c_str());
      if (d == nullptr) continue;
      while (dirent* e = readdir(d)) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        std::string path = dir == "/" ? "/" + std::string(e->d_name) : dir + "/" + e->d_name;
        if (++entries > kMaxUnkeptEntries || MillisSince(started) > kMaxUnkeptMillis) {
          report.truncated = true;
          break;
        }
        if (skipped(path) || is_mount_point(path)) continue;
        struct stat st;
        if (lstat(path.c_str(), &st) != 0) continue;
        if (ChangedSince(st, since)) {
          if (report.paths.size() >= kMaxUnkeptPaths) {
            report.truncated = true;
            break;
          }
          report.paths.push_back(path);
          continue;  // it stands for what is beneath it
        }
        if (S_ISDIR(st.st_mode)) stack.push_back(path);
      }
      closedir(d);
      if (report.truncated) return report;
    }
  }
  return report;
}

std::string FormatUnkept(const UnkeptReport& report) {
  if (report.paths.empty() && !report.truncated) return "";
  std::string kept;
  for (const auto& k : report.kept) kept += (kept.empty() ? "" : ", ") + k;
  std::string out = "paseo-sandbox: not kept: written outside the kept directories (" +
                    (kept.empty() ? std::string("none") : kept) +
                    "); these go with the sandbox:\n";
  for (const auto& p : report.paths) out += "paseo-sandbox:   " + p + "\n";
  if (report.truncated) out += "paseo-sandbox:   ... (stopped looking; there may be more)\n";
  return out;
}

}  // namespace paseo::shim
