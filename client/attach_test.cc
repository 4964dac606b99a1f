// Attach() against a fake process over a real Unix socket, with pipes for our stdin, stdout and
// stderr: output in order from an offset, the gap notice, exit codes, input forwarding to EOF,
// and the detach keys. Runs as any user.
#include "client/attach.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/client.h"
#include "client/fake_service.h"

namespace paseo::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct Pipe {
  Pipe() { KJ_ASSERT(pipe2(fds, O_CLOEXEC) == 0); }
  ~Pipe() {
    CloseWriter();
    close(fds[0]);
  }
  int reader() const { return fds[0]; }
  int writer() const { return fds[1]; }
  void CloseWriter() {
    if (fds[1] >= 0) close(fds[1]);
    fds[1] = -1;
  }
  // Everything written, once the writer is closed.
  std::string Drain() {
    CloseWriter();
    std::string all;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) all.append(buf, static_cast<size_t>(n));
    return all;
  }
  int fds[2] = {-1, -1};
};

class AttachTest : public ::testing::Test {
 protected:
  // kj destructors may throw (noexcept(false)); a gtest fixture's may not.
  ~AttachTest() noexcept override {}

  static void SetUpTestSuite() { CaptureAttachSignals(); }  // as main() does

  // sb-1/p-1 running `script`, reached through the socket.
  api::Process::Client StartFake(const FakeProcessScript& script) {
    service_.AddSandbox("sb-1");
    service_.AddProcess("sb-1", "p-1", script);
    auto get = conn_.supervisor().getSandboxRequest();
    get.setId("sb-1");
    auto req = get.send().getSandbox().getProcessRequest();
    req.setId("p-1");
    return req.send().getProcess();
  }
  FakeProcess& fake() { return service_.sandboxes.at("sb-1").processes.at("p-1"); }

  AttachOptions Options() {
    AttachOptions options;
    options.stdin_fd = in_.reader();
    options.stdout_fd = out_.writer();
    options.stderr_fd = err_.writer();
    return options;
  }
  // Our stdin goes to the process.
  AttachOptions Forwarding() {
    AttachOptions options = Options();
    options.forward_stdin = true;
    return options;
  }
  // A process that writes back what it reads, until its input is closed.
  static FakeProcessScript Cat() {
    FakeProcessScript script;
    script.echo_input = true;
    return script;
  }

  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  FakeService service_;
  SocketDir dir_;
  UnixSocketServer server_{io_, dir_.path() + "/s.sock", service_.NewSupervisor()};
  Connection conn_{io_, dir_.path() + "/s.sock"};
  Pipe in_, out_, err_;
};

TEST_F(AttachTest, StreamsInOrderThenTheExitCode) {
  FakeProcessScript script;
  script.stdout_data = "hello, world: more than one chunk\n";
  script.stderr_data = "a warning\n";
  script.exit = ProcessExit::Exited(3);
  EXPECT_EQ(Attach(io_, StartFake(script), Options()), 3);
  EXPECT_EQ(out_.Drain(), script.stdout_data);
  EXPECT_EQ(err_.Drain(), script.stderr_data);
  EXPECT_FALSE(fake().input_closed) << "stdin is not ours to close without -i";
  EXPECT_EQ(fake().subscriptions.size(), 2u);
  EXPECT_TRUE(service_.errors.empty()) << service_.errors[0];
}

TEST_F(AttachTest, FromAnOffsetAndAGap) {
  FakeProcessScript script;
  script.lost_bytes = 10;
  script.stdout_data = "0123456789";  // offsets 10..19
  script.stderr_data = "abcdef";      // offsets 10..15
  AttachOptions options = Options();
  options.stdout_from = 14;
  options.stderr_from = 4;
  testing::internal::CaptureStderr();
  EXPECT_EQ(Attach(io_, StartFake(script), options), 0);
  std::string notices = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out_.Drain(), "456789");
  EXPECT_EQ(err_.Drain(), "abcdef");
  EXPECT_EQ(notices, "paseo-sandbox: 6 bytes of output were no longer kept\n");
}

TEST_F(AttachTest, ATerminalProcessHasOneStream) {
  FakeProcessScript script;
  script.tty = true;
  script.stdout_data = "on the pty\r\n";
  script.lost_bytes = 2;
  AttachOptions options = Options();
  options.tty = true;
  testing::internal::CaptureStderr();
  EXPECT_EQ(Attach(io_, StartFake(script), options), 0);
  std::string notices = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out_.Drain(), script.stdout_data);
  EXPECT_THAT(err_.Drain(), IsEmpty());
  ASSERT_EQ(fake().subscriptions.size(), 1u);
  EXPECT_EQ(fake().subscriptions[0].first, api::Stream::PTY);
  // The local terminal may be raw: the notice brings its own carriage returns.
  EXPECT_EQ(notices, "\r\npaseo-sandbox: 2 bytes of output were no longer kept\r\n");
}

