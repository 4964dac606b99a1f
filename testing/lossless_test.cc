// Lossless output against the real service: a process writes 256 MiB (`cat` of a 64 MiB
// pattern file, four times) to a subscriber that acknowledges slowly, through a profile that
// keeps 8 MiB per stream. Every byte arrives once and in order, nothing is announced lost, and
// the writer was held back (it ended measurably later than with a fast reader). The same holds with the broker
// SIGKILLed twice mid-transfer: the client reconnects and resubscribes from its own offset.
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstring>
#include <functional>
#include <cstdio>
#include <cstdlib>

#include "client/client.h"
#include "gtest/gtest.h"
#include "testing/await.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

// The pattern file and how often the process writes it.
constexpr uint64_t kPatternBytes = 64 << 20;
constexpr int kCopies = 4;
constexpr uint64_t kTotal = kPatternBytes * kCopies;

// Byte `i` of the pattern: every value occurs, and a byte out of place shows.
char PatternByte(uint64_t i) { return static_cast<char>((i * 7 + i / 256 + i / 65521) & 0xff); }

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// What the client has received, checked byte by byte: shared by the sinks of successive
// subscriptions (one per connection), as a reconnecting client keeps its offset.
struct SeqReader {
  uint64_t next_offset = 0;  // the client's own offset: where it resubscribes
  uint64_t lost = 0;
  bool ended = false;
  std::string errors;

  void Take(uint64_t offset, const char* data, size_t size) {
    if (offset != next_offset && errors.size() < 400)
      errors += "offset " + std::to_string(offset) + " expected " + std::to_string(next_offset);
    for (size_t i = 0; i < size; ++i) {
      if (data[i] != PatternByte((offset + i) % kPatternBytes) && errors.size() < 400) {
        errors += "wrong byte at offset " + std::to_string(offset + i) + "; ";
        break;
      }
    }
    next_offset = offset + size;
  }
  bool complete() const { return next_offset == kTotal; }
};

// Receives stdout into a SeqReader. With a `delay`, it reads like a program that sleeps
// between reads: each write is acknowledged `delay` after the previous acknowledgement, so
// capnp's streaming window cannot hide the sleeps.
class SlowSink final : public api::OutputSink::Server {
 public:
  SlowSink(SeqReader& reader, kj::Duration delay) : reader_(reader), delay_(delay) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto p = context.getParams();
    reader_.Take(p.getOffset(), reinterpret_cast<const char*>(p.getData().begin()),
                 p.getData().size());
    if (delay_ == 0 * kj::SECONDS) return kj::READY_NOW;
    auto forked = acked_.then([delay = delay_] { return Io().provider->getTimer().afterDelay(delay); })
                      .fork();
    acked_ = forked.addBranch();
    return forked.addBranch();
  }
  kj::Promise<void> gap(GapContext context) override {
    reader_.lost += context.getParams().getLostBytes();
    return kj::READY_NOW;
  }
  kj::Promise<void> end(EndContext) override {
    reader_.ended = true;
    return kj::READY_NOW;
  }

 private:
  SeqReader& reader_;
  kj::Duration delay_;
  kj::Promise<void> acked_ = kj::READY_NOW;
};

// One connection's view of the process: the sandbox, the process and our subscription.
struct Session {
  kj::Own<client::Connection> conn;
  api::Process::Client process = nullptr;
  api::Subscription::Client subscription = nullptr;
  kj::Promise<void> waited = nullptr;  // notes when the process ended
};

Session Attach(const Service& svc, const std::string& sandbox_id, const std::string& process_id,
               SeqReader& reader, kj::Duration delay, std::function<void()> on_end) {
  Session s;
  s.conn = kj::heap<client::Connection>(Io(), svc.socket());
  auto get = s.conn->supervisor().getSandboxRequest();
  get.setId(sandbox_id);
  auto find = get.send().getSandbox().getProcessRequest();
  find.setId(process_id);
  s.process = find.send().getProcess();
  auto sub = s.process.subscribeRequest();
  sub.setStream(api::Stream::STDOUT);
  sub.setFromOffset(reader.next_offset);
  sub.setSink(kj::heap<SlowSink>(reader, delay));
  s.subscription = Await(sub.send(), "subscribe").getSubscription();
  s.waited = s.process.waitRequest().send().then([on_end](auto&&) { on_end(); }).eagerlyEvaluate(
      [](kj::Exception&&) {});  // the connection went with a killed broker
  return s;
}

