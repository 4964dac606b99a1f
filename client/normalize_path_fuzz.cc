// Fuzzes the CLI's path normalizer (NormalizePath) against the service's own test of a
// normalized path (IsNormalizedAbsolutePath, common/request_checks.h). The input is the typed
// path, a NUL, and the current directory. Checks: a path the service calls normalized comes
// back unchanged; what comes back from an absolute input, or from a relative one against an
// absolute current directory, is absolute and normalizing it again changes nothing; an
// absolute path means the same whatever the current directory; and the result is normalized
// unless the input kept a ".." (which the service refuses) or a NUL or was too long.
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "client/command_line.h"
#include "common/request_checks.h"

namespace {

void Check(bool ok) {
  if (!ok) abort();
}

bool HasDotDot(std::string_view path) {
  for (size_t start = 0; start <= path.size();) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (path.substr(start, slash - start) == "..") return true;
    start = slash + 1;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nul = in.find('\0');
  std::string_view typed = in.substr(0, nul);
  std::string_view cwd = nul == std::string_view::npos ? std::string_view("/home/u") : in.substr(nul + 1);
  // The current directory is what getcwd(3) gives: physical, so normalized when absolute. (A
  // finding had "/..//." here: not a directory the CLI can be in.)
  if (!cwd.empty() && cwd[0] == '/' && !paseo::IsNormalizedAbsolutePath(absl::string_view(cwd.data(), cwd.size())))
    cwd = "/home/u";

  std::string out = paseo::client::NormalizePath(typed, cwd);
  if (paseo::IsNormalizedAbsolutePath(absl::string_view(typed.data(), typed.size()))) Check(out == typed);
  bool absolute_cwd = !cwd.empty() && cwd[0] == '/';
  bool absolute = !typed.empty() && typed[0] == '/';
  if (absolute || absolute_cwd) {
    Check(!out.empty() && out[0] == '/');
    Check(paseo::client::NormalizePath(out, "/elsewhere") == out);
    Check(paseo::client::NormalizePath(out, "") == out);
  } else {
    Check(out == typed);  // nothing to normalize against: left for the service to refuse
  }
  if (absolute) Check(paseo::client::NormalizePath(typed, "/other/dir") == out);
  if ((absolute || absolute_cwd) && out.size() < PATH_MAX && out.find('\0') == std::string::npos &&
      !HasDotDot(out))
    Check(paseo::IsNormalizedAbsolutePath(absl::string_view(out)));
  return 0;
}
