// FdCap: the server side of helper.capnp's `Fd` interface -- one file descriptor, owned, sent
// with SCM_RIGHTS when the capability crosses the socketpair. Shared by the privhelper and the
// test stand-ins that play it (broker/fake_helper, testing/fd_passing_test).
#pragma once

#include <kj/io.h>

#include "schema/helper.capnp.h"

namespace paseo {

class FdCap final : public helper::Fd::Server {
 public:
  explicit FdCap(kj::AutoCloseFd fd) : fd_(kj::mv(fd)) {}
  kj::Maybe<int> getFd() override { return fd_.get(); }

 private:
  kj::AutoCloseFd fd_;
};

}  // namespace paseo
