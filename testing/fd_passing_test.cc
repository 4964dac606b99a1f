// Regression test for passing stdio fds from the privhelper to the broker over the helper
// socketpair (capnp fd passing on a TwoPartyVatNetwork): the receiver must get a usable fd.
// Bug it covers: capnp 0.9.2 silently drops outgoing fds on a network constructed with
// maxFdsPerMessage == 0 (the header says the limit is for incoming messages only), so the
// privhelper's side must be built with a non-zero limit too.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/io.h>

#include "gtest/gtest.h"
#include "schema/helper.capnp.h"
#include "privhelper/fd_cap.h"

namespace paseo {
namespace {

class FakeHelper final : public helper::Helper::Server {
 protected:
  kj::Promise<void> startProcess(StartProcessContext context) override {
    int p[2];
    KJ_SYSCALL(pipe2(p, O_CLOEXEC));
    ::write(p[1], "ok", 2);
    close(p[1]);
    auto r = context.getResults();
    r.setStdout(kj::heap<FdCap>(kj::AutoCloseFd(p[0])));
    return kj::READY_NOW;
  }
};

TEST(FdPassingTest, ReceiverGetsAReadablePipe) {
  auto io = kj::setupAsyncIo();
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  auto server_stream = io.lowLevelProvider->wrapUnixSocketFd(sv[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  auto client_stream = io.lowLevelProvider->wrapUnixSocketFd(sv[1], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  capnp::TwoPartyVatNetwork server_net(*server_stream, /*maxFdsPerMessage=*/3, capnp::rpc::twoparty::Side::SERVER);
  auto server = capnp::makeRpcServer(server_net, kj::heap<FakeHelper>());
  capnp::TwoPartyClient client(*client_stream, 3);
  auto helper = client.bootstrap().castAs<helper::Helper>();
  auto res = helper.startProcessRequest().send().wait(io.waitScope);
  auto fd = res.getStdout().getFd().wait(io.waitScope);
  int got = -1;
  KJ_IF_MAYBE(f, fd) { got = *f; }
  ASSERT_GE(got, 0) << "no fd received";
  char buf[4] = {};
  EXPECT_EQ(read(got, buf, sizeof(buf)), 2);
  EXPECT_STREQ(buf, "ok");
}

}  // namespace
}  // namespace paseo
