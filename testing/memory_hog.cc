// A memory hog for testing/resource_limits_test: takes memory 64 MiB at a time and touches every
// page, never giving any back, until the sandbox's memory limit ends it. Static, so it runs in
// any rootfs.
#include <cstdlib>
#include <cstring>

int main() {
  constexpr size_t kChunk = size_t{64} << 20;
  for (;;) {
    void* p = std::malloc(kChunk);
    if (p != nullptr) std::memset(p, 1, kChunk);
  }
}
