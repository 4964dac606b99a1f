// See search_path.h.
#include "common/search_path.h"

namespace paseo {

std::string SearchPath(const std::vector<std::string>& tool_dirs,
                       const std::vector<std::string>& env) {
  const std::string* path = nullptr;
  for (const auto& e : env) {
    if (e.compare(0, 5, "PATH=") == 0) {
      path = &e;
      break;
    }
  }
  std::string rest = path != nullptr ? path->substr(5) : std::string(kDefaultSearchPath);
  std::string out;
  for (const auto& dir : tool_dirs) {
    if (!out.empty()) out += ':';
    out += dir;
  }
  // An empty rest adds no trailing ':', which would read as the working directory.
  if (!out.empty() && !rest.empty()) out += ':';
  return out + rest;
}

}  // namespace paseo
