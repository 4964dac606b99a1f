// Bounded waits for the root suites that drive the API in-process: one event loop per test
// process, and Await(), which races a promise against a timer so a hang fails the test in
// seconds with what it waited for, instead of running into Bazel's timeout.
#pragma once

#include <string>

#include <kj/async-io.h>

namespace paseo::testing {

inline kj::AsyncIoContext& Io() {
  static kj::AsyncIoContext* io = new kj::AsyncIoContext(kj::setupAsyncIo());
  return *io;
}

// Calls answer in well under a second here; a process or stream that needs longer says so.
inline constexpr int kCallSeconds = 60;

template <typename T>
T Await(kj::Promise<T>&& promise, const std::string& what, int seconds = kCallSeconds) {
  auto timeout = Io().provider->getTimer()
                     .afterDelay(seconds * kj::SECONDS)
                     .then([what, seconds]() -> kj::Promise<T> {
                       return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                                            kj::str("no result within ", seconds, " s: ", what));
                     });
  return promise.exclusiveJoin(kj::mv(timeout)).wait(Io().waitScope);
}

}  // namespace paseo::testing