TEST_F(AttachTest, ExitCodesOfSignalsAndOom) {
  FakeProcessScript script;
  script.exit = ProcessExit::Signaled(15);
  EXPECT_EQ(Attach(io_, StartFake(script), Options()), 128 + 15);
  service_.sandboxes.clear();
  script.exit = ProcessExit::OomKilled();
  EXPECT_EQ(Attach(io_, StartFake(script), Options()), 137);
}

TEST_F(AttachTest, ForwardsInputAndClosesItAtEof) {
  ASSERT_EQ(write(in_.writer(), "typed\n", 6), 6);
  in_.CloseWriter();
  EXPECT_EQ(Attach(io_, StartFake(Cat()), Forwarding()), 0);
  EXPECT_EQ(fake().input, "typed\n");
  EXPECT_TRUE(fake().input_closed);
  EXPECT_EQ(out_.Drain(), "typed\n");
  EXPECT_EQ(fcntl(in_.reader(), F_GETFL) & O_NONBLOCK, 0) << "stdin's flags are restored";
}

// Regression: a stdin epoll refuses (a regular file, /dev/null) failed the command with
// "epoll_ctl(...): Operation not permitted".
TEST_F(AttachTest, ForwardsAStdinThatCannotBePolled) {
  std::string path = dir_.path() + "/input";
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "from a file\n", 12), 12);
  ASSERT_EQ(lseek(fd, 0, SEEK_SET), 0);
  AttachOptions options = Forwarding();
  options.stdin_fd = fd;
  EXPECT_EQ(Attach(io_, StartFake(Cat()), options), 0);
  close(fd);
  EXPECT_EQ(fake().input, "from a file\n");
  EXPECT_TRUE(fake().input_closed);
  EXPECT_EQ(out_.Drain(), "from a file\n");
}

// Regression: what was typed before Ctrl-P Ctrl-Q in the same read was dropped.
TEST_F(AttachTest, DetachKeysLeaveTheProcessRunningAndKeepWhatWasTypedBefore) {
  FakeProcessScript script = Cat();
  script.tty = true;
  AttachOptions options = Forwarding();
  options.tty = options.detach_keys = true;
  ASSERT_EQ(write(in_.writer(), "ls\r\x10\x11", 5), 5);
  testing::internal::CaptureStderr();
  EXPECT_EQ(Attach(io_, StartFake(script), options), kDetached);
  EXPECT_THAT(testing::internal::GetCapturedStderr(), HasSubstr("paseo-sandbox: detached"));
  EXPECT_EQ(fake().input, "ls\r");
  EXPECT_FALSE(fake().input_closed) << "detaching leaves the process's input open";
}

TEST_F(AttachTest, WithoutDetachKeysCtrlPCtrlQAreInput) {
  ASSERT_EQ(write(in_.writer(), "\x10\x11", 2), 2);
  in_.CloseWriter();
  EXPECT_EQ(Attach(io_, StartFake(Cat()), Forwarding()), 0);
  EXPECT_EQ(fake().input, "\x10\x11");
}

// Ctrl-C during run: the first SIGINT goes to the process, a second one gives up.
TEST_F(AttachTest, FirstInterruptIsForwardedSecondGivesUp) {
  std::atomic<bool> attached_returned = false;
  std::thread interrupter([&] {
    // Again and again: two signals sent at once may arrive as one.
    while (!attached_returned) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      kill(getpid(), SIGINT);
    }
  });
  int code = Attach(io_, StartFake(Cat()), Options());
  attached_returned = true;
  interrupter.join();
  // A SIGINT still pending would reach the next test's Attach.
  sigset_t sigint;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  timespec now = {};
  while (sigtimedwait(&sigint, nullptr, &now) == SIGINT) {
  }
  EXPECT_EQ(code, 130);
  EXPECT_THAT(fake().signals, ElementsAre(SIGINT));
}

TEST(ExitCodeOfTest, AsAShellReportsThem) {
  capnp::MallocMessageBuilder message;
  auto status = message.initRoot<api::ExitStatus>();
  status.setExitCode(7);
  EXPECT_EQ(ExitCodeOf(status.asReader()), 7);
  status.setSignal(9);
  EXPECT_EQ(ExitCodeOf(status.asReader()), 137);
  status.setOomKilled();
  EXPECT_EQ(ExitCodeOf(status.asReader()), 137);
  status.setUnknown();
  EXPECT_EQ(ExitCodeOf(status.asReader()), 255);
}

}  // namespace
}  // namespace paseo::client
