// A sandbox that lives long and runs many execs, as a Paseo workspace does: 10,000 sequential
// keyed execs, each read to its end on both streams. Ended processes are released by the
// service (api.capnp Process.release), so what it holds -- broker RSS and fds, privhelper RSS
// and fds, the broker's state dir, the sandbox's bundle -- is the same after the last exec as
// after the first hundred, within small bounds printed below.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "client/client.h"
#include "gtest/gtest.h"
#include "testing/await.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Collects a stream until its end.
class EndSink final : public api::OutputSink::Server {
 public:
  explicit EndSink(kj::Own<kj::PromiseFulfiller<void>> done) : done_(kj::mv(done)) {}
  std::string bytes;

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto data = context.getParams().getData();
    bytes.append(reinterpret_cast<const char*>(data.begin()), data.size());
    return kj::READY_NOW;
  }
  kj::Promise<void> end(EndContext) override {
    done_->fulfill();
    return kj::READY_NOW;
  }

 private:
  kj::Own<kj::PromiseFulfiller<void>> done_;
};

size_t CountEntries(const std::string& dir) { return ListDir(dir).size(); }

// Bytes allocated under `dir` (du).
uint64_t DiskBytes(const std::string& dir) {
  return std::strtoull(Capture("du -s -B1 " + dir + " | cut -f1").c_str(), nullptr, 10);
}

struct Usage {
  uint64_t broker_rss_kib, broker_fds, helper_rss_kib, helper_fds, state_bytes, bundle_files;
};

Usage Measure(const Service& svc, const std::string& sandbox_id) {
  pid_t broker = svc.broker_pid(), helper = svc.privhelper_pid();
  return {RssKiB(broker),
          CountEntries("/proc/" + std::to_string(broker) + "/fd"),
          RssKiB(helper),
          CountEntries("/proc/" + std::to_string(helper) + "/fd"),
          DiskBytes(svc.base() + "/state/broker"),
          CountEntries(svc.bundles() + "/" + sandbox_id)};
}

// Starts `argv` with `key`, reads stdout and stderr to their ends, returns stdout.
std::string ExecToEnd(api::Sandbox::Client& sandbox, const std::string& key,
                      const std::vector<std::string>& argv) {
  auto start = sandbox.startProcessRequest();
  auto spec = start.initSpec();
  auto list = spec.initArgv(static_cast<unsigned>(argv.size()));
  for (unsigned i = 0; i < argv.size(); ++i) list.set(i, argv[i]);
  spec.setKey(key);
  auto process = Await(start.send(), "start " + key).getProcess();
  std::string out;
  for (auto stream : {api::Stream::STDOUT, api::Stream::STDERR}) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    auto sink = kj::heap<EndSink>(kj::mv(paf.fulfiller));
    EndSink* raw = sink.get();
    api::OutputSink::Client sink_ref = kj::mv(sink);
    auto sub = process.subscribeRequest();
    sub.setStream(stream);
    sub.setSink(sink_ref);
    auto subscription = Await(sub.send(), "subscribe").getSubscription();
    Await(kj::mv(paf.promise), "end of " + key);
    if (stream == api::Stream::STDOUT) out = raw->bytes;
  }
  return out;
}

TEST(LongLivedSandboxTest, TenThousandExecsLeaveNothingBehind) {
  Service& svc = Service::Get();
  const int kExecs = std::getenv("PASEO_LONG_LIVED_EXECS")
                         ? std::atoi(std::getenv("PASEO_LONG_LIVED_EXECS"))
                         : 10000;
  client::Connection conn(Io(), svc.socket());
  auto create = conn.supervisor().createSandboxRequest();
  create.initSpec().setDeploymentId("io");
  auto created = Await(create.send(), "create");
  std::string sandbox_id = created.getInfo().getId().cStr();
  auto sandbox = created.getSandbox();

  auto t0 = std::chrono::steady_clock::now();
  Usage first{};
  for (int i = 0; i < kExecs; ++i) {
    std::string key = "exec-" + std::to_string(i);
    std::string out = i % 2 == 0 ? ExecToEnd(sandbox, key, {"true"})
                                 : ExecToEnd(sandbox, key, {"echo", key});
    ASSERT_EQ(out, i % 2 == 0 ? "" : key + "\n") << key;
    if (i + 1 == 100) {
      sleep(1);  // the broker's and the privhelper's releases of the last ones land
      first = Measure(svc, sandbox_id);
    }
  }
  double took = Seconds(t0);
  sleep(1);
  Usage last = Measure(svc, sandbox_id);
  std::printf(
      "%d execs in %.1f s (%.1f ms each)\n"
      "  after 100 / after %d: broker RSS %llu / %llu KiB, broker fds %llu / %llu, privhelper "
      "RSS %llu / %llu KiB, privhelper fds %llu / %llu, broker state %llu / %llu bytes, bundle "
      "files %llu / %llu\n"
      "  bounds: RSS +2048 KiB, fds +4, state +65536 bytes (+128 KiB of remembered keys), "
      "bundle files +4\n",
      kExecs, took, 1000 * took / kExecs, kExecs, (unsigned long long)first.broker_rss_kib,
      (unsigned long long)last.broker_rss_kib, (unsigned long long)first.broker_fds,
      (unsigned long long)last.broker_fds, (unsigned long long)first.helper_rss_kib,
      (unsigned long long)last.helper_rss_kib, (unsigned long long)first.helper_fds,
      (unsigned long long)last.helper_fds, (unsigned long long)first.state_bytes,
      (unsigned long long)last.state_bytes, (unsigned long long)first.bundle_files,
      (unsigned long long)last.bundle_files);
  EXPECT_LE(last.broker_rss_kib, first.broker_rss_kib + 2048);
  EXPECT_LE(last.helper_rss_kib, first.helper_rss_kib + 2048);
  EXPECT_LE(last.broker_fds, first.broker_fds + 4);
  EXPECT_LE(last.helper_fds, first.helper_fds + 4);
  // The record also remembers the last 1024 released keys (tombstones of about 100 bytes),
  // which fill up during the run and then stay.
  EXPECT_LE(last.state_bytes, first.state_bytes + 65536 + 1024 * 128);
  EXPECT_LE(last.bundle_files, first.bundle_files + 4);

  // The last key is still known (released or not) and taken.
  std::string last_key = "exec-" + std::to_string(kExecs - 1);
  auto find = sandbox.findProcessRequest();
  find.setKey(last_key);
  auto found = Await(find.send(), "findProcess");
  EXPECT_EQ(std::string(found.getInfo().getKey().cStr()), last_key);
  auto again = kj::runCatchingExceptions([&] { ExecToEnd(sandbox, last_key, {"true"}); });
  EXPECT_NE(again, nullptr) << "a used key stays taken";
  auto rm = svc.Cli({0, 0, {0}}, {"rm", sandbox_id});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) { return paseo::testing::RunTestsWithSharedService(argc, argv); }