// Runs the event loop until `done` (at most `seconds`).
bool RunUntil(const std::function<bool()>& done, int seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done() && std::chrono::steady_clock::now() < deadline)
    Io().provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(Io().waitScope);
  return done();
}

// A new broker serves (the privhelper restarts the one we killed).
void WaitForNewBroker(const Service& svc, pid_t old) {
  for (int i = 0; i < 300; ++i) {
    pid_t now = svc.broker_pid();
    if (now > 0 && now != old) {
      auto served = kj::runCatchingExceptions([&] {
        client::Connection c(Io(), svc.socket());
        Await(c.supervisor().infoRequest().send(), "info");
      });
      if (served == nullptr) return;
    }
    usleep(100000);
  }
  FAIL() << "no broker came back";
}

struct Transfer {
  double seconds = 0;          // from the start to the end of the stream
  double process_seconds = 0;  // from the start to the process's end
  SeqReader reader;
};

// SIGKILLs the broker (the privhelper starts another) and waits for the new one to serve.
void KillBroker(const Service& svc) {
  pid_t broker = svc.broker_pid();
  ASSERT_GT(broker, 0);
  ASSERT_EQ(kill(broker, SIGKILL), 0);
  WaitForNewBroker(svc, broker);
}

// Starts `cat` of the pattern kCopies times (lossless) in `sandbox`, then exits `exit_code`;
// reads it with `delay` per acknowledgement, calling `interrupt` (a broker or supervisor kill)
// at each fraction of the stream in `kill_at`.
void RunTransfer(Service& svc, const std::string& sandbox_id, kj::Duration delay,
                 std::vector<double> kill_at, Transfer& out,
                 const std::function<void(Service&)>& interrupt = KillBroker, int exit_code = 0) {
  std::string process_id;
  auto t0 = std::chrono::steady_clock::now();
  {
    client::Connection conn(Io(), svc.socket());
    auto get = conn.supervisor().getSandboxRequest();
    get.setId(sandbox_id);
    auto start = get.send().getSandbox().startProcessRequest();
    auto spec = start.initSpec();
    std::string script = "cat";
    for (int i = 1; i <= kCopies; ++i) script += " /workspace/lossless.pattern";
    script += " && exit " + std::to_string(exit_code);
    auto argv = spec.initArgv(3);
    argv.set(0, "sh");
    argv.set(1, "-c");
    argv.set(2, script);
    spec.setOutput(api::OutputMode::LOSSLESS);
    process_id = Await(start.send(), "start").getInfo().getId().cStr();
  }
  auto on_end = [&out, t0] { out.process_seconds = Seconds(t0); };
  Session session = Attach(svc, sandbox_id, process_id, out.reader, delay, on_end);
  for (double fraction : kill_at) {
    uint64_t offset = static_cast<uint64_t>(fraction * kTotal);
    ASSERT_TRUE(RunUntil([&] { return out.reader.next_offset > offset; }, 600))
        << "stuck at offset " << out.reader.next_offset;
    interrupt(svc);
    // What the old connection had received before its broker died is still taken, as a client
    // reads what it got before it reconnects (a supervisor restart does not turn this loop).
    RunUntil([] { return false; }, 1);
    session = Session();  // the connection is gone with the broker
    session = Attach(svc, sandbox_id, process_id, out.reader, delay, on_end);
  }
  ASSERT_TRUE(RunUntil([&] { return out.reader.ended; }, 900)) << "the stream never ended";
  out.seconds = Seconds(t0);
  auto waited = Await(session.process.waitRequest().send(), "wait");
  ASSERT_EQ(waited.getStatus().which(), api::ExitStatus::EXIT_CODE);
  EXPECT_EQ(waited.getStatus().getExitCode(), exit_code) << "the process's own exit code";
}

// The pattern in the service's workspace ws-io, and a sandbox of deployment "io" on it.
std::string MakeTransferSandbox(const Service& svc, std::string* pattern) {
  *pattern = svc.base() + "/ws-io/lossless.pattern";
  std::string data(kPatternBytes, '\0');
  for (uint64_t i = 0; i < kPatternBytes; ++i) data[i] = PatternByte(i);
  WriteText(*pattern, data);
  client::Connection conn(Io(), svc.socket());
  auto create = conn.supervisor().createSandboxRequest();
  create.initSpec().setDeploymentId("io");
  create.getSpec().setProfile("default");  // keeps 8 MiB per stream
  auto ws = create.getSpec().initWorkspaces(1);
  ws[0].setPath(svc.base() + "/ws-io");
  return Await(create.send(), "create").getInfo().getId().cStr();
}

