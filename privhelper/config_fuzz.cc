// Fuzzes the config loader (LoadConfig): the input is helper.json, one profile and one
// deployment, NUL-separated (a NUL never belongs in JSON), written into a directory of the
// fuzzer's own. The loader decides what the privhelper may mount, so what it accepts must be
// what it validated: a load either fails with an InvalidArgument or NotFound that names the file
// it is about, or succeeds, and then loading the same files again gives the same config.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include <sys/stat.h>

#include "absl/strings/match.h"
#include "privhelper/config.h"

namespace {

void Check(bool ok) {
  if (!ok) abort();
}

const std::string& Dir() {
  static const std::string dir = [] {
    const char* base = getenv("TEST_TMPDIR");
    std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                       "/config_fuzz.XXXXXX";
    Check(mkdtemp(tmpl.data()) != nullptr);
    Check(mkdir((tmpl + "/profiles").c_str(), 0700) == 0);
    Check(mkdir((tmpl + "/deployments").c_str(), 0700) == 0);
    return tmpl;
  }();
  return dir;
}

void Write(const std::string& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  Check(out.good());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view parts[3];
  for (int i = 0; i < 3; ++i) {
    size_t nul = i < 2 ? in.find('\0') : std::string_view::npos;
    parts[i] = in.substr(0, nul);
    in = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
  }
  const std::string& dir = Dir();
  Write(dir + "/helper.json", parts[0]);
  Write(dir + "/profiles/p.json", parts[1]);
  Write(dir + "/deployments/d.json", parts[2]);
  paseo::HostResources host;
  host.cpus = 2;
  host.memory_bytes = 24ull << 30;
  host.threads_max = 190000;
  auto config = paseo::LoadConfig(dir, host);
  if (!config.ok()) {
    Check(config.status().code() == absl::StatusCode::kInvalidArgument ||
          config.status().code() == absl::StatusCode::kNotFound);
    Check(absl::StartsWith(config.status().message(), dir + "/"));
    return 0;
  }
  auto again = paseo::LoadConfig(dir, host);
  Check(again.ok() && (*config)->SameAs(**again));
  return 0;
}
