// See git_source.h.
#include "runtime/git_source.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace paseo::runtime {
namespace {

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("git source: ", what));
}

bool IsHostLabel(absl::string_view label) {
  if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
    return false;
  for (char c : label) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<GitRemote> ParseGitUrl(const std::string& url) {
  GitRemote remote;
  absl::string_view rest = url;
  for (const char* scheme : {"https", "http", "git"}) {
    std::string prefix = absl::StrCat(scheme, "://");
    if (absl::StartsWith(rest, prefix)) {
      remote.scheme = scheme;
      rest.remove_prefix(prefix.size());
      break;
    }
  }
  if (remote.scheme.empty())
    return Invalid(absl::StrCat("url \"", url,
                                "\": only https://, http:// and git:// URLs are supported"));
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return Invalid("url holds a space or a control character");
  }
  absl::string_view authority = rest.substr(0, rest.find('/'));
  if (authority.find('@') != absl::string_view::npos)
    return Invalid("url carries a user name or password: register a credential instead "
                   "(docs/paseo.md, \"Git sources\")");
  absl::string_view host = authority;
  remote.port = remote.scheme == "https" ? 443 : remote.scheme == "http" ? 80 : 9418;
  if (size_t colon = authority.rfind(':'); colon != absl::string_view::npos) {
    host = authority.substr(0, colon);
    uint32_t port = 0;
    if (!absl::SimpleAtoi(authority.substr(colon + 1), &port) || port == 0 || port > 65535)
      return Invalid(absl::StrCat("url \"", url, "\": bad port"));
    remote.port = static_cast<uint16_t>(port);
  }
  if (host.empty() || host.size() > 253) return Invalid(absl::StrCat("url \"", url, "\": no host"));
  bool all_numeric = true;
  for (absl::string_view label : absl::StrSplit(host, '.')) {
    if (!IsHostLabel(label))
      return Invalid(absl::StrCat("url \"", url, "\": the host must be a DNS name"));
    all_numeric &= label.find_first_not_of("0123456789") == absl::string_view::npos;
  }
  // A sandbox reaches names its profile allows, never bare addresses.
  if (all_numeric) return Invalid(absl::StrCat("url \"", url, "\": the host must be a DNS name"));
  remote.host = absl::AsciiStrToLower(host);
  return remote;
}

absl::Status CheckGitSource(const GitSource& source) {
  if (auto remote = ParseGitUrl(source.url); !remote.ok()) return remote.status();
  if (source.revision.empty()) return Invalid("revision is empty");
  if (source.revision.front() == '-') return Invalid("revision may not start with '-'");
  for (char c : source.revision) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return Invalid("revision holds a space or a control character");
  }
  if (source.subdirectory) {
    const std::string& sub = *source.subdirectory;
    if (sub.empty() || sub.front() == '/' || sub.back() == '/')
      return Invalid("subdirectory must be a relative path without a trailing '/'");
    for (absl::string_view part : absl::StrSplit(sub, '/')) {
      if (part.empty() || part == "." || part == "..")
        return Invalid("subdirectory must be normalized and stay in the repository");
    }
    for (char c : sub) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
        return Invalid("subdirectory holds a control character");
    }
  }
  return absl::OkStatus();
}

namespace {
// '%', '#' and ':' percent-escaped, so the label's separators are unambiguous.
std::string EscapePart(absl::string_view part) {
  std::string out;
  for (char c : part) {
    if (c == '%') out += "%25";
    else if (c == '#') out += "%23";
    else if (c == ':') out += "%3A";
    else out += c;
  }
  return out;
}
}  // namespace

std::string GitSourceLabel(const GitSource& source) {
  // The URL keeps its "scheme://": only its own '#', '%' (and ':' after the scheme) are escaped.
  size_t scheme = source.url.find("://");
  std::string url = scheme == std::string::npos
                        ? EscapePart(source.url)
                        : source.url.substr(0, scheme + 3) + EscapePart(source.url.substr(scheme + 3));
  std::string label = absl::StrCat("git:", url, "#", EscapePart(source.revision));
  if (source.subdirectory) absl::StrAppend(&label, ":", EscapePart(*source.subdirectory));
  return label;
}

bool AllowsRemote(const std::vector<std::pair<std::string, std::vector<uint16_t>>>& allow_names,
                  const GitRemote& remote) {
  for (const auto& [name, ports] : allow_names) {
    std::string pattern = absl::AsciiStrToLower(name);
    bool matches = pattern == remote.host;
    if (absl::StartsWith(pattern, "*.")) {
      std::string suffix = pattern.substr(1);
      matches = remote.host.size() > suffix.size() && absl::EndsWith(remote.host, suffix);
    }
    if (!matches) continue;
    for (uint16_t p : ports) {
      if (p == remote.port) return true;
    }
  }
  return false;
}

std::vector<std::string> GitCloneArgv(const GitSource& source) {
  // A server that stops sending (under 1 KB/s for a minute) ends the clone; the runtime's own
  // deadline bounds the rest.
  return {"git",           "-c",      "credential.helper=store", "-c", "http.lowSpeedLimit=1000",
          "-c",            "http.lowSpeedTime=60", "clone", "--quiet", "--no-checkout", "--",
          source.url,      "."};
}

std::vector<std::string> GitCheckoutArgv(const GitSource& source) {
  return {"git", "checkout", "--quiet", source.revision, "--"};
}

std::vector<std::string> GitEnvironment() {
  return {"GIT_TERMINAL_PROMPT=0", "LC_ALL=C"};
}

}  // namespace paseo::runtime
