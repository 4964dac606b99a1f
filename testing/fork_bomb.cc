// The harshest fork bomb, for testing/resource_limits_test: every process forks forever and
// retries every failed fork, so all of them stay runnable. Static, so it runs in any rootfs.
#include <unistd.h>

int main() {
  for (;;) fork();
}
