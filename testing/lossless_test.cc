// Lossless output against the real service: a process writes about 256 MiB (busybox `seq`)
// to a subscriber that acknowledges slowly, through a profile that keeps 8 MiB per stream.
// Every line arrives once and in order, nothing is announced lost, and the writer was held
// back (it took measurably longer than with a fast reader). The same holds with the broker
// SIGKILLed twice mid-transfer: the client reconnects and resubscribes from its own offset.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "client/client.h"
#include "gtest/gtest.h"
#include "testing/await.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

// seq 1 kLines: 1..31,500,000, one per line, about 260 MiB.
constexpr uint64_t kLines = 31500000;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// What the client has received of `seq 1 kLines`, checked line by line: shared by the sinks of
// successive subscriptions (one per connection), as a reconnecting client keeps its offset.
struct SeqReader {
  uint64_t next_offset = 0;  // the client's own offset: where it resubscribes
  uint64_t expected = 1;     // the next number
  std::string partial;       // an unfinished line
  uint64_t lost = 0;
  bool ended = false;
  std::string errors;

  void Take(uint64_t offset, const char* data, size_t size) {
    if (offset != next_offset && errors.size() < 400)
      errors += "offset " + std::to_string(offset) + " expected " + std::to_string(next_offset);
    next_offset = offset + size;
    for (size_t i = 0; i < size; ++i) {
      if (data[i] != '\n') {
        partial += data[i];
        continue;
      }
      if (partial != std::to_string(expected) && errors.size() < 400)
        errors += "line \"" + partial + "\" expected " + std::to_string(expected) + "; ";
      ++expected;
      partial.clear();
    }
  }
};

// Receives stdout into a SeqReader, holding each acknowledgement for `delay` (a reader that
// sleeps between reads).
class SlowSink final : public api::OutputSink::Server {
 public:
  SlowSink(SeqReader& reader, kj::Duration delay) : reader_(reader), delay_(delay) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto p = context.getParams();
    reader_.Take(p.getOffset(), reinterpret_cast<const char*>(p.getData().begin()),
                 p.getData().size());
    if (delay_ == 0 * kj::SECONDS) return kj::READY_NOW;
    return Io().provider->getTimer().afterDelay(delay_);
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
};

// One connection's view of the process: the sandbox, the process and our subscription.
struct Session {
  kj::Own<client::Connection> conn;
  api::Process::Client process = nullptr;
  api::Subscription::Client subscription = nullptr;
};

Session Attach(const Service& svc, const std::string& sandbox_id, const std::string& process_id,
               SeqReader& reader, kj::Duration delay) {
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
  double seconds = 0;  // from the start to the process's end
  SeqReader reader;
};

// Starts `seq 1 kLines` (lossless) in `sandbox`, reads it with `delay` per acknowledgement,
// SIGKILLing the broker at each fraction of the stream in `kill_at`.
void RunTransfer(const Service& svc, const std::string& sandbox_id, kj::Duration delay,
                 std::vector<double> kill_at, Transfer& out) {
  const uint64_t total_lines = kLines;
  std::string process_id;
  auto t0 = std::chrono::steady_clock::now();
  {
    client::Connection conn(Io(), svc.socket());
    auto get = conn.supervisor().getSandboxRequest();
    get.setId(sandbox_id);
    auto start = get.send().getSandbox().startProcessRequest();
    auto spec = start.initSpec();
    auto argv = spec.initArgv(3);
    argv.set(0, "seq");
    argv.set(1, "1");
    argv.set(2, std::to_string(total_lines));
    spec.setOutput(api::OutputMode::LOSSLESS);
    process_id = Await(start.send(), "start").getInfo().getId().cStr();
  }
  Session session = Attach(svc, sandbox_id, process_id, out.reader, delay);
  for (double fraction : kill_at) {
    uint64_t line = static_cast<uint64_t>(fraction * total_lines);
    ASSERT_TRUE(RunUntil([&] { return out.reader.expected > line; }, 600))
        << "stuck at line " << out.reader.expected;
    pid_t broker = svc.broker_pid();
    ASSERT_GT(broker, 0);
    ASSERT_EQ(kill(broker, SIGKILL), 0);
    session = Session();  // the connection is gone with the broker
    WaitForNewBroker(svc, broker);
    session = Attach(svc, sandbox_id, process_id, out.reader, delay);
  }
  ASSERT_TRUE(RunUntil([&] { return out.reader.ended; }, 900)) << "the stream never ended";
  auto waited = Await(session.process.waitRequest().send(), "wait");
  out.seconds = Seconds(t0);
  EXPECT_EQ(waited.getStatus().which(), api::ExitStatus::EXIT_CODE);
}

class LosslessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    client::Connection conn(Io(), Service::Get().socket());
    auto create = conn.supervisor().createSandboxRequest();
    create.initSpec().setDeploymentId("io");
    create.getSpec().setProfile("default");  // keeps 8 MiB per stream
    sandbox_id_ = Await(create.send(), "create").getInfo().getId().cStr();
  }
  void TearDown() override {
    auto rm = Service::Get().Cli({0, 0, {0}}, {"rm", sandbox_id_});
    EXPECT_EQ(rm.exit_code, 0) << rm.err;
  }
  std::string sandbox_id_;
};

void ExpectEveryLineOnce(const Transfer& t) {
  EXPECT_EQ(t.reader.errors, "");
  EXPECT_EQ(t.reader.lost, 0u) << "nothing announced lost";
  EXPECT_EQ(t.reader.expected, kLines + 1) << "every line arrived";
  EXPECT_EQ(t.reader.partial, "");
}

TEST_F(LosslessTest, ASlowReaderGetsEveryByteAndHoldsTheWriterBack) {
  Service& svc = Service::Get();
  Transfer fast, slow;
  RunTransfer(svc, sandbox_id_, 0 * kj::SECONDS, {}, fast);
  ExpectEveryLineOnce(fast);
  RunTransfer(svc, sandbox_id_, 3 * kj::MILLISECONDS, {}, slow);
  ExpectEveryLineOnce(slow);
  std::printf("lossless %llu bytes: fast reader %.1f s, reader sleeping 3 ms per 64 KiB %.1f s\n",
              (unsigned long long)slow.reader.next_offset, fast.seconds, slow.seconds);
  // 260 MiB in 64 KiB writes is over 4,000 acknowledgements, each held 3 ms: at least 12 s
  // more if the writer really waited for the reader.
  EXPECT_GT(slow.seconds, fast.seconds + 8);
}

TEST_F(LosslessTest, NothingIsLostAcrossTwoBrokerKills) {
  Service& svc = Service::Get();
  Transfer t;
  RunTransfer(svc, sandbox_id_, 1 * kj::MILLISECONDS, {0.3, 0.6}, t);
  ExpectEveryLineOnce(t);
  std::printf("lossless %llu bytes across two broker kills: %.1f s\n",
              (unsigned long long)t.reader.next_offset, t.seconds);
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) { return paseo::testing::RunTestsWithSharedService(argc, argv); }
