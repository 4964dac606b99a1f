// See request_checks.h.
#include "common/request_checks.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace paseo {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

absl::string_view View(capnp::Text::Reader t) { return absl::string_view(t.begin(), t.size()); }

}  // namespace

bool HasNul(capnp::Text::Reader text) {
  return std::find(text.begin(), text.end(), '\0') != text.end();
}

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
      return false;
    i += len;
  }
  return true;
}

absl::Status CheckName(absl::string_view field, capnp::Text::Reader text) {
  if (HasNul(text)) return Invalid(field, "contains a NUL byte");
  if (!IsValidUtf8(View(text))) return Invalid(field, "is not valid UTF-8");
  return absl::OkStatus();
}

bool IsNormalizedAbsolutePath(absl::string_view path) {
  if (path.empty() || path[0] != '/' || path.size() > 4095) return false;
  if (path == "/") return true;
  if (path.back() == '/') return false;
  for (absl::string_view part : absl::StrSplit(path.substr(1), '/')) {
    if (part.empty() || part == "." || part == "..") return false;
    if (part.find('\0') != absl::string_view::npos) return false;
  }
  return true;
}

absl::Status CheckSignal(int sig) {
  if (sig < 1 || sig > 64) return Invalid("signal", "must be 1..64");
  return absl::OkStatus();
}

absl::Status CheckTerminalSize(uint32_t rows, uint32_t cols) {
  if (rows == 0 || cols == 0)
    return Invalid("rows", "a terminal needs at least one row and one column");
  return absl::OkStatus();
}

absl::StatusOr<std::string> ChooseProfile(const std::vector<std::string>& allowed,
                                          absl::string_view requested,
                                          absl::string_view deployment_id) {
  if (allowed.empty())
    return absl::PermissionDeniedError(
        absl::StrCat("deployment ", deployment_id, " may use no profile"));
  std::string profile = requested.empty() ? allowed[0] : std::string(requested);
  if (std::find(allowed.begin(), allowed.end(), profile) == allowed.end() ||
      profile.find('\0') != std::string::npos)
    return absl::PermissionDeniedError(absl::StrCat(
        "profile: deployment ", deployment_id, " may not use profile \"", profile, "\""));
  return profile;
}

absl::Status CheckLabels(const std::vector<LabelView>& labels) {
  if (labels.size() > kMaxLabels) return Invalid("labels", "too many labels");
  for (const auto& l : labels) {
    if (l.key.size() > kMaxLabelBytes || l.value.size() > kMaxLabelBytes)
      return Invalid("labels", "label too long");
    absl::Status key = CheckName("labels.key", l.key);
    if (!key.ok()) return key;
    absl::Status value = CheckName("labels.value", l.value);
    if (!value.ok()) return value;
  }
  return absl::OkStatus();
}

absl::Status CheckKey(absl::string_view field, capnp::Text::Reader key) {
  if (key.size() > kMaxKeyBytes) return Invalid(field, "longer than 256 bytes");
  return CheckName(field, key);
}

absl::StatusOr<std::optional<std::string>> CheckWorkspaceCwd(capnp::Text::Reader workspace_cwd,
                                                             capnp::Text::Reader cwd) {
  if (workspace_cwd.size() == 0) return std::optional<std::string>();
  if (cwd.size() > 0) return Invalid("workspaceCwd", "cwd must be empty when workspaceCwd is set");
  if (workspace_cwd.size() > kMaxWorkspaceCwdBytes)
    return Invalid("workspaceCwd", "longer than 4095 bytes");
  absl::Status name = CheckName("workspaceCwd", workspace_cwd);
  if (!name.ok()) return name;
  absl::string_view path = View(workspace_cwd);
  if (path[0] == '/')
    return Invalid("workspaceCwd", "must be relative to the workspace, not absolute");
  std::string normalized;
  int depth = 0;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == ".") continue;
    depth += part == ".." ? -1 : 1;
    if (depth < 0) return Invalid("workspaceCwd", "\"..\" leaves the workspace");
    absl::StrAppend(&normalized, normalized.empty() ? "" : "/", part);
  }
  return std::optional<std::string>(std::move(normalized));
}

absl::StatusOr<ProcessCommand> CheckProcessCommand(capnp::List<capnp::Text>::Reader argv,
                                                   capnp::List<capnp::Text>::Reader env,
                                                   capnp::Text::Reader cwd, bool tty,
                                                   uint16_t rows, uint16_t cols) {
  ProcessCommand out;
  if (argv.size() == 0) return Invalid("argv", "must not be empty");
  if (argv.size() > kMaxArgs) return Invalid("argv", "too many arguments");
  if (env.size() > kMaxEnv) return Invalid("env", "too many entries");
  size_t total = 0;
  for (auto a : argv) {
    if (HasNul(a)) return Invalid("argv", "contains a NUL byte");
    total += a.size() + 1;
    if (total > kMaxArgvBytes) return Invalid("argv", "argv and env exceed 1 MiB");
    out.argv.emplace_back(View(a));
  }
  if (out.argv[0].empty()) return Invalid("argv[0]", "must not be empty");
  for (auto e : env) {
    absl::string_view entry = View(e);
    size_t eq = entry.find('=');
    if (HasNul(e) || eq == absl::string_view::npos || eq == 0)
      return Invalid("env", "entries must be KEY=VALUE without NUL bytes");
    // The supervisor's word to its in-sandbox shim (privhelper/bundle.h ShimEnv): a client's
    // entry of such a name would reach the shim, or (runsc keeps one entry per name) be lost.
    if (absl::StartsWith(entry, kReservedEnvPrefix))
      return Invalid("env", absl::StrCat("names beginning with ", kReservedEnvPrefix,
                                         " are reserved for the supervisor"));
    total += e.size() + 1;
    if (total > kMaxArgvBytes) return Invalid("argv", "argv and env exceed 1 MiB");
    out.env.emplace_back(entry);
  }
  out.tty = tty;
  if (tty) {
    absl::Status size = CheckTerminalSize(rows, cols);
    if (!size.ok()) return size;
    out.rows = rows;
    out.cols = cols;
  }
  if (cwd.size() > 0) {
    if (HasNul(cwd) || !IsNormalizedAbsolutePath(View(cwd)))
      return Invalid("cwd", "must be a normalized absolute path");
    out.cwd = std::string(View(cwd));
  }
  return out;
}

}  // namespace paseo