class LosslessTest : public ::testing::Test {
 protected:
  void SetUp() override { sandbox_id_ = MakeTransferSandbox(Service::Get(), &pattern_); }
  void TearDown() override {
    auto rm = Service::Get().Cli({0, 0, {0}}, {"rm", sandbox_id_});
    EXPECT_EQ(rm.exit_code, 0) << rm.err;
    unlink(pattern_.c_str());
  }
  std::string sandbox_id_, pattern_;
};

void ExpectEveryLineOnce(const Transfer& t) {
  EXPECT_EQ(t.reader.errors, "");
  EXPECT_EQ(t.reader.lost, 0u) << "nothing announced lost";
  EXPECT_TRUE(t.reader.complete()) << "every byte arrived: " << t.reader.next_offset;
}

TEST_F(LosslessTest, ASlowReaderGetsEveryByteAndHoldsTheWriterBack) {
  Service& svc = Service::Get();
  Transfer fast, slow;
  RunTransfer(svc, sandbox_id_, 0 * kj::SECONDS, {}, fast);
  ExpectEveryLineOnce(fast);
  RunTransfer(svc, sandbox_id_, 5 * kj::MILLISECONDS, {}, slow);
  ExpectEveryLineOnce(slow);
  std::printf("lossless %llu bytes: fast reader: process ended after %.1f s, stream after "
              "%.1f s; reader sleeping 5 ms per write: %.1f s, %.1f s\n",
              (unsigned long long)slow.reader.next_offset, fast.process_seconds, fast.seconds,
              slow.process_seconds, slow.seconds);
  // 256 MiB in 64 KiB writes is 4,096 acknowledgements 5 ms apart: about 20 s. The
  // process can end only 8 MiB (the profile's buffer) before the reader is done, so it was
  // held back that long too.
  EXPECT_GT(slow.process_seconds, fast.process_seconds + 12);
  EXPECT_GT(slow.process_seconds, 0.8 * slow.seconds);
}

TEST_F(LosslessTest, NothingIsLostAcrossTwoBrokerKills) {
  Service& svc = Service::Get();
  Transfer t;
  RunTransfer(svc, sandbox_id_, 1 * kj::MILLISECONDS, {0.3, 0.6}, t);
  ExpectEveryLineOnce(t);
  std::printf("lossless %llu bytes across two broker kills: %.1f s\n",
              (unsigned long long)t.reader.next_offset, t.seconds);
}

// The privhelper and the broker SIGKILLed together, twice, each time followed by a new privhelper
// with onRestart "keep" (an upgrade): the sandbox's spawner is reattached and the process runs
// to its end; the reader gets every byte once, in order, and the process's own exit code.
// Through the spawner only: a `runsc exec`'s process does not outlive its privhelper.
TEST(LosslessRestartTest, NothingIsLostAcrossTwoSupervisorRestarts) {
  if (std::getenv("PASEO_TEST_PROCESS_PATH") != nullptr &&
      std::string(std::getenv("PASEO_TEST_PROCESS_PATH")) == "runsc-exec")
    GTEST_SKIP() << "runsc exec processes end with their privhelper (docs/operations.md)";
  ServiceOptions options;
  options.helper_json_extra = ", \"onRestart\": \"keep\"";
  Service svc(options);
  std::string pattern;
  std::string sandbox_id = MakeTransferSandbox(svc, &pattern);
  Transfer t;
  auto restart = [](Service& s) {
    s.Crash();
    s.Restart();
  };
  RunTransfer(svc, sandbox_id, 1 * kj::MILLISECONDS, {0.3, 0.6}, t, restart, 7);
  ExpectEveryLineOnce(t);
  std::printf("lossless %llu bytes across two supervisor restarts: %.1f s\n",
              (unsigned long long)t.reader.next_offset, t.seconds);
  auto rm = svc.Cli({0, 0, {0}}, {"rm", sandbox_id});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(svc.Stop(), 0);
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  svc.RemoveWorkArea();
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) { return paseo::testing::RunTestsWithSharedService(argc, argv); }
