// paseo-sandbox benchmarks: each scenario measured through the public API and against its raw
// runsc baseline, alternating samples in one run. Started by testing/bench/run (see README.md).
//
//   bench [--quick] [--perf DIR] [--only NAME,NAME...]
//
// Needs root. Works in its own mount+network namespace on a tmpfs: the test harness's service
// (testing/harness.h: a real privhelper, which starts the real broker) with the bench's own
// deployment and profile added to its config, and a raw runsc root beside it driven with the
// privhelper's flags. Everything it creates is removed before it exits.
#include <fcntl.h>
#include <sys/mman.h>
#include <grp.h>
#include <signal.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <capnp/message.h>
#include <kj/async-io.h>
#include <kj/debug.h>

#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "absl/strings/strip.h"
#include "client/client.h"
#include "egress/cert_authority.h"
#include "common/spawn.h"
#include "schema/api.capnp.h"
#include "privhelper/network/links.h"
#include "privhelper/network/netns.h"
#include "privhelper/network/sandbox_networks.h"
#include "testing/harness.h"
#include "testing/test_internet.h"
#include "testing/util.h"

namespace paseo::bench {
namespace {

using api::OutputSink;
using testing::Capture;
using testing::CliResult;
using testing::Check;
using testing::Cmdline;
using testing::CopyExecutable;
using testing::Die;
using testing::ListDir;
using testing::PidsMatching;
using testing::ProcKiB;
using testing::ReadFile;
using testing::RemoveCgroup;
using testing::RssKiB;
using testing::Runfile;
using testing::Service;
using testing::SpawnStdio;
using testing::WaitPid;
using testing::WriteText;

constexpr uid_t kAgentUid = 4242;
constexpr gid_t kAgentGid = 4242;
constexpr uint64_t kMiB = 1ull << 20;
// The bench profile's outputBufferBytes: the broker keeps the newest this many bytes of each
// stream, so a subscriber further behind than this is sent a gap.
constexpr uint64_t kOutputBufferBytes = 128 * kMiB;

// ------------------------------------------------------------------ small utilities

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Progress(const std::string& line) {
  std::fprintf(stderr, "bench: %s\n", line.c_str());
  std::fflush(stderr);
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string QuoteList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + Quote(items[i]);
  return out + "]";
}

// Memory of one process, in KiB: VmRSS and (from smaps_rollup) Pss.
struct Mem {
  uint64_t rss_kib = 0;
  uint64_t pss_kib = 0;
  int processes = 0;
  Mem& operator+=(const Mem& o) {
    rss_kib += o.rss_kib;
    pss_kib += o.pss_kib;
    processes += o.processes;
    return *this;
  }
};

Mem MemOf(pid_t pid) {
  Mem m;
  m.rss_kib = RssKiB(pid);
  m.pss_kib = ProcKiB(pid, "smaps_rollup", "Pss:");
  m.processes = 1;
  return m;
}

double MiB(uint64_t kib) { return static_cast<double>(kib) / 1024.0; }

// Sum over every process whose command line contains `needle`.
Mem MemOfMatching(const std::string& needle) {
  Mem total;
  for (pid_t pid : PidsMatching(needle)) total += MemOf(pid);
  return total;
}

// What runsc and perf are started with.
const std::vector<std::string> kToolEnv = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"};

// utime + stime of one process, in seconds (0 if it is gone).
double CpuSeconds(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close_paren + 2));
  std::string field;
  double ticks = 0;
  // Fields after the comm: state(3) ... utime(14) stime(15); we start at field 3.
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// CPU seconds used by groups of processes between Begin() and End(). Processes that start
// and end inside the window (runsc exec, say) are missed unless `needle` still matches them
// at End(); runsc's sandbox and gofer processes live for the whole window.
class CpuWindow {
 public:
  void Add(const std::string& name, std::function<std::vector<pid_t>()> pids) {
    groups_.push_back({name, std::move(pids), {}});
  }
  void Begin() {
    for (auto& g : groups_) {
      g.start.clear();
      for (pid_t p : g.pids()) g.start[p] = CpuSeconds(p);
    }
    t0_ = Now();
  }
  // Adds each group's CPU seconds to `into[name]` and the wall time to into["wall"].
  void End(std::map<std::string, double>& into) {
    for (auto& g : groups_) {
      double used = 0;
      for (pid_t p : g.pids()) {
        auto it = g.start.find(p);
        used += CpuSeconds(p) - (it == g.start.end() ? 0 : it->second);
      }
      into[g.name] += used;
    }
    into["wall"] += Now() - t0_;
  }

 private:
  struct Group {
    std::string name;
    std::function<std::vector<pid_t>()> pids;
    std::map<pid_t, double> start;
  };
  std::vector<Group> groups_;
  double t0_ = 0;
};

// `perf record` of some pids until Stop(), then `perf report` into DIR/<name>.txt (while the
// binaries it names still exist on the work tmpfs).
class Perf {
 public:
  Perf(const std::string& dir, const std::string& name, const std::vector<pid_t>& pids)
      : dir_(dir), name_(name) {
    if (dir.empty()) return;
    mkdir(dir.c_str(), 0755);
    std::string list;
    for (pid_t p : pids) list += (list.empty() ? "" : ",") + std::to_string(p);
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    pid_ = SpawnStdio({"/usr/bin/perf", "record", "-F", "499", "-g", "-o", Data(), "-p", list},
                      null_fd, null_fd, null_fd, kToolEnv);
    close(null_fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGINT);
    WaitPid(pid_);
    pid_ = -1;
    std::string report = dir_ + "/" + name_ + ".txt";
    std::system(("/usr/bin/perf report --stdio --no-children -i " + Data() +
                 " --sort comm,dso,sym --percent-limit 0.5 -g none > " + report + " 2>/dev/null")
                    .c_str());
    Progress("perf profile: " + report);
  }
  ~Perf() { Stop(); }

 private:
  std::string Data() const { return dir_ + "/" + name_ + ".data"; }
  std::string dir_, name_;
  pid_t pid_ = -1;
};

// ------------------------------------------------------------------ statistics and output

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(pos));
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double Median(const std::vector<double>& v) { return Quantile(v, 0.5); }

// (p90 - p10) / median: the relative width of the middle 80% of samples.
double Spread(const std::vector<double>& v) {
  double m = Median(v);
  return m == 0 ? 0 : (Quantile(v, 0.9) - Quantile(v, 0.1)) / m;
}

struct Result {
  std::string name;
  std::string unit;
  std::string ours_label;
  std::string baseline_label;
  std::vector<double> ours;
  std::vector<double> baseline;
  // ratio = ours/baseline; for throughput-like units (higher is better) the same definition
  // holds, and the target is read the other way.
  std::string target;  // human text, e.g. "<= 1.10"
  std::function<bool(double ratio, double ours, double baseline)> met;
  std::vector<std::pair<std::string, std::string>> extra;  // already JSON-encoded values
};

std::vector<Result> g_results;

std::string Num(double v, int digits = 3) {
  if (std::isnan(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

void Report(const Result& r) {
  double om = Median(r.ours), bm = Median(r.baseline);
  double ratio = bm == 0 || std::isnan(bm) ? NAN : om / bm;
  std::string json = "{\"name\": " + Quote(r.name) + ", \"unit\": " + Quote(r.unit) +
                     ", \"ours_median\": " + Num(om) + ", \"baseline_median\": " + Num(bm) +
                     ", \"ratio\": " + Num(ratio) + ", \"spread\": " +
                     Num(std::max(Spread(r.ours), r.baseline.empty() ? 0 : Spread(r.baseline))) +
                     ", \"spread_ours\": " + Num(Spread(r.ours)) +
                     ", \"spread_baseline\": " + Num(r.baseline.empty() ? NAN : Spread(r.baseline)) +
                     ", \"samples\": " + std::to_string(r.ours.size()) +
                     ", \"baseline_samples\": " + std::to_string(r.baseline.size()) +
                     ", \"ours\": " + Quote(r.ours_label) + ", \"baseline\": " +
                     Quote(r.baseline_label) + ", \"target\": " + Quote(r.target);
  if (r.met) json += std::string(", \"target_met\": ") + (r.met(ratio, om, bm) ? "true" : "false");
  for (const auto& [k, v] : r.extra) json += ", " + Quote(k) + ": " + v;
  json += "}";
  std::printf("BENCH_JSON %s\n", json.c_str());
  std::fflush(stdout);
}

void PrintTable() {
  std::printf("\n%-22s %-8s %12s %12s %8s %8s %8s %5s  %-16s %s\n", "scenario", "unit",
              "ours(med)", "base(med)", "ratio", "spr.ours", "spr.base", "n", "target", "met");
  for (const auto& r : g_results) {
    double om = Median(r.ours), bm = Median(r.baseline);
    double ratio = bm == 0 || std::isnan(bm) ? NAN : om / bm;
    std::string met = r.met ? (r.met(ratio, om, bm) ? "yes" : "NO") : "-";
    std::printf("%-22s %-8s %12s %12s %8s %8s %8s %5zu  %-16s %s\n", r.name.c_str(),
                r.unit.c_str(), Num(om, 2).c_str(), Num(bm, 2).c_str(), Num(ratio, 2).c_str(),
                Num(Spread(r.ours), 2).c_str(),
                r.baseline.empty() ? "-" : Num(Spread(r.baseline), 2).c_str(), r.ours.size(),
                r.target.c_str(), met.c_str());
  }
  std::printf("\nspread = (p90 - p10) / median of each side's samples; ratio = ours / baseline.\n");
  std::fflush(stdout);
}

// ------------------------------------------------------------------ the environment

struct Options {
  bool quick = false;
  std::string perf_dir;  // --perf DIR: perf profiles of the broker and this client
  bool probe_trim = false;  // --probe-trim: gdb-call malloc_trim(0) in the broker after deletes
  std::set<std::string> only;
  bool Wants(const std::string& s) const { return only.empty() || only.count(s) > 0; }
};

// Drives the service's runsc (RunscPath) directly, with the privhelper's fixed flags, on a root of its own.
class RawRunsc {
 public:
  // `platform`: the one the service's privhelper chose (its log says), so both sides run on it.
  RawRunsc(std::string base, std::string rootfs, std::string workspace, std::string platform)
      : base_(std::move(base)), rootfs_(std::move(rootfs)), workspace_(std::move(workspace)),
        platform_(std::move(platform)) {
    Check(mkdir(base_.c_str(), 0700) == 0, "mkdir " + base_);
    Check(mkdir(Root().c_str(), 0700) == 0, "mkdir runsc root");
    Check(mkdir(Bundles().c_str(), 0700) == 0, "mkdir raw bundles");
  }

  std::string Root() const { return base_ + "/runsc"; }
  const std::string& platform() const { return platform_; }
  std::string Bundles() const { return base_ + "/bundles"; }

  // Network "sandbox" in the namespace pinned at `netns_path` (the privhelper's flag for mode
  // "sandbox"); `hide_proc_sys_net`: runsc runs under a read-only tmpfs over /proc/sys/net
  // (privhelper/runsc.cc says why).
  void UseNetwork(std::string netns_path, bool hide_proc_sys_net) {
    netns_path_ = std::move(netns_path);
    hide_proc_sys_net_ = hide_proc_sys_net;
  }

  std::vector<std::string> Argv(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {paseo::testing::RunscPath(), "--root=" + Root(), "--platform=" + platform_,
                                     netns_path_.empty() ? "--network=none" : "--network=sandbox"};
    // The privhelper's fixed flags, so the baseline is the same gVisor configuration.
    static const bool has_directfs =
        Capture(paseo::testing::RunscPath() + " flags 2>&1 | grep -c '^  -directfs$' || true") != "0";
    if (has_directfs) argv.push_back("--directfs=false");
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  // Starts runsc with exactly fds 0-2 and nothing else open.
  pid_t Start(const std::vector<std::string>& args, int in, int out, int err) const {
    return SpawnStdio(Argv(args), in, out, err, kToolEnv,
                      hide_proc_sys_net_ ? HideProcSysNet : std::function<int()>());
  }

  // Runs to completion with stdio on /dev/null and stderr kept; dies if it fails.
  void RunOrDie(const std::vector<std::string>& args) const {
    std::string log = base_ + "/last-stderr";
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    int err = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    pid_t pid = Start(args, null_fd, null_fd, err);
    close(null_fd);
    close(err);
    int status = WaitPid(pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::string joined;
      for (const auto& a : args) joined += " " + a;
      Die("raw runsc" + joined + " failed: " + ReadFile(log));
    }
  }

  // Writes a bundle for a new container whose init runs `argv`; returns its id.
  std::string NewBundle(const std::vector<std::string>& argv) {
    std::string id = "raw-" + std::to_string(getpid()) + (netns_path_.empty() ? "-" : "-net-") +
                     std::to_string(++seq_);
    std::string dir = Bundles() + "/" + id;
    Check(mkdir(dir.c_str(), 0700) == 0, "mkdir " + dir);
    WriteText(dir + "/config.json", OciConfig(argv, "/paseo-bench/" + id));
    return id;
  }

  std::string BundleDir(const std::string& id) const { return Bundles() + "/" + id; }

  // runsc create + start of an idle sandbox, like the privhelper's createSandbox.
  std::string CreateIdle() {
    std::string id = NewBundle({"/bin/sleep", "2147483647"});
    RunOrDie({"create", "--bundle", BundleDir(id), id});
    RunOrDie({"start", id});
    live_.insert(id);
    return id;
  }

  // The process.json the privhelper writes for startProcess.
  std::string ProcessJson(const std::string& id, const std::vector<std::string>& argv) {
    std::string path = BundleDir(id) + "/process-" + std::to_string(++seq_) + ".json";
    WriteText(path, "{\"terminal\": false, " + User() + ", \"args\": " + QuoteList(argv) +
                        ", \"env\": [" + Quote(kPath) + "], \"cwd\": \"/workspace\", " +
                        NoCaps() + ", " + Rlimits() + "}");
    return path;
  }

  // `runsc exec --process <json> --internal-pid-file <f> <id>` with the given stdio; returns
  // its pid.
  pid_t Exec(const std::string& id, const std::vector<std::string>& argv, int in, int out,
             int err) {
    std::string json = ProcessJson(id, argv);
    return Start({"exec", "--process", json, "--internal-pid-file", json + ".pid", id}, in, out,
                 err);
  }

  // What the privhelper does on delete: kill --all KILL, then delete --force.
  void Delete(const std::string& id) {
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    WaitPid(Start({"kill", "--all", id, "KILL"}, null_fd, null_fd, null_fd));
    pid_t pid = Start({"delete", "--force", id}, null_fd, null_fd, null_fd);
    close(null_fd);
    WaitPid(pid);
    live_.erase(id);
    for (const auto& f : ListDir(BundleDir(id))) unlink((BundleDir(id) + "/" + f).c_str());
    rmdir(BundleDir(id).c_str());
    RemoveCgroup("/paseo-bench/" + id);
  }

  // Delete for many containers, `parallel` at a time (runsc delete takes ~1.7 s here, mostly
  // waiting).
  void DeleteMany(const std::vector<std::string>& ids, size_t parallel = 16) {
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (const char* step : {"kill", "delete"}) {
      for (size_t i = 0; i < ids.size(); i += parallel) {
        std::vector<pid_t> pids;
        for (size_t j = i; j < std::min(ids.size(), i + parallel); ++j) {
          std::vector<std::string> args = std::string(step) == "kill"
                                              ? std::vector<std::string>{"kill", "--all", ids[j], "KILL"}
                                              : std::vector<std::string>{"delete", "--force", ids[j]};
          pids.push_back(Start(args, null_fd, null_fd, null_fd));
        }
        for (pid_t p : pids) WaitPid(p);
      }
    }
    close(null_fd);
    for (const auto& id : ids) Delete(id);  // already gone: only the bundle and cgroup remain
  }

  void DeleteAll() {
    std::vector<std::string> ids(live_.begin(), live_.end());
    for (const auto& id : ids) Delete(id);
    for (const auto& id : ListDir(Root())) {
      if (id.rfind("raw-", 0) == 0) Delete(id.substr(0, id.find('_')));
    }
    for (const auto& id : ListDir(Bundles())) Delete(id);
    RemoveCgroup("/paseo-bench");
  }

  void Forget(const std::string& id) { live_.erase(id); }
  void Remember(const std::string& id) { live_.insert(id); }

 private:
  static constexpr char kPath[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

  // In runsc's child: its own mount namespace (a slave of ours) with /proc/sys/net hidden.
  static int HideProcSysNet() {
    if (unshare(CLONE_NEWNS) != 0) return errno;
    if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return errno;
    return mount("tmpfs", "/proc/sys/net", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                 "size=4k,mode=0555") == 0
               ? 0
               : errno;
  }

  static std::string User() {
    return "\"user\": {\"uid\": " + std::to_string(kAgentUid) + ", \"gid\": " +
           std::to_string(kAgentGid) + ", \"additionalGids\": [" + std::to_string(kAgentGid) +
           "]}";
  }
  static std::string NoCaps() {
    return "\"capabilities\": {\"bounding\": [], \"effective\": [], \"inheritable\": [], "
           "\"permitted\": [], \"ambient\": []}, \"noNewPrivileges\": true";
  }
  static std::string Rlimits() {
    return "\"rlimits\": [{\"type\": \"RLIMIT_NOFILE\", \"hard\": 65536, \"soft\": 65536}]";
  }
  static std::string Mount(const std::string& dest, const std::string& type,
                           const std::string& src, const std::vector<std::string>& opts) {
    return "{\"destination\": " + Quote(dest) + ", \"type\": " + Quote(type) +
           ", \"source\": " + Quote(src) + ", \"options\": " + QuoteList(opts) + "}";
  }

  // The same shape as privhelper/bundle.cc's RenderOciConfig, minus the per-sandbox overlay
  // (the raw baseline uses the built rootfs read-only, directly).
  std::string OciConfig(const std::vector<std::string>& argv, const std::string& cgroup) const {
    std::vector<std::string> mounts = {
        Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
        Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
        Mount("/dev/pts", "devpts", "devpts",
              {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}),
        Mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}),
        Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
        Mount("/tmp", "tmpfs", "tmpfs", {"nosuid", "nodev", "mode=1777", "size=67108864"}),
        Mount("/workspace", "bind", workspace_, {"bind", "rw", "nosuid", "nodev"}),
    };
    std::string m = "[";
    for (size_t i = 0; i < mounts.size(); ++i) m += (i ? ", " : "") + mounts[i];
    m += "]";
    return "{\"ociVersion\": \"1.0.2\", \"process\": {\"terminal\": false, " + User() +
           ", \"args\": " + QuoteList(argv) + ", \"env\": [" + Quote(kPath) +
           "], \"cwd\": \"/\", " + NoCaps() + ", " + Rlimits() + "}, \"root\": {\"path\": " +
           Quote(rootfs_) + ", \"readonly\": true}, \"hostname\": \"sandbox\", \"mounts\": " + m +
           ", \"linux\": {\"namespaces\": [{\"type\": \"pid\"}, {\"type\": \"ipc\"}, {\"type\": "
           "\"uts\"}, {\"type\": \"mount\"}, {\"type\": \"network\"" +
           (netns_path_.empty() ? "" : ", \"path\": " + Quote(netns_path_)) +
           "}], \"cgroupsPath\": " +
           Quote(cgroup) +
           ", \"maskedPaths\": " +
           QuoteList({"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                      "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                      "/proc/sched_debug", "/proc/scsi", "/sys/firmware"}) +
           ", \"readonlyPaths\": " +
           QuoteList({"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}) +
           "}}";
  }

  std::string base_, rootfs_, workspace_, platform_;
  std::string netns_path_;
  bool hide_proc_sys_net_ = false;
  int seq_ = 0;
  std::set<std::string> live_;
};

constexpr char RawRunsc::kPath[];

// ------------------------------------------------------------------ API helpers

// Receives one stream; records when the first byte and a target offset arrive.
struct SinkState {
  double first_at = 0;
  double target_at = 0;
  uint64_t bytes = 0;
  uint64_t next = 0;
  uint64_t lost = 0;
  uint64_t target = UINT64_MAX;
  bool ended = false;
  kj::Own<kj::PromiseFulfiller<void>> first;
  kj::Own<kj::PromiseFulfiller<void>> reached;
  kj::Own<kj::PromiseFulfiller<void>> end;
};

struct SinkPromises {
  kj::Promise<void> first;
  kj::Promise<void> reached;
  kj::Promise<void> end;
};

SinkPromises Arm(SinkState& s) {
  auto a = kj::newPromiseAndFulfiller<void>();
  auto b = kj::newPromiseAndFulfiller<void>();
  auto c = kj::newPromiseAndFulfiller<void>();
  s.first = kj::mv(a.fulfiller);
  s.reached = kj::mv(b.fulfiller);
  s.end = kj::mv(c.fulfiller);
  return {kj::mv(a.promise), kj::mv(b.promise), kj::mv(c.promise)};
}

class Sink final : public OutputSink::Server {
 public:
  explicit Sink(SinkState& s) : s_(s) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto p = context.getParams();
    size_t n = p.getData().size();
    if (s_.bytes == 0 && n > 0) {
      s_.first_at = Now();
      if (s_.first) s_.first->fulfill();
    }
    s_.bytes += n;
    s_.next = p.getOffset() + n;
    if (s_.next >= s_.target && s_.target_at == 0) {
      s_.target_at = Now();
      if (s_.reached) s_.reached->fulfill();
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> gap(GapContext context) override {
    s_.lost += context.getParams().getLostBytes();
    return kj::READY_NOW;
  }
  kj::Promise<void> end(EndContext context) override {
    s_.ended = true;
    if (s_.first && s_.first->isWaiting()) s_.first->fulfill();
    if (s_.reached && s_.reached->isWaiting()) s_.reached->fulfill();
    if (s_.end) s_.end->fulfill();
    return kj::READY_NOW;
  }

 private:
  SinkState& s_;
};

void FillSpec(api::SandboxSpec::Builder spec, const std::string& ws,
              const std::string& profile = "") {
  spec.setDeploymentId("bench");
  if (!profile.empty()) spec.setProfile(profile);
  auto w = spec.initWorkspaces(1)[0];
  w.setPath(ws);
  w.setDestination("/workspace");
  w.setMode(api::AccessMode::READ_WRITE);
}

void FillArgv(api::ProcessSpec::Builder spec, const std::vector<std::string>& argv) {
  auto a = spec.initArgv(static_cast<unsigned>(argv.size()));
  for (size_t i = 0; i < argv.size(); ++i) a.set(static_cast<unsigned>(i), argv[i]);
}

struct Env {
  Options opts;
  std::string base;
  std::string ws;
  kj::AsyncIoContext* io = nullptr;
  Service* service = nullptr;
  RawRunsc* raw = nullptr;
  client::Connection* conn = nullptr;

  kj::WaitScope& ws_() { return io->waitScope; }

  api::Sandbox::Client CreateSandbox(const std::string& profile = "") {
    auto req = conn->supervisor().createSandboxRequest();
    FillSpec(req.initSpec(), ws, profile);
    return req.send().wait(io->waitScope).getSandbox();
  }

  void DeleteSandbox(api::Sandbox::Client& sb) {
    auto req = sb.deleteRequest();
    req.setForce(true);
    req.send().wait(io->waitScope);
  }
};

void Sleep(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// `dd` of `bytes` zeros to stdout in 1 MiB writes, so a rate is the output path's, not gVisor's
// per-syscall cost.
std::vector<std::string> DdArgv(uint64_t bytes) {
  return {"dd", "if=/dev/zero", "bs=1048576", "count=" + std::to_string(bytes / kMiB)};
}

// The bulk server's response header for a body of `bytes`.
std::string BulkHeader(uint64_t bytes) {
  return "HTTP/1.0 200 OK\r\nContent-Length: " + std::to_string(bytes) + "\r\n\r\n";
}

// Reads fd until the first byte (returns its time) and then to EOF.
double FirstByteThenDrain(int fd) {
  double first = 0;
  char buf[65536];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (first == 0) first = Now();
  }
  return first;
}

// ------------------------------------------------------------------ scenarios

// A failed expectation inside a scenario. Thrown rather than exiting, so Main still removes
// every sandbox and process the bench made, and then exits 1.
void Expect(bool ok, const std::string& what) {
  if (!ok) {
    kj::throwFatalException(
        kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str(what.c_str())));
  }
}


// One cold start through the API: pipelined create (with launch profile `profile`; empty: the
// deployment's first) -> startProcess(echo) -> subscribe, until the first stdout byte; then the
// sandbox's delete.
struct ColdSample {
  double first_byte_ms = 0;
  double create_ms = 0;
  double delete_ms = 0;
};

ColdSample OursCold(Env& env, const std::string& profile) {
  auto& ws = env.ws_();
  ColdSample c;
  SinkState s;
  auto promises = Arm(s);
  double t0 = Now();
  auto create = env.conn->supervisor().createSandboxRequest();
  FillSpec(create.initSpec(), env.ws, profile);
  auto created = create.send();
  auto sandbox = created.getSandbox();
  auto start = sandbox.startProcessRequest();
  FillArgv(start.initSpec(), {"echo", "hello"});
  auto started = start.send();
  auto sub = started.getProcess().subscribeRequest();
  sub.setStream(api::Stream::STDOUT);
  sub.setFromOffset(0);
  sub.setSink(kj::heap<Sink>(s));
  auto subscribed = sub.send();
  double t_created = 0;
  auto created_time = created.then([&t_created](auto&&) { t_created = Now(); });
  created_time.wait(ws);
  promises.first.wait(ws);
  c.first_byte_ms = (s.first_at - t0) * 1000;
  c.create_ms = (t_created - t0) * 1000;
  auto sub_held = subscribed.wait(ws);
  promises.end.wait(ws);
  double d0 = Now();
  auto del = sandbox.deleteRequest();
  del.setForce(true);
  del.send().wait(ws);
  c.delete_ms = (Now() - d0) * 1000;
  return c;
}

void Cold(Env& env) {
  int n = env.opts.quick ? 3 : 15;
  Progress("cold: " + std::to_string(n) + " samples per side");
  Result r{"cold", "ms", "createSandbox+startProcess(echo) -> first stdout byte",
           "runsc run (same rootfs, echo) -> first stdout byte", {}, {}, "ratio <= 1.10",
           [](double ratio, double, double) { return ratio <= 1.10; }, {}};
  std::vector<double> create_ms, exec_first_ms, raw_split_ms, delete_ms, raw_delete_ms,
      raw_create_start_ms;
  for (int i = 0; i < n; ++i) {
    // Ours: pipelined create -> startProcess -> subscribe, as a good client would.
    {
      ColdSample c = OursCold(env, "");
      r.ours.push_back(c.first_byte_ms);
      create_ms.push_back(c.create_ms);
      exec_first_ms.push_back(c.first_byte_ms - c.create_ms);
      delete_ms.push_back(c.delete_ms);
    }
    // Raw: runsc run of the same command.
    {
      std::string id = env.raw->NewBundle({"echo", "hello"});
      int out[2];
      Check(pipe2(out, O_CLOEXEC) == 0, "pipe2");
      int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
      double t0 = Now();
      pid_t pid = env.raw->Start({"run", "--bundle", env.raw->BundleDir(id), id}, null_fd, out[1],
                                 null_fd);
      close(out[1]);
      close(null_fd);
      env.raw->Remember(id);
      double first = FirstByteThenDrain(out[0]);
      close(out[0]);
      int status = WaitPid(pid);
      if (first == 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        Die("raw runsc run of echo failed (status " + std::to_string(status) + ")");
      r.baseline.push_back((first - t0) * 1000);
      env.raw->Delete(id);
    }
    // Raw, split the way the service works: create + start an idle init, then exec echo.
    {
      int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
      double t0 = Now();
      std::string id = env.raw->CreateIdle();
      raw_create_start_ms.push_back((Now() - t0) * 1000);
      int out[2];
      Check(pipe2(out, O_CLOEXEC) == 0, "pipe2");
      pid_t pid = env.raw->Exec(id, {"echo", "hello"}, null_fd, out[1], null_fd);
      close(out[1]);
      close(null_fd);
      double first = FirstByteThenDrain(out[0]);
      close(out[0]);
      WaitPid(pid);
      raw_split_ms.push_back((first - t0) * 1000);
      double d0 = Now();
      env.raw->Delete(id);
      raw_delete_ms.push_back((Now() - d0) * 1000);
    }
  }
  r.extra.push_back({"ours_create_ms_median", Num(Median(create_ms))});
  r.extra.push_back({"ours_exec_to_first_byte_ms_median", Num(Median(exec_first_ms))});
  r.extra.push_back({"ours_delete_ms_median", Num(Median(delete_ms))});
  r.extra.push_back({"raw_delete_ms_median", Num(Median(raw_delete_ms))});
  r.extra.push_back({"raw_create_start_ms_median", Num(Median(raw_create_start_ms))});
  r.extra.push_back({"raw_create_start_exec_ms_median", Num(Median(raw_split_ms))});
  r.extra.push_back({"ours_vs_raw_create_start_exec_ratio",
                     Num(Median(r.ours) / Median(raw_split_ms))});
  g_results.push_back(r);
  Report(r);
}

// One raw `runsc exec` of `true` into `raw_id` with stdio pipes, in ms (it must exit 0).
double RawExecTrueMs(Env& env, const std::string& raw_id) {
  int in[2], out[2], err[2];
  Check(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0,
        "pipe2");
  double t0 = Now();
  pid_t pid = env.raw->Exec(raw_id, {"true"}, in[0], out[1], err[1]);
  for (int fd : {in[0], out[1], err[1]}) close(fd);
  int status = WaitPid(pid);
  double ms = (Now() - t0) * 1000;
  for (int fd : {in[1], out[0], err[0]}) close(fd);
  Expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "raw runsc exec of true failed");
  return ms;
}

// Alternates `n` startProcess(true) -> exit status (pipelined wait) on the open connection with
// `n` raw `runsc exec` of `true` into `raw_id`; returns how many of ours did not exit 0.
int TimeStartToExit(Env& env, api::Sandbox::Client& sandbox, const std::string& raw_id, int n,
                    Result& r) {
  auto& ws = env.ws_();
  int failures = 0;
  for (int i = 0; i < n; ++i) {
    {
      double t0 = Now();
      auto start = sandbox.startProcessRequest();
      FillArgv(start.initSpec(), {"true"});
      auto started = start.send();
      auto waited = started.getProcess().waitRequest().send().wait(ws);
      double t1 = Now();
      if (waited.getStatus().which() != api::ExitStatus::EXIT_CODE ||
          waited.getStatus().getExitCode() != 0)
        ++failures;
      r.ours.push_back((t1 - t0) * 1000);
    }
    r.baseline.push_back(RawExecTrueMs(env, raw_id));
  }
  return failures;
}

void Exec(Env& env, api::Sandbox::Client& sandbox, const std::string& raw_id) {
  int n = env.opts.quick ? 10 : 40;
  Progress("exec: " + std::to_string(n) + " samples per side");
  Result r{"exec", "ms", "startProcess(true) -> exit status (pipelined wait)",
           "runsc exec --process (true), stdio pipes, -> exit", {}, {}, "ratio <= 1.15",
           [](double ratio, double, double) { return ratio <= 1.15; }, {}};
  int failures = TimeStartToExit(env, sandbox, raw_id, n, r);
  r.extra.push_back({"nonzero_exits", std::to_string(failures)});
  g_results.push_back(r);
  Report(r);
}

// The sandbox's spawner state as inspect reports it, once it is "running" (or after 10 s).
std::string AwaitSpawner(Env& env, api::Sandbox::Client& sandbox) {
  std::string state;
  for (int i = 0; i < 500; ++i) {
    state = sandbox.inspectRequest().send().wait(env.ws_()).getInfo().getSpawner().cStr();
    if (state != "starting" && state != "not started") break;
    Sleep(0.02);
  }
  return state;
}

// session_exec: what an agent's tool call costs on Paseo's open connection once its sandbox's
// spawner is up (docs/decisions.md), against raw `runsc exec`.
void SessionExec(Env& env) {
  int n = env.opts.quick ? 10 : 40;
  Progress("session_exec: " + std::to_string(n) + " samples per side");
  auto sandbox = env.CreateSandbox();
  std::string spawner = AwaitSpawner(env, sandbox);
  std::string raw_id = env.raw->CreateIdle();
  Result r{"session_exec", "ms",
           "startProcess(true) -> exit status on an open connection, spawner " + spawner,
           "runsc exec --process (true), stdio pipes, -> exit", {}, {}, "ratio <= 0.40",
           [](double ratio, double, double) { return ratio <= 0.40; }, {}};
  int failures = TimeStartToExit(env, sandbox, raw_id, n, r);
  env.DeleteSandbox(sandbox);
  env.raw->Delete(raw_id);
  r.extra.push_back({"spawner", "\"" + spawner + "\""});
  r.extra.push_back({"nonzero_exits", std::to_string(failures)});
  g_results.push_back(r);
  Report(r);
}

// session_exec_report: session_exec with ProcessSpec.reportUnkept (the shim runs `true` as its
// child, then looks for writes outside the kept directories), against raw `runsc exec`, and the
// same start without the report in the same sandbox, all three alternating. Without the flag
// nothing changes on the command path (no shim): the difference is the whole price of asking.
void SessionExecReport(Env& env) {
  int n = env.opts.quick ? 10 : 40;
  Progress("session_exec_report: " + std::to_string(n) + " samples per side");
  auto sandbox = env.CreateSandbox();
  std::string spawner = AwaitSpawner(env, sandbox);
  std::string raw_id = env.raw->CreateIdle();
  Result r{"session_exec_report", "ms",
           "startProcess(true, reportUnkept) -> exit status on an open connection",
           "runsc exec --process (true), stdio pipes, -> exit", {}, {}, "ratio <= 1.00",
           [](double ratio, double, double) { return ratio <= 1.0; }, {}};
  auto& ws = env.ws_();
  int failures = 0;
  std::vector<double> plain;
  for (int i = 0; i < n; ++i) {
    for (bool report : {true, false}) {
      double t0 = Now();
      auto start = sandbox.startProcessRequest();
      FillArgv(start.initSpec(), {"true"});
      start.getSpec().setReportUnkept(report);
      auto waited = start.send().getProcess().waitRequest().send().wait(ws);
      double ms = (Now() - t0) * 1000;
      if (waited.getStatus().which() != api::ExitStatus::EXIT_CODE ||
          waited.getStatus().getExitCode() != 0)
        ++failures;
      (report ? r.ours : plain).push_back(ms);
    }
    r.baseline.push_back(RawExecTrueMs(env, raw_id));
  }
  env.DeleteSandbox(sandbox);
  env.raw->Delete(raw_id);
  double with = Median(r.ours), without = Median(plain);
  r.extra.push_back({"session_exec_ms_median", Num(without)});
  r.extra.push_back({"report_vs_session_exec_ratio", Num(with / without)});
  r.extra.push_back({"spawner", "\"" + spawner + "\""});
  r.extra.push_back({"nonzero_exits", std::to_string(failures)});
  g_results.push_back(r);
  Report(r);
}

// cli_exec: `paseo-sandbox exec SB -- true`, a new CLI process and connection each time, as a
// script or Paseo's runtime wrapper runs it, against raw `runsc exec`. Also the CLI's own floor:
// `paseo-sandbox --version` (start-up, no connection) and `info` (one connection, one call).
void CliExec(Env& env) {
  int n = env.opts.quick ? 10 : 40;
  Progress("cli_exec: " + std::to_string(n) + " samples per side");
  auto req = env.conn->supervisor().createSandboxRequest();
  FillSpec(req.initSpec(), env.ws);
  auto created = req.send().wait(env.ws_());
  auto sandbox = created.getSandbox();
  std::string id = created.getInfo().getId().cStr();
  std::string spawner = AwaitSpawner(env, sandbox);
  std::string raw_id = env.raw->CreateIdle();
  std::string cli = env.base + "/bin/paseo-sandbox";
  std::string socket = env.service->socket();
  auto run_cli = [&](std::vector<std::string> args) {
    SpawnRequest spawn;
    spawn.path = cli;
    spawn.argv = {cli, "--socket", socket};
    spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
    spawn.env = kToolEnv;
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    spawn.fds = {{0, null_fd}, {1, null_fd}, {2, null_fd}};
    double t0 = Now();
    auto pid = Spawn(spawn);
    close(null_fd);
    if (!pid.ok()) Die("spawn " + cli + ": " + std::string(pid.status().message()));
    int status = WaitPid(*pid);
    double ms = (Now() - t0) * 1000;
    Expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "paseo-sandbox " + args.at(0) + " failed (status " + std::to_string(status) + ")");
    return ms;
  };
  Result r{"cli_exec", "ms", "paseo-sandbox exec SB -- true: CLI start -> exit",
           "runsc exec --process (true), stdio pipes, -> exit", {}, {}, "ratio <= 1.20",
           [](double ratio, double, double) { return ratio <= 1.20; }, {}};
  std::vector<double> version_ms, info_ms;
  for (int i = 0; i < n; ++i) {
    r.ours.push_back(run_cli({"exec", id, "--", "true"}));
    r.baseline.push_back(RawExecTrueMs(env, raw_id));
    version_ms.push_back(run_cli({"--version"}));
    info_ms.push_back(run_cli({"info"}));
  }
  env.DeleteSandbox(sandbox);
  env.raw->Delete(raw_id);
  r.extra.push_back({"spawner", "\"" + spawner + "\""});
  r.extra.push_back({"cli_version_ms_median", Num(Median(version_ms))});
  r.extra.push_back({"cli_info_ms_median", Num(Median(info_ms))});
  g_results.push_back(r);
  Report(r);
}

void Throughput(Env& env, api::Sandbox::Client& sandbox, const std::string& raw_id) {
  uint64_t bytes = env.opts.quick ? 64 * kMiB : 1024 * kMiB;
  int n = env.opts.quick ? 3 : 5;
  Progress("throughput: " + std::to_string(bytes / kMiB) + " MiB, " + std::to_string(n) +
           " samples per side");
  std::vector<std::string> argv = DdArgv(bytes);
  Result r{"throughput", "MiB/s",
           "dd bs=1M of N bytes, stdout -> subscribe sink in this client (delivered bytes / time)",
           "runsc exec of the same, stdout = host /dev/null", {}, {}, "ratio >= 0.80",
           [](double ratio, double, double) { return ratio >= 0.80; }, {}};
  auto& ws = env.ws_();
  uint64_t lost_total = 0, short_total = 0;
  pid_t broker = env.service->broker_pid();
  pid_t helper = env.service->privhelper_pid();
  std::string our_root = env.service->runsc_root();
  std::string raw_root = env.raw->Root();
  CpuWindow ours_cpu, raw_cpu;
  ours_cpu.Add("broker", [broker] { return std::vector<pid_t>{broker}; });
  ours_cpu.Add("privhelper", [helper] { return std::vector<pid_t>{helper}; });
  ours_cpu.Add("client", [] { return std::vector<pid_t>{getpid()}; });
  ours_cpu.Add("runsc", [our_root] { return PidsMatching(our_root); });
  raw_cpu.Add("runsc", [raw_root] { return PidsMatching(raw_root); });
  std::map<std::string, double> ours_used, raw_used;
  std::vector<double> pipe_rate;
  Perf perf(env.opts.perf_dir, "throughput-broker-and-client", {broker, getpid()});
  for (int i = 0; i < n; ++i) {
    {
      ours_cpu.Begin();
      SinkState s;
      auto promises = Arm(s);
      double t0 = Now();
      auto start = sandbox.startProcessRequest();
      FillArgv(start.initSpec(), argv);
      auto started = start.send();
      auto sub = started.getProcess().subscribeRequest();
      sub.setStream(api::Stream::STDOUT);
      sub.setFromOffset(0);
      sub.setSink(kj::heap<Sink>(s));
      auto held = sub.send().wait(ws);
      promises.end.wait(ws);
      double t1 = Now();
      ours_cpu.End(ours_used);
      lost_total += s.lost;
      if (s.next != bytes) ++short_total;
      // Bytes actually delivered: the broker never waits for a subscriber, so one that falls
      // more than outputBufferBytes behind is sent a gap instead of the bytes.
      r.ours.push_back(static_cast<double>(s.bytes) / kMiB / (t1 - t0));
    }
    {
      int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
      raw_cpu.Begin();
      double t0 = Now();
      pid_t pid = env.raw->Exec(raw_id, argv, null_fd, null_fd, null_fd);
      close(null_fd);
      int status = WaitPid(pid);
      double t1 = Now();
      raw_cpu.End(raw_used);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) Die("raw throughput exec failed");
      r.baseline.push_back(static_cast<double>(bytes) / kMiB / (t1 - t0));
    }
    {
      // Extra reference: the same into a host pipe this process drains (gVisor's pipe path
      // without the broker, capnp or the client).
      int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
      int out[2];
      Check(pipe2(out, O_CLOEXEC) == 0, "pipe2");
      double t0 = Now();
      pid_t pid = env.raw->Exec(raw_id, argv, null_fd, out[1], null_fd);
      close(out[1]);
      close(null_fd);
      FirstByteThenDrain(out[0]);
      close(out[0]);
      WaitPid(pid);
      pipe_rate.push_back(static_cast<double>(bytes) / kMiB / (Now() - t0));
    }
  }
  perf.Stop();
  auto share = [](std::map<std::string, double>& used) {
    std::string j = "{";
    bool first = true;
    for (const auto& [k, v] : used) {
      if (k == "wall") continue;
      j += std::string(first ? "" : ", ") + Quote(k) + ": " + Num(v / used["wall"], 2);
      first = false;
    }
    return j + "}";
  };
  r.extra.push_back({"ours_cpu_cores_busy", share(ours_used)});
  r.extra.push_back({"baseline_cpu_cores_busy", share(raw_used)});
  r.extra.push_back({"raw_exec_to_host_pipe_mib_s_median", Num(Median(pipe_rate), 1)});
  r.extra.push_back({"bytes", std::to_string(bytes)});
  r.extra.push_back({"lost_bytes_total", std::to_string(lost_total)});
  r.extra.push_back({"lost_fraction", Num(static_cast<double>(lost_total) / (bytes * n), 3)});
  r.extra.push_back({"incomplete_streams", std::to_string(short_total)});
  g_results.push_back(r);
  Report(r);
}

void Replay(Env& env, api::Sandbox::Client& sandbox, const std::string& raw_id) {
  const uint64_t history = 64 * kMiB;
  int n = env.opts.quick ? 5 : 20;
  Progress("replay: 64 MiB of history, " + std::to_string(n) + " samples");
  auto& ws = env.ws_();
  // A live process that has written 64 MiB and then idles.
  auto start = sandbox.startProcessRequest();
  FillArgv(start.initSpec(),
           {"sh", "-c", "dd if=/dev/zero bs=1048576 count=64 2>/dev/null; exec sleep 3600"});
  auto process = start.send().wait(ws).getProcess();
  double deadline = Now() + 60;
  while (true) {
    auto info = process.infoRequest().send().wait(ws);
    if (info.getInfo().getStdoutBytes() >= history) break;
    if (Now() > deadline) Die("replay: the process did not write 64 MiB in 60 s");
    env.io->provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(ws);
  }
  Result first{"replay_first_byte", "ms", "subscribe(fromOffset = 64 MiB back) -> first write",
               "Process.info() round trip on the same connection", {}, {},
               "ours <= 5 ms", [](double, double ours, double) { return ours <= 5.0; }, {}};
  Result catchup{"replay_catchup", "ms", "subscribe 64 MiB back -> caught up to the live end",
                 "runsc exec writing the same 64 MiB live to host /dev/null", {}, {},
                 "(none; ratio < 1 = replay beats regenerating)", nullptr, {}};
  for (int i = 0; i < n; ++i) {
    {
      // A fresh connection each time, already bootstrapped, so only the replay is timed.
      client::Connection c(*env.io, env.service->socket());
      auto sb = c.supervisor().getSandboxRequest();
      // The process's sandbox id: through the capability we hold.
      auto sinfo = sandbox.inspectRequest().send().wait(ws);
      sb.setId(sinfo.getInfo().getId());
      auto remote_sb = sb.send().getSandbox();
      auto pinfo = process.infoRequest().send().wait(ws);
      auto gp = remote_sb.getProcessRequest();
      gp.setId(pinfo.getInfo().getId());
      auto remote = gp.send().wait(ws).getProcess();
      remote.infoRequest().send().wait(ws);  // warm: everything resolved
      SinkState s;
      s.target = history;
      auto promises = Arm(s);
      double t0 = Now();
      auto sub = remote.subscribeRequest();
      sub.setStream(api::Stream::STDOUT);
      sub.setFromOffset(0);
      sub.setSink(kj::heap<Sink>(s));
      auto held = sub.send();
      promises.first.wait(ws);
      promises.reached.wait(ws);
      first.ours.push_back((s.first_at - t0) * 1000);
      catchup.ours.push_back((s.target_at - t0) * 1000);
      if (s.lost > 0) Die("replay: history was lost (buffer too small?)");
      // Baseline for the first byte: one request/response on the same, warm connection.
      double b0 = Now();
      remote.infoRequest().send().wait(ws);
      first.baseline.push_back((Now() - b0) * 1000);
    }
    {
      int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
      double t0 = Now();
      pid_t pid = env.raw->Exec(raw_id, DdArgv(64 * kMiB), null_fd, null_fd, null_fd);
      close(null_fd);
      WaitPid(pid);
      catchup.baseline.push_back((Now() - t0) * 1000);
    }
  }
  auto kill_req = process.signalRequest();
  kill_req.setSignal(SIGKILL);
  kill_req.send().wait(ws);
  process.waitRequest().send().wait(ws);
  g_results.push_back(first);
  Report(first);
  g_results.push_back(catchup);
  Report(catchup);
}

void Density(Env& env) {
  int n = env.opts.quick ? 5 : 100;
  int rounds = env.opts.quick ? 1 : 2;
  Progress("density: " + std::to_string(n) + " idle sandboxes, " + std::to_string(rounds) +
           " round(s) per side");
  pid_t broker = env.service->broker_pid();
  if (broker < 0) Die("cannot find the broker process");
  Mem broker0 = MemOf(broker), helper0 = MemOf(env.service->privhelper_pid());
  Result per{"density_per_sandbox", "MiB", "(runsc procs + broker + privhelper) RSS / N",
             "raw runsc procs RSS / N", {}, {}, "(report; see extra)", nullptr, {}};
  Result brk{"density_broker_rss", "MiB", "broker VmRSS with N idle sandboxes",
             "broker VmRSS with 0 sandboxes", {}, {}, "ours <= 50 MiB (+buffers: 0 idle)",
             [](double, double ours, double) { return ours <= 50.0; }, {}};
  std::vector<double> helper_rss, beyond_rss, beyond_pss, service_marginal, runsc_diff, ours_runsc_rss,
      raw_runsc_rss, ours_pss_per, raw_pss_per, create_ms;
  for (int round = 0; round < rounds; ++round) {
    {
      std::vector<api::Sandbox::Client> sandboxes;
      double t0 = Now();
      for (int i = 0; i < n; ++i) sandboxes.push_back(env.CreateSandbox());
      create_ms.push_back((Now() - t0) * 1000 / n);
      Sleep(2);
      Mem b = MemOf(broker), h = MemOf(env.service->privhelper_pid());
      Mem r = MemOfMatching(env.service->runsc_root());
      per.ours.push_back(MiB(r.rss_kib + b.rss_kib + h.rss_kib) / n);
      brk.ours.push_back(MiB(b.rss_kib));
      brk.baseline.push_back(MiB(broker0.rss_kib));
      helper_rss.push_back(MiB(h.rss_kib));
      ours_runsc_rss.push_back(MiB(r.rss_kib));
      ours_pss_per.push_back(MiB(r.pss_kib + b.pss_kib + h.pss_kib) / n);
      service_marginal.push_back((MiB(b.rss_kib) - MiB(broker0.rss_kib) + MiB(h.rss_kib) -
                                  MiB(helper0.rss_kib)) /
                                 n);
      Progress("density: ours N=" + std::to_string(n) + ": runsc " + Num(MiB(r.rss_kib), 1) +
               " MiB in " + std::to_string(r.processes) + " processes, broker " +
               Num(MiB(b.rss_kib), 1) + " MiB, privhelper " + Num(MiB(h.rss_kib), 1) + " MiB");
      kj::Vector<kj::Promise<void>> deletions;
      for (auto& sb : sandboxes) {
        auto del = sb.deleteRequest();
        del.setForce(true);
        deletions.add(del.send().ignoreResult());
      }
      kj::joinPromises(deletions.releaseAsArray()).wait(env.ws_());
    }
    {
      std::vector<std::string> ids;
      for (int i = 0; i < n; ++i) ids.push_back(env.raw->CreateIdle());
      Sleep(2);
      Mem r = MemOfMatching(env.raw->Root());
      per.baseline.push_back(MiB(r.rss_kib) / n);
      raw_runsc_rss.push_back(MiB(r.rss_kib));
      raw_pss_per.push_back(MiB(r.pss_kib) / n);
      Progress("density: raw N=" + std::to_string(n) + ": runsc " + Num(MiB(r.rss_kib), 1) +
               " MiB in " + std::to_string(r.processes) + " processes");
      env.raw->DeleteMany(ids);
    }
  }
  for (size_t i = 0; i < per.ours.size(); ++i) {
    beyond_rss.push_back(per.ours[i] - per.baseline[i]);
    beyond_pss.push_back(ours_pss_per[i] - raw_pss_per[i]);
    runsc_diff.push_back((ours_runsc_rss[i] - raw_runsc_rss[i]) / n);
  }
  per.extra.push_back({"n", std::to_string(n)});
  per.extra.push_back({"ours_runsc_rss_mib", Num(Median(ours_runsc_rss), 1)});
  per.extra.push_back({"raw_runsc_rss_mib", Num(Median(raw_runsc_rss), 1)});
  per.extra.push_back({"beyond_runsc_rss_mib_per_sandbox", Num(Median(beyond_rss))});
  per.extra.push_back({"beyond_runsc_pss_mib_per_sandbox", Num(Median(beyond_pss))});
  per.extra.push_back({"service_marginal_rss_mib_per_sandbox", Num(Median(service_marginal))});
  per.extra.push_back({"runsc_rss_diff_mib_per_sandbox", Num(Median(runsc_diff))});
  per.extra.push_back({"ours_pss_mib_per_sandbox", Num(Median(ours_pss_per))});
  per.extra.push_back({"raw_pss_mib_per_sandbox", Num(Median(raw_pss_per))});
  per.extra.push_back({"ours_create_ms_per_sandbox", Num(Median(create_ms), 1)});
  brk.extra.push_back({"n", std::to_string(n)});
  brk.extra.push_back({"privhelper_rss_mib", Num(Median(helper_rss), 1)});
  brk.extra.push_back({"privhelper_rss_mib_idle", Num(MiB(helper0.rss_kib), 1)});
  brk.extra.push_back({"output_buffer_bytes_per_stream", std::to_string(kOutputBufferBytes)});
  g_results.push_back(per);
  Report(per);
  g_results.push_back(brk);
  Report(brk);
}

struct FanClient {
  SinkState state;
  kj::Own<client::Connection> conn;
  kj::Maybe<api::Subscription::Client> sub;
};

void FanOut(Env& env, api::Sandbox::Client& sandbox) {
  int clients = env.opts.quick ? 50 : 1000;
  int rounds = env.opts.quick ? 2 : 3;
  int per_block = env.opts.quick ? 3 : 10;
  Progress("fan-out: " + std::to_string(clients) + " subscribed clients, " +
           std::to_string(rounds) + " rounds of " + std::to_string(per_block) + " per side");
  auto& ws = env.ws_();
  std::string sandbox_id = sandbox.inspectRequest().send().wait(ws).getInfo().getId();
  auto start = sandbox.startProcessRequest();
  FillArgv(start.initSpec(), {"sh", "-c", "while :; do echo tick; sleep 1; done"});
  auto live_started = start.send().wait(ws);
  auto live = live_started.getProcess();
  std::string live_id = live_started.getInfo().getId();

  Result r{"fanout", "ms", "startProcess(true)->exit with N clients subscribed to a live process",
           "the same with no other clients", {}, {}, "ratio <= 2.0",
           [](double ratio, double, double) { return ratio <= 2.0; }, {}};
  std::vector<double> connect_ms, broker_rss;
  int failed_clients = 0;
  uint64_t min_bytes = UINT64_MAX;
  auto measure = [&](std::vector<double>& into) {
    for (int i = 0; i < per_block; ++i) {
      double t0 = Now();
      auto req = sandbox.startProcessRequest();
      FillArgv(req.initSpec(), {"true"});
      req.send().getProcess().waitRequest().send().wait(ws);
      into.push_back((Now() - t0) * 1000);
    }
  };
  for (int round = 0; round < rounds; ++round) {
    {
      std::vector<kj::Own<FanClient>> fan;
      double t0 = Now();
      kj::Vector<kj::Promise<void>> subscribed;
      for (int i = 0; i < clients; ++i) {
        auto fc = kj::heap<FanClient>();
        fc->conn = kj::heap<client::Connection>(*env.io, env.service->socket());
        auto gs = fc->conn->supervisor().getSandboxRequest();
        gs.setId(sandbox_id);
        auto gp = gs.send().getSandbox().getProcessRequest();
        gp.setId(live_id);
        auto sub = gp.send().getProcess().subscribeRequest();
        sub.setStream(api::Stream::STDOUT);
        sub.setFromOffset(0);
        sub.setSink(kj::heap<Sink>(fc->state));
        FanClient* raw = fc.get();
        subscribed.add(sub.send()
                           .then([raw](auto&& resp) { raw->sub = resp.getSubscription(); })
                           .catch_([&failed_clients](kj::Exception&& e) {
                             if (failed_clients++ == 0)
                               Progress("fan-out: a client failed: " + client::ErrorText(e));
                           }));
        fan.push_back(kj::mv(fc));
      }
      kj::joinPromises(subscribed.releaseAsArray()).wait(ws);
      connect_ms.push_back((Now() - t0) * 1000);
      // Let every subscriber receive a live tick after the join.
      env.io->provider->getTimer().afterDelay(1500 * kj::MILLISECONDS).wait(ws);
      measure(r.ours);
      pid_t broker = env.service->broker_pid();
      if (broker > 0) broker_rss.push_back(MiB(MemOf(broker).rss_kib));
      for (auto& fc : fan) min_bytes = std::min(min_bytes, fc->state.bytes);
      fan.clear();
      // Give the broker time to notice the disconnects before the quiet block.
      env.io->provider->getTimer().afterDelay(1000 * kj::MILLISECONDS).wait(ws);
    }
    measure(r.baseline);
  }
  auto kill_req = live.signalRequest();
  kill_req.setSignal(SIGKILL);
  kill_req.send().wait(ws);
  live.waitRequest().send().wait(ws);
  r.extra.push_back({"clients", std::to_string(clients)});
  r.extra.push_back({"connect_and_subscribe_all_ms_median", Num(Median(connect_ms), 1)});
  r.extra.push_back({"broker_rss_mib_with_clients", Num(Median(broker_rss), 1)});
  r.extra.push_back({"failed_clients", std::to_string(failed_clients)});
  r.extra.push_back({"min_bytes_received_per_client", std::to_string(min_bytes)});
  g_results.push_back(r);
  Report(r);
}

// ------------------------------------------------------------------ stuck subscriber

// Waits for `p`, failing if it takes more than `seconds`: a stalled stream must fail the
// bench, not hang it.
void WaitAtMost(Env& env, kj::Promise<void> p, double seconds, const std::string& what) {
  bool late = false;
  auto deadline = env.io->provider->getTimer()
                      .afterDelay(static_cast<int64_t>(seconds * 1000) * kj::MILLISECONDS)
                      .then([&late] { late = true; });
  p.exclusiveJoin(kj::mv(deadline)).wait(env.ws_());
  Expect(!late, what + ": nothing after " + Num(seconds, 0) + " s");
}

// What one subscription was told about its stream. Every write must start where the previous
// write plus any announced gap ended, so a consistent account means each byte arrived in order
// and exactly once, or was announced lost.
struct StreamAccount {
  uint64_t next = 0;                 // where the next write must start
  uint64_t bytes = 0;                // bytes written to the sink
  uint64_t lost = 0;                 // bytes announced lost by gap()
  uint64_t resumed_at = UINT64_MAX;  // where the first write after a gap started
  uint64_t end_offset = 0;
  bool ended = false;
  bool exit_ok = false;  // end() reported exit code 0
  double ended_at = 0;
  std::string error;  // the first inconsistency, empty if none
  kj::Own<kj::PromiseFulfiller<void>> on_end;

  kj::Promise<void> WhenEnded() {
    auto paf = kj::newPromiseAndFulfiller<void>();
    on_end = kj::mv(paf.fulfiller);
    return kj::mv(paf.promise);
  }
  void Fail(const std::string& why) {
    if (error.empty()) error = why;
  }
};

// Holds a sink's write()s while closed. To the broker that is a client that stopped reading:
// capnp's stream flow control lets it send one window of writes and then makes it wait, as it
// would for a write returning kj::NEVER_DONE. Open() completes the held writes and passes later
// ones, so the bench can then check what the stuck subscriber is owed.
class Gate {
 public:
  kj::Promise<void> Pass() {
    if (open_) return kj::READY_NOW;
    auto paf = kj::newPromiseAndFulfiller<void>();
    held_.add(kj::mv(paf.fulfiller));
    return kj::mv(paf.promise);
  }
  void Open() {
    open_ = true;
    for (auto& f : held_) f->fulfill();
    held_.clear();
  }
  size_t held() const { return held_.size(); }

 private:
  bool open_ = false;
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> held_;
};

// Keeps a StreamAccount of one subscription; with a gate, its writes complete only once the
// gate is open.
class AccountSink final : public OutputSink::Server {
 public:
  AccountSink(StreamAccount& a, Gate* gate) : a_(a), gate_(gate) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto p = context.getParams();
    uint64_t offset = p.getOffset();
    if (offset != a_.next)
      a_.Fail("write at offset " + std::to_string(offset) + ", expected " +
              std::to_string(a_.next));
    if (a_.lost > 0 && a_.resumed_at == UINT64_MAX) a_.resumed_at = offset;
    a_.bytes += p.getData().size();
    a_.next = offset + p.getData().size();
    if (gate_ == nullptr) return kj::READY_NOW;
    return gate_->Pass();
  }
  kj::Promise<void> gap(GapContext context) override {
    uint64_t lost = context.getParams().getLostBytes();
    if (lost == 0) a_.Fail("gap() of 0 bytes");
    a_.lost += lost;
    a_.next += lost;
    return kj::READY_NOW;
  }
  kj::Promise<void> end(EndContext context) override {
    auto p = context.getParams();
    if (a_.ended) a_.Fail("end() twice");
    a_.ended = true;
    a_.ended_at = Now();
    a_.end_offset = p.getEndOffset();
    if (a_.end_offset != a_.next)
      a_.Fail("end() at offset " + std::to_string(a_.end_offset) + " after writes up to " +
              std::to_string(a_.next));
    a_.exit_ok = p.getStatus().which() == api::ExitStatus::EXIT_CODE &&
                 p.getStatus().getExitCode() == 0;
    if (a_.on_end) a_.on_end->fulfill();
    return kj::READY_NOW;
  }

 private:
  StreamAccount& a_;
  Gate* gate_;
};

// Fails unless `a` is a consistent account of a whole `total`-byte stream of a process that
// exited 0 in which every byte from `oldest_kept` on was delivered: with `oldest_kept` 0,
// every byte and no gap; otherwise, if the subscriber was behind it, one gap up to exactly
// `oldest_kept` (continuity then means nothing before it was left out or sent twice).
void ExpectAccount(const StreamAccount& a, uint64_t total, uint64_t oldest_kept,
                   const std::string& who) {
  Expect(a.error.empty(), who + ": " + a.error);
  Expect(a.ended && a.end_offset == total, who + ": end() at offset " +
                                               std::to_string(a.end_offset) + " of " +
                                               std::to_string(total));
  Expect(a.exit_ok, who + ": end() did not report exit code 0");
  if (oldest_kept == 0 || a.lost == 0) {
    Expect(a.lost == 0 && a.bytes == total,
           who + ": " + std::to_string(a.lost) + " bytes announced lost, none expected");
  } else {
    Expect(a.resumed_at == oldest_kept,
           who + ": resumed at offset " + std::to_string(a.resumed_at) +
               " after its gap, expected the oldest kept byte " + std::to_string(oldest_kept));
  }
}

// Subscribes `sink` to stdout from offset 0 and keeps the Subscription in `into` (dropping it
// would cancel the delivery).
kj::Promise<void> SubscribeStdout(api::Process::Client process, OutputSink::Client sink,
                                  kj::Maybe<api::Subscription::Client>& into) {
  auto req = process.subscribeRequest();
  req.setStream(api::Stream::STDOUT);
  req.setFromOffset(0);
  req.setSink(kj::mv(sink));
  return req.send()
      .then([&into](auto&& resp) { into = resp.getSubscription(); })
      .eagerlyEvaluate(nullptr);
}

struct StuckRun {
  double live_mib_s = 0;     // stream bytes / (startProcess -> the live subscriber's end())
  double process_ms = 0;     // startProcess -> wait() answered
  uint64_t stuck_bytes = 0;  // bytes the stuck subscriber's write() saw while it was stuck
  uint64_t stuck_lost = 0;   // the gap it was sent once released
};

// Runs `argv` (which writes `bytes` to stdout) once in `sandbox`, read from offset 0 by a live
// subscriber in this client and, with `stuck`, also by a subscriber on a second connection
// whose writes do not complete. Checks that the live subscriber got every byte in order, that
// the process exited 0 and, once the stuck one is released, that it is sent a gap up to exactly
// the oldest byte still kept and then every byte from there.
StuckRun RunWithSubscribers(Env& env, api::Sandbox::Client& sandbox, const std::string& sandbox_id,
                            const std::vector<std::string>& argv, uint64_t bytes, bool stuck) {
  constexpr double kLimit = 120;  // seconds any one step may take
  auto& ws = env.ws_();
  // Declared first so it is destroyed last, after every capability it carries.
  kj::Own<client::Connection> other;
  if (stuck) {
    other = kj::heap<client::Connection>(*env.io, env.service->socket());
    other->supervisor().infoRequest().send().wait(ws);  // bootstrapped before the clock starts
  }
  StreamAccount live, late;
  Gate gate;
  kj::Maybe<api::Subscription::Client> live_handle, stuck_handle;
  double exited_at = 0;
  bool exit_ok = false;
  auto live_ended = live.WhenEnded();
  auto late_ended = late.WhenEnded();

  double t0 = Now();
  auto start = sandbox.startProcessRequest();
  FillArgv(start.initSpec(), argv);
  auto started = start.send();
  auto process = started.getProcess();
  auto live_subscribed =
      SubscribeStdout(process, kj::heap<AccountSink>(live, nullptr), live_handle);
  auto waited = process.waitRequest()
                    .send()
                    .then([&](auto&& resp) {
                      exited_at = Now();
                      auto status = resp.getStatus();
                      exit_ok = status.which() == api::ExitStatus::EXIT_CODE &&
                                status.getExitCode() == 0;
                    })
                    .eagerlyEvaluate(nullptr);
  // Both configurations wait for the process id here, so they differ only in the stuck
  // subscriber, which needs the id to find the process from its own connection.
  auto started_resp = started.wait(ws);
  std::string process_id = started_resp.getInfo().getId();
  kj::Promise<void> late_subscribed = kj::READY_NOW;
  if (stuck) {
    auto gs = other->supervisor().getSandboxRequest();
    gs.setId(sandbox_id);
    auto gp = gs.send().getSandbox().getProcessRequest();
    gp.setId(process_id);
    late_subscribed =
        SubscribeStdout(gp.send().getProcess(), kj::heap<AccountSink>(late, &gate), stuck_handle);
  }
  WaitAtMost(env, kj::mv(live_ended), kLimit, "the live subscriber's end()");
  WaitAtMost(env, kj::mv(waited), kLimit, "wait()");
  WaitAtMost(env, kj::mv(live_subscribed), kLimit, "the live subscribe()");

  StuckRun run;
  run.live_mib_s = static_cast<double>(bytes) / kMiB / (live.ended_at - t0);
  run.process_ms = (exited_at - t0) * 1000;
  ExpectAccount(live, bytes, 0, std::string("live subscriber") + (stuck ? " (stuck one too)" : ""));
  Expect(exit_ok, "wait(): the process did not exit 0");
  if (!stuck) return run;

  WaitAtMost(env, kj::mv(late_subscribed), kLimit, "the stuck subscriber's subscribe()");
  // Otherwise the stuck configuration measured nothing.
  Expect(gate.held() > 0, "the stuck subscriber was holding no write when the stream ended");
  run.stuck_bytes = late.bytes;
  gate.Open();
  WaitAtMost(env, kj::mv(late_ended), kLimit, "the released subscriber's end()");
  // It fell behind at its first write, so once the process has written more than the buffer
  // it is owed a gap, then the newest outputBufferBytes.
  uint64_t oldest_kept = bytes > kOutputBufferBytes ? bytes - kOutputBufferBytes : 0;
  ExpectAccount(late, bytes, oldest_kept, "released subscriber");
  Expect(oldest_kept == 0 || late.lost > 0, "released subscriber: no gap, but it was stuck");
  run.stuck_lost = late.lost;
  stuck_handle = nullptr;
  return run;
}

// The requirement: a subscriber that stops reading slows neither another subscriber nor the
// process. The live subscriber's rate with a stuck second subscriber on the same stream (ours)
// against its rate alone (baseline), so the target reads ratio >= 0.90.
void StuckSubscriber(Env& env) {
  uint64_t bytes = env.opts.quick ? 64 * kMiB : 256 * kMiB;
  int n = env.opts.quick ? 3 : 10;
  Progress("stuck subscriber: " + std::to_string(bytes / kMiB) + " MiB, " + std::to_string(n) +
           " samples per side");
  std::vector<std::string> argv = DdArgv(bytes);
  Result r{"stuck_subscriber", "MiB/s",
           "dd bs=1M of N bytes -> a live subscriber, with a second subscriber (another "
           "connection) whose write() never completes",
           "the same live subscriber alone", {}, {}, "ratio >= 0.90",
           [](double ratio, double, double) { return ratio >= 0.90; }, {}};
  std::vector<double> alone_ms, stuck_ms, stuck_lost;
  // B / A within each pair: the two runs of a pair are adjacent in time, so on a shared machine
  // this is steadier than the ratio of the medians.
  std::vector<double> paired;
  uint64_t stuck_bytes_max = 0;
  // Every ended process keeps up to outputBufferBytes of log on the work tmpfs until its
  // sandbox is deleted: move to a fresh sandbox before that passes 1.5 GiB.
  const uint64_t kept_per_run = std::min(bytes, kOutputBufferBytes);
  const uint64_t budget = 1536 * kMiB;
  api::Sandbox::Client sandbox = env.CreateSandbox();
  std::string sandbox_id;
  uint64_t kept = 0;
  int sandboxes = 0;
  auto fresh = [&] {
    if (sandboxes++ > 0) {
      env.DeleteSandbox(sandbox);
      sandbox = env.CreateSandbox();
    }
    sandbox_id = sandbox.inspectRequest().send().wait(env.ws_()).getInfo().getId();
    // One unmeasured run: the sandbox's first process pays one-off costs.
    RunWithSubscribers(env, sandbox, sandbox_id, argv, bytes, false);
    kept = kept_per_run;
  };
  fresh();
  for (int i = 0; i < n; ++i) {
    if (kept + 2 * kept_per_run > budget) fresh();
    // Which configuration goes first alternates, so a drift within a pair (page cache, logs
    // piling up) falls on both sides.
    for (bool stuck : {i % 2 == 1, i % 2 == 0}) {
      StuckRun run = RunWithSubscribers(env, sandbox, sandbox_id, argv, bytes, stuck);
      (stuck ? r.ours : r.baseline).push_back(run.live_mib_s);
      (stuck ? stuck_ms : alone_ms).push_back(run.process_ms);
      if (stuck) {
        stuck_bytes_max = std::max(stuck_bytes_max, run.stuck_bytes);
        stuck_lost.push_back(static_cast<double>(run.stuck_lost));
      }
    }
    kept += 2 * kept_per_run;
    paired.push_back(r.ours.back() / r.baseline.back());
  }
  env.DeleteSandbox(sandbox);
  unlink((env.ws + "/fetch").c_str());
  r.extra.push_back({"bytes", std::to_string(bytes)});
  r.extra.push_back({"output_buffer_bytes", std::to_string(kOutputBufferBytes)});
  r.extra.push_back({"live_time_ratio", Num(Median(r.baseline) / Median(r.ours))});
  r.extra.push_back({"paired_ratio_median", Num(Median(paired))});
  r.extra.push_back({"paired_ratio_p10", Num(Quantile(paired, 0.1))});
  r.extra.push_back({"process_ms_alone_median", Num(Median(alone_ms), 1)});
  r.extra.push_back({"process_ms_with_stuck_median", Num(Median(stuck_ms), 1)});
  r.extra.push_back({"process_time_ratio", Num(Median(stuck_ms) / Median(alone_ms))});
  r.extra.push_back({"stuck_bytes_taken_while_stuck_max", std::to_string(stuck_bytes_max)});
  r.extra.push_back({"stuck_gap_bytes_median", Num(Median(stuck_lost), 0)});
  r.extra.push_back({"sandboxes", std::to_string(sandboxes)});
  g_results.push_back(r);
  Report(r);
}

// ------------------------------------------------------------------ runtime exec

// One run of paseo-sandbox-runtime (runtime/) as Paseo's daemon starts it: `stdin_text` on
// fd 0, `control` written to fd 3 and closed, fds 1, 2 and 4 read to their end. Returns the
// wall time (spawn to reaped) in ms; its wait status and fd 4 / stdout go to the out-params.
struct RuntimeRun {
  double ms = 0;
  int status = -1;
  std::string out, events;
};

RuntimeRun RunRuntime(const std::string& binary, const std::vector<std::string>& args,
                      const std::string& stdin_text, const std::string& control) {
  int in[2], out[2], err[2], ctl[2], ev[2];
  for (int* p : {in, out, err, ctl, ev}) Check(pipe2(p, O_CLOEXEC) == 0, "pipe2");
  SpawnRequest req;
  req.path = binary;
  req.argv = {binary};
  req.argv.insert(req.argv.end(), args.begin(), args.end());
  req.env = kToolEnv;
  req.fds = {{0, in[0]}, {1, out[1]}, {2, err[1]}};
  if (!control.empty()) req.fds.insert(req.fds.end(), {{3, ctl[0]}, {4, ev[1]}});
  RuntimeRun run;
  double t0 = Now();
  auto pid = Spawn(req);
  if (!pid.ok()) Die("spawn " + binary + ": " + std::string(pid.status().message()));
  for (int fd : {in[0], out[1], err[1], ctl[0], ev[1]}) close(fd);
  // Small messages: the pipes take them whole without a reader.
  Check(write(in[1], stdin_text.data(), stdin_text.size()) == static_cast<ssize_t>(stdin_text.size()),
        "write the runtime's stdin");
  close(in[1]);
  Check(write(ctl[1], control.data(), control.size()) == static_cast<ssize_t>(control.size()),
        "write fd 3");
  close(ctl[1]);
  auto drain = [](int fd) {
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof(buf))) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      text.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return text;
  };
  run.events = drain(ev[0]);
  run.out = drain(out[0]);
  std::string errors = drain(err[0]);
  run.status = WaitPid(*pid);
  run.ms = (Now() - t0) * 1000;
  if (!WIFEXITED(run.status) || WEXITSTATUS(run.status) != 0)
    Expect(false, "paseo-sandbox-runtime " + args.at(0) + " failed (status " +
                      std::to_string(run.status) + "): " + errors);
  return run;
}

// `paseo-sandbox run -- true` through the CLI, from its spawn to its exit (it creates the
// sandbox, runs the command, deletes the sandbox and exits with its status), against `runsc run`
// of `true` on the same rootfs, spawn to exit (a container that ends by itself tears down in
// runsc's own process). Extra: `paseo-sandbox info` (start-up, connect, one round trip), the
// CLI's own floor.
void Oneshot(Env& env) {
  int n = env.opts.quick ? 5 : 20;
  Progress("oneshot: " + std::to_string(n) + " samples per side");
  std::string cli = env.base + "/bin/paseo-sandbox";
  CopyExecutable(Runfile("client/paseo-sandbox"), cli);
  std::vector<std::string> socket = {"--socket", env.service->socket()};
  std::vector<std::string> run = socket;
  run.insert(run.end(), {"run", "--deployment", "bench", "--workspace",
                         env.ws + ":/workspace:rw", "--", "true"});
  std::vector<std::string> info = socket;
  info.push_back("info");
  Result r{"oneshot", "ms", "paseo-sandbox run -- true: spawn -> exit (create, run, delete)",
           "runsc run (same rootfs, true): spawn -> exit", {}, {}, "ratio <= 1.30",
           [](double ratio, double, double) { return ratio <= 1.30; }, {}};
  std::vector<double> info_ms;
  for (int i = 0; i < n; ++i) {
    r.ours.push_back(RunRuntime(cli, run, "", "").ms);
    info_ms.push_back(RunRuntime(cli, info, "", "").ms);
    std::string id = env.raw->NewBundle({"true"});
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    double t0 = Now();
    pid_t pid =
        env.raw->Start({"run", "--bundle", env.raw->BundleDir(id), id}, null_fd, null_fd, null_fd);
    close(null_fd);
    env.raw->Remember(id);
    int status = WaitPid(pid);
    r.baseline.push_back((Now() - t0) * 1000);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      Die("raw runsc run of true failed (status " + std::to_string(status) + ")");
    env.raw->Delete(id);
  }
  r.extra.push_back({"cli_info_ms_median", Num(Median(info_ms))});
  r.extra.push_back({"ours_minus_cli_info_vs_raw_ratio",
                     Num((Median(r.ours) - Median(info_ms)) / Median(r.baseline))});
  g_results.push_back(r);
  Report(r);
}

// paseo-sandbox-runtime exec of `true` (spawn -> envelope on fd 3 -> fd 4 read to its end ->
// exit) against raw `runsc exec` of `true`; also `inspect`, which Paseo runs before every exec,
// and `describe`, the wrapper's start-up floor (no connection at all). The measured envelope's
// env has PATH and HOME, as a Paseo workload's has; one without HOME (which then starts through
// `shim exec --unset=HOME`, api.capnp ProcessSpec.exactEnv) is measured as an extra field.
void RuntimeExec(Env& env) {
  int n = env.opts.quick ? 10 : 40;
  Progress("runtime_exec: " + std::to_string(n) + " samples per side");
  std::string binary = env.base + "/bin/paseo-sandbox-runtime";
  CopyExecutable(Runfile("runtime/paseo-sandbox-runtime"), binary);
  const std::string instance(64, 'a');
  std::string options = "{\"socket\":" + Quote(env.service->socket()) + ",\"deployment\":\"bench\"}";
  std::string request = "{\"protocolVersion\":1,\"runtimeInstanceId\":\"" + instance +
                        "\",\"options\":" + options;
  RunRuntime(binary, {"create", "--workspace-id", "bench"},
             request + ",\"input\":{\"workspaceId\":\"bench\",\"project\":{\"projectId\":\"p\","
                       "\"source\":{\"kind\":\"directory\",\"path\":" + Quote(env.ws) +
                       "}},\"placement\":{\"kind\":\"existing\"}}}\n",
             "");
  std::string raw_id = env.raw->CreateIdle();
  Result r{"runtime_exec", "ms",
           "paseo-sandbox-runtime exec (true): spawn -> fd 4 events to their end -> exit",
           "runsc exec --process (true), stdio pipes, -> exit", {}, {}, "ratio <= 1.30",
           [](double ratio, double, double) { return ratio <= 1.30; }, {}};
  std::vector<double> inspect_ms, describe_ms, no_home_ms;
  const std::string exit0 =
      "{\"type\":\"started\",\"protocolVersion\":1}\n{\"type\":\"eof\",\"protocolVersion\":1}\n"
      "{\"type\":\"exit\",\"protocolVersion\":1,\"code\":0,\"signal\":null}\n";
  for (int i = 0; i < n; ++i) {
    RuntimeRun inspected = RunRuntime(binary, {"inspect", "--workspace-id", "bench"}, request + "}\n", "");
    Expect(inspected.out.find("\"status\":\"ready\"") != std::string::npos,
           "inspect: not ready: " + inspected.out);
    inspect_ms.push_back(inspected.ms);
    describe_ms.push_back(RunRuntime(binary, {"describe"}, "", "").ms);
    auto envelope = [&](const std::string& env, const std::string& id) {
      return "{\"type\":\"spawn\",\"protocolVersion\":1,\"runtimeInstanceId\":\"" + instance +
             "\",\"argv\":[\"true\"],\"env\":" + env +
             ",\"purpose\":{\"kind\":\"agent\"},\"options\":" + options + ",\"execId\":\"" + id +
             "\",\"stdio\":{\"kind\":\"pipes\"}}\n";
    };
    RuntimeRun ran =
        RunRuntime(binary, {"exec", "--workspace-id", "bench"}, "",
                   envelope("{\"PATH\":\"/usr/bin:/bin\",\"HOME\":\"/workspace\"}",
                            "bench-" + std::to_string(i)));
    Expect(ran.events == exit0, "exec: unexpected events: " + ran.events);
    r.ours.push_back(ran.ms);
    RuntimeRun bare = RunRuntime(binary, {"exec", "--workspace-id", "bench"}, "",
                                 envelope("{\"PATH\":\"/usr/bin:/bin\"}",
                                          "bench-no-home-" + std::to_string(i)));
    Expect(bare.events == exit0, "exec without HOME: unexpected events: " + bare.events);
    no_home_ms.push_back(bare.ms);
    r.baseline.push_back(RawExecTrueMs(env, raw_id));
  }
  RunRuntime(binary, {"destroy", "--workspace-id", "bench"}, request + "}\n", "");
  env.raw->Delete(raw_id);
  double raw = Median(r.baseline);
  r.extra.push_back({"inspect_ms_median", Num(Median(inspect_ms))});
  r.extra.push_back({"inspect_ms_p90", Num(Quantile(inspect_ms, 0.9))});
  r.extra.push_back({"describe_ms_median", Num(Median(describe_ms))});
  r.extra.push_back({"no_home_exec_ms_median", Num(Median(no_home_ms))});
  r.extra.push_back({"no_home_exec_vs_raw_ratio", Num(Median(no_home_ms) / raw)});
  r.extra.push_back({"inspect_plus_exec_vs_raw_ratio",
                     Num((Median(inspect_ms) + Median(r.ours)) / raw)});
  g_results.push_back(r);
  Report(r);
}

// ------------------------------------------------------------------ network (issue 13)

// The bench's profile with network mode "sandbox": egress to the bulk server only.
constexpr char kNetProfile[] = "bench-net";
constexpr char kSecretsProfile[] = "bench-secrets";
constexpr char kBulkHost[] = "203.0.113.10";
constexpr uint16_t kBulkPort = 8081;
// net_names's TLS responder (ServeTls), for the first byte of a TLS request.
constexpr uint16_t kTlsPort = 443;  // where the proxy terminates a secret's host
// The same server by name: the bench internet's allowed.example (203.0.113.20), where the bulk
// listener (on every address there) answers too.
constexpr char kNamesProfile[] = "bench-names";
constexpr char kBulkName[] = "allowed.example";
constexpr char kBulkNameHost[] = "203.0.113.20";
// The internet's own HTTP responder (a few bytes per answer, testing/test_internet.h): the first
// byte is timed against it, not against the bulk server, which is busy with each 64 MiB answer
// until its client's connection is gone.
constexpr uint16_t kSmallPort = 80;

// Create-to-first-byte of a sandbox with network mode "sandbox" against the same with "none",
// alternating; both through the API.
void NetCold(Env& env) {
  int n = env.opts.quick ? 3 : 15;
  Progress("net_cold: " + std::to_string(n) + " samples per side");
  Result r{"net_cold", "ms", "createSandbox(network sandbox)+startProcess(echo) -> first stdout byte",
           "the same with network none", {}, {}, "report only", nullptr, {}};
  std::vector<double> net_create, none_create, net_delete, none_delete;
  for (int i = 0; i < n; ++i) {
    ColdSample net = OursCold(env, kNetProfile);
    r.ours.push_back(net.first_byte_ms);
    net_create.push_back(net.create_ms);
    net_delete.push_back(net.delete_ms);
    ColdSample none = OursCold(env, "bench");
    r.baseline.push_back(none.first_byte_ms);
    none_create.push_back(none.create_ms);
    none_delete.push_back(none.delete_ms);
  }
  r.extra.push_back({"net_create_ms_median", Num(Median(net_create))});
  r.extra.push_back({"none_create_ms_median", Num(Median(none_create))});
  r.extra.push_back({"net_delete_ms_median", Num(Median(net_delete))});
  r.extra.push_back({"none_delete_ms_median", Num(Median(none_delete))});
  g_results.push_back(r);
  Report(r);
}

// Sends `bytes` zeros as one HTTP/1.0 response to every connection on `listener`, forever.
void ServeBulk(int listener, uint64_t bytes) {
  std::thread([listener, bytes] {
    std::vector<char> zeros(kMiB, 0);
    for (;;) {
      int c = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      char request[2048];
      (void)!read(c, request, sizeof(request));
      std::string header = BulkHeader(bytes);
      // MSG_NOSIGNAL: a client that goes away early must not SIGPIPE the bench.
      bool ok = send(c, header.data(), header.size(), MSG_NOSIGNAL) ==
                static_cast<ssize_t>(header.size());
      for (uint64_t left = bytes; ok && left > 0;) {
        ssize_t n = send(c, zeros.data(), std::min<uint64_t>(left, zeros.size()), MSG_NOSIGNAL);
        ok = n > 0;
        if (ok) left -= static_cast<uint64_t>(n);
      }
      close(c);
    }
  }).detach();
}

// Answers every TLS connection on `listener` (base/bench-tls's certificate for kBulkName, from
// WriteBenchConfig's throwaway CA) with a small HTTP response, one connection at a time, forever.
void ServeTls(int listener, const std::string& base) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr ||
      SSL_CTX_use_certificate_chain_file(ctx, (base + "/bench-tls/leaf.pem").c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, (base + "/bench-tls/leaf.key").c_str(), SSL_FILETYPE_PEM) != 1)
    Die("net_names: the TLS responder's certificate");
  std::thread([listener, ctx] {
    for (;;) {
      int c = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      timeval tv{5, 0};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      SSL* ssl = SSL_new(ctx);
      SSL_set_fd(ssl, c);
      if (SSL_accept(ssl) == 1) {
        char request[2048];
        (void)SSL_read(ssl, request, sizeof(request));
        static const char kReply[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        (void)SSL_write(ssl, kReply, sizeof(kReply) - 1);
        SSL_shutdown(ssl);
      }
      SSL_free(ssl);
      close(c);
    }
  }).detach();
}

// The raw side of net_bulk: a namespace of the bench's own joined straight to the internet's
// by a veth (192.0.3.1 there, 192.0.3.2 in the sandbox), with no supervisor firewall or NAT on
// the way, and a runsc root whose sandboxes run --network=sandbox in it.
class RawNet {
 public:
  // The namespace is pinned in `pin_dir`; runsc's root and bundles go in `raw_base`.
  RawNet(const std::string& pin_dir, const std::string& raw_base, const std::string& rootfs,
         const std::string& ws, const std::string& platform)
      : pin_(pin_dir + "/raw-netns"), raw_(raw_base, rootfs, ws, platform) {
    absl::StatusOr<bool> hide = network::ProbeRunscNeedsProcSysNetHidden();
    Check(hide.ok(), "probe /proc/sys/net");
    Check(network::CreateNetns(pin_).ok(), "raw netns");
    int internet = open(testing::InternetPin().c_str(), O_RDONLY | O_CLOEXEC);
    absl::Status linked =
        network::CreateLink(internet, {"raw-net", pin_, "pbench-raw", 0xc0000301, 0xc0000302});
    close(internet);
    Check(linked.ok(), "raw veth: " + linked.ToString());
    raw_.UseNetwork(pin_, *hide);
  }
  ~RawNet() {
    raw_.DeleteAll();
    (void)network::RemoveNetns(pin_);  // its veth goes with it
  }
  RawRunsc& raw() { return raw_; }

 private:
  std::string pin_;
  RawRunsc raw_;
};

// Bulk HTTP download throughput from the bench's internet: testing/bench/fetch in a sandbox of
// ours (network "sandbox", through the supervisor's firewall and NAT) against the same in a raw
// runsc --network=sandbox sandbox (RawNet). fetch counts the bytes and exits 0 only if all
// arrived, so a short transfer fails the bench.
void NetBulk(Env& env, const std::string& dir) {
  uint64_t bytes = env.opts.quick ? 64 * kMiB : 512 * kMiB;
  int n = env.opts.quick ? 3 : 5;
  Progress("net_bulk: " + std::to_string(bytes / kMiB) + " MiB, " + std::to_string(n) +
           " samples per side");
  Check(network::InNetnsFile(testing::InternetPin(), [bytes] {
          int listener = testing::ListenAny(kBulkPort);
          if (listener < 0) return absl::InternalError("listen bulk");
          ServeBulk(listener, bytes);
          return absl::OkStatus();
        }).ok(),
        "bulk server");
  std::string expected = std::to_string(BulkHeader(bytes).size() + bytes);
  // The client (fetch.cc) runs from the workspace, which both sides mount at /workspace.
  CopyExecutable(Runfile("testing/bench/fetch"), env.ws + "/fetch");
  std::vector<std::string> argv = {"/workspace/fetch", kBulkHost, std::to_string(kBulkPort),
                                   std::to_string(BulkHeader(bytes).size() + bytes)};
  Result r{"net_bulk", "MiB/s",
           "fetch (HTTP GET, 1 MiB reads) from the internet in a network-sandbox sandbox (startProcess -> wait)",
           "the same by runsc exec in a raw runsc --network=sandbox sandbox, veth to the internet",
           {}, {}, "report only", nullptr, {}};
  std::string rootfs = env.base + "/state/rootfs/" + env.service->rootfs_version() + "/rootfs";
  RawNet raw(dir, env.base + "/raw-net", rootfs, env.ws, env.raw->platform());
  std::string raw_id = raw.raw().CreateIdle();
  auto sandbox = env.CreateSandbox(kNetProfile);
  auto& ws = env.ws_();
  for (int i = 0; i < n; ++i) {
    {
      double t0 = Now();
      auto start = sandbox.startProcessRequest();
      FillArgv(start.initSpec(), argv);
      auto waited = start.send().getProcess().waitRequest().send().wait(ws);
      double t1 = Now();
      if (waited.getStatus().which() != api::ExitStatus::EXIT_CODE ||
          waited.getStatus().getExitCode() != 0)
        Die("net_bulk: the download in our sandbox fell short or failed");
      r.ours.push_back(static_cast<double>(bytes) / kMiB / (t1 - t0));
    }
    {
      int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
      double t0 = Now();
      pid_t pid = raw.raw().Exec(raw_id, argv, null_fd, null_fd, null_fd);
      close(null_fd);
      int status = WaitPid(pid);
      double t1 = Now();
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        Die("net_bulk: the download in the raw sandbox fell short or failed");
      r.baseline.push_back(static_cast<double>(bytes) / kMiB / (t1 - t0));
    }
  }
  env.DeleteSandbox(sandbox);
  unlink((env.ws + "/fetch").c_str());
  r.extra.push_back({"bytes", std::to_string(bytes)});
  g_results.push_back(r);
  Report(r);
}

// net_names: the same bulk download and a first-byte latency, by name through the egress proxy
// (profile bench-names: the name's TCP is redirected to the proxy, which reads the Host,
// resolves the name and dials it) against the direct path to the same server (profile
// bench-net: an address rule, no proxy), both sandboxes of ours. NetBulk's server must be up.
void NetNames(Env& env) {
  uint64_t bytes = env.opts.quick ? 64 * kMiB : 512 * kMiB;
  int n = env.opts.quick ? 3 : 5;
  int first_bytes = env.opts.quick ? 20 : 100;
  Progress("net_names: " + std::to_string(bytes / kMiB) + " MiB, " + std::to_string(n) +
           " samples per side, and " + std::to_string(first_bytes) + " first bytes");
  CopyExecutable(Runfile("testing/bench/fetch"), env.ws + "/fetch");
  std::string base = env.base;
  Check(network::InNetnsFile(testing::InternetPin(), [base] {
          int listener = testing::ListenAny(kTlsPort);
          if (listener < 0) return absl::InternalError("listen tls");
          ServeTls(listener, base);
          return absl::OkStatus();
        }).ok(),
        "TLS responder");
  std::string total = std::to_string(BulkHeader(bytes).size() + bytes);
  std::string port = std::to_string(kBulkPort);
  Result r{"net_names", "MiB/s",
           "fetch (HTTP GET naming allowed.example) by name through the egress proxy",
           "the same by address, an allowCidrs rule (no proxy)", {}, {}, ">= 0.80",
           [](double ratio, double, double) { return ratio >= 0.8; }, {}};
  auto named = env.CreateSandbox(kNamesProfile);
  auto direct = env.CreateSandbox(kNetProfile);
  auto& ws = env.ws_();
  auto run = [&](api::Sandbox::Client& sb, std::vector<std::string> argv) {
    auto start = sb.startProcessRequest();
    FillArgv(start.initSpec(), argv);
    auto waited = start.send().getProcess().waitRequest().send().wait(ws);
    if (waited.getStatus().which() != api::ExitStatus::EXIT_CODE ||
        waited.getStatus().getExitCode() != 0)
      Die("net_names: " + argv.back() + " failed in a sandbox");
  };
  for (int i = 0; i < n; ++i) {
    double t0 = Now();
    run(named, {"/workspace/fetch", kBulkNameHost, port, total, kBulkName});
    double t1 = Now();
    r.ours.push_back(static_cast<double>(bytes) / kMiB / (t1 - t0));
    t0 = Now();
    run(direct, {"/workspace/fetch", kBulkHost, port, total});
    t1 = Now();
    r.baseline.push_back(static_cast<double>(bytes) / kMiB / (t1 - t0));
  }
  // First byte of a small request's answer, median inside the sandbox (connect() to the byte).
  std::string count = std::to_string(first_bytes);
  std::string small = std::to_string(kSmallPort);
  run(named, {"sh", "-c",
              "/workspace/fetch --first-byte " + count + " " + kBulkNameHost + " " + small + " " +
                  kBulkName + " > /workspace/first-byte-proxy"});
  run(direct, {"sh", "-c",
               "/workspace/fetch --first-byte " + count + " " + kBulkHost + " " + small +
                   " > /workspace/first-byte-direct"});
  double via_us = std::atof(ReadFile(env.ws + "/first-byte-proxy").c_str());
  double straight_us = std::atof(ReadFile(env.ws + "/first-byte-direct").c_str());
  // The same over TLS (the issue's target: at most 2 ms added at the median), handshake
  // included: the proxy reads the ClientHello, dials the name and passes the session through.
  std::string tls = std::to_string(kTlsPort);
  run(named, {"sh", "-c",
              "/workspace/fetch --first-byte-tls " + count + " " + kBulkNameHost + " " + tls + " " +
                  kBulkName + " > /workspace/first-byte-proxy"});
  run(direct, {"sh", "-c",
               "/workspace/fetch --first-byte-tls " + count + " " + kBulkHost + " " + tls + " " +
                   kBulkName + " > /workspace/first-byte-direct"});
  double tls_via_us = std::atof(ReadFile(env.ws + "/first-byte-proxy").c_str());
  double tls_straight_us = std::atof(ReadFile(env.ws + "/first-byte-direct").c_str());
  // And terminated, as for a secret's host: the proxy's handshake with the sandbox (its CA's
  // leaf), its own verified one with the server, then the request head rewritten.
  auto secrets = env.CreateSandbox(kSecretsProfile);
  run(secrets, {"sh", "-c",
                "/workspace/fetch --first-byte-tls " + count + " " + kBulkNameHost + " " + tls + " " +
                    kBulkName + " > /workspace/first-byte-proxy"});
  double terminated_us = std::atof(ReadFile(env.ws + "/first-byte-proxy").c_str());
  env.DeleteSandbox(secrets);
  unlink((env.ws + "/first-byte-proxy").c_str());
  unlink((env.ws + "/first-byte-direct").c_str());
  r.extra.push_back({"first_byte_us_median_proxy", Num(via_us)});
  r.extra.push_back({"first_byte_us_median_direct", Num(straight_us)});
  r.extra.push_back({"first_byte_added_ms", Num((via_us - straight_us) / 1000)});
  r.extra.push_back({"tls_first_byte_us_median_proxy", Num(tls_via_us)});
  r.extra.push_back({"tls_first_byte_us_median_direct", Num(tls_straight_us)});
  r.extra.push_back({"tls_first_byte_added_ms", Num((tls_via_us - tls_straight_us) / 1000)});
  r.extra.push_back({"tls_terminated_first_byte_us_median", Num(terminated_us)});
  r.extra.push_back({"tls_terminated_first_byte_added_ms", Num((terminated_us - tls_straight_us) / 1000)});
  r.extra.push_back({"bytes", std::to_string(bytes)});
  env.DeleteSandbox(named);
  env.DeleteSandbox(direct);
  unlink((env.ws + "/fetch").c_str());
  g_results.push_back(r);
  Report(r);
}

// ------------------------------------------------------------------ workload

// workload: an agent's own work (testing/bench/workload.sh: 300 spawns, git clone, status and
// log --stat, rg, node's small files, npm ci from an offline cache, node and python start-ups,
// tar), natively -- chroot into the same agent rootfs, as the same uid, the workspace bind-
// mounted at /workspace -- and through the supervisor (exec into a kept sandbox) on each runsc
// and platform: 20240729 systrap, 20240729 ptrace, bookworm's 20221219 ptrace. Sides alternate
// in every round (rotated, so none always runs first); each step is timed inside its shell.
constexpr uid_t kWorkloadUid = 4545;

struct WorkloadSide {
  std::string name;      // "native", "systrap-20240729", ...
  std::string runsc;     // empty for native
  std::string platform;
  std::unique_ptr<Service> service;
  std::string sandbox;   // the kept sandbox's id
  std::map<std::string, std::vector<double>> steps;  // step -> ms per round
  std::vector<double> totals;
  std::map<std::string, std::string> results;  // RESULT lines of its first round
};

std::string ReadAllFrom0(int fd) {
  std::string text;
  char buf[65536];
  ssize_t n;
  for (off_t off = 0; (n = pread(fd, buf, sizeof(buf), off)) > 0; off += n) text.append(buf, static_cast<size_t>(n));
  return text;
}

// Parses a run's output into `side`; dies unless every step ran and checked its result.
void TakeWorkloadRun(WorkloadSide& side, const std::string& out, int exit_code) {
  Expect(exit_code == 0, "workload on " + side.name + " failed (exit " + std::to_string(exit_code) +
                             "):\n" + out);
  std::istringstream lines(out);
  double total = 0;
  int steps = 0;
  bool first = side.totals.empty();
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(line);
    std::string kind, name, value;
    f >> kind >> name >> value;
    if (kind == "STEP") {
      double ms = std::stod(value);
      side.steps[name].push_back(ms);
      total += ms;
      ++steps;
    } else if (kind == "RESULT" && first) {
      side.results[name] = value;
    }
  }
  Expect(steps == 10, "workload on " + side.name + ": " + std::to_string(steps) +
                          " of 10 steps reported:\n" + out);
  side.totals.push_back(total);
}

// The native run: in a child of its own mount namespace, the agent rootfs bound read-only at
// `root`, the workspace at root/workspace, /proc, /dev and a /tmp tmpfs; chroot; the agent's
// uid; bash workload.sh DIR. Everything the child uses is built before the fork.
CliResult RunNativeWorkload(const std::string& rootfs, const std::string& root,
                            const std::string& ws, const std::string& dir) {
  const std::string root_ws = root + "/workspace", root_proc = root + "/proc",
                    root_dev = root + "/dev", root_tmp = root + "/tmp";
  auto in_child = [&]() -> int {
    if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount(rootfs.c_str(), root.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        mount(nullptr, root.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0 ||
        mount(ws.c_str(), root_ws.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        mount("proc", root_proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0 ||
        mount("/dev", root_dev.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
        mount("tmpfs", root_tmp.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0 ||
        chroot(root.c_str()) != 0 || chdir("/") != 0)
      return errno;
    gid_t g = kWorkloadUid;
    if (setgroups(1, &g) != 0 || setresgid(g, g, g) != 0 ||
        setresuid(kWorkloadUid, kWorkloadUid, kWorkloadUid) != 0)
      return errno;
    return 0;
  };
  int out = memfd_create("workload-out", MFD_CLOEXEC);
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  Check(out >= 0 && null >= 0, "memfd/dev/null");
  pid_t pid = SpawnStdio({"/bin/bash", "/workspace/.inputs/workload.sh", dir}, null, out, out,
                         {"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C"}, in_child);
  close(null);
  int status = 0;
  if (!testing::WaitPidWithin(pid, 900, &status)) Die("the native workload did not end in 900 s");
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadAllFrom0(out);
  close(out);
  return r;
}

// `chosen`: the platform the bench's own service ran on (runsc.platform auto's choice).
void Workload(const Options& opts, const std::string& repo, const std::string& chosen) {
  const char* agent = getenv("PASEO_AGENT_ROOTFS");
  if (agent == nullptr || access((std::string(agent) + "/rootfs/usr/bin/git").c_str(), X_OK) != 0) {
    Progress("workload: skipped: PASEO_AGENT_ROOTFS names no built agent rootfs "
             "(testing/bench/run builds one)");
    return;
  }
  std::string agent_rootfs = agent;
  std::string version = agent_rootfs.substr(agent_rootfs.rfind('/') + 1);
  int rounds = opts.quick ? 1 : 3;
  char templ[] = "/tmp/paseo-workload-XXXXXX";
  Check(mkdtemp(templ) != nullptr, "mkdtemp");
  std::string work = templ;
  Check(chmod(work.c_str(), 0755) == 0, "chmod " + work);
  std::string ws = work + "/ws", inputs = ws + "/.inputs", native_root = work + "/native-root";
  struct RemoveWork {
    std::string dir;
    ~RemoveWork() { std::system(("rm -rf " + dir).c_str()); }
  } remove_work{work};
  for (const std::string& d : {ws, inputs, native_root}) Check(mkdir(d.c_str(), 0755) == 0, "mkdir " + d);

  // The inputs, made on the host: this repository as a bare clone, the conformance suite's
  // lockfile and an npm cache that holds all of it (filled once, with the registry).
  Progress("workload: preparing inputs in " + inputs);
  Capture("git clone -q --bare --no-local " + Quote(repo) + " " + inputs + "/src.git");
  WriteText(inputs + "/head", Capture("git -C " + inputs + "/src.git rev-parse HEAD"));
  Capture("mkdir " + inputs + "/npm-project && cp " + repo + "/testing/conformance/package.json " +
          repo + "/testing/conformance/package-lock.json " + inputs + "/npm-project/");
  // The bench has no network (its own namespace): the cache is the host's npm cache, which
  // installer/install-deps filled with exactly this lockfile (npm ci in testing/conformance),
  // copied; an offline npm ci on the host proves it holds everything.
  Capture("mkdir " + inputs + "/npm-cache && cp -r \"$(npm config get cache)/_cacache\" " + inputs +
          "/npm-cache/ && echo copied");
  Capture("cp -r " + inputs + "/npm-project " + work + "/npm-fill && cd " + work +
          "/npm-fill && npm ci --offline --cache " + inputs + "/npm-cache --ignore-scripts "
          "--no-audit --no-fund --loglevel=error >/dev/null && echo filled");
  Capture("cp " + Runfile("testing/bench/workload.sh") + " " + inputs + "/workload.sh");
  Capture("chown -R " + std::to_string(kWorkloadUid) + ":" + std::to_string(kWorkloadUid) + " " + ws);

  std::vector<WorkloadSide> sides;
  sides.push_back({"native", "", "", nullptr, "", {}, {}, {}});
  const std::string pinned = testing::RunscPath();
  sides.push_back({"systrap-20240729", pinned, "systrap", nullptr, "", {}, {}, {}});
  sides.push_back({"ptrace-20240729", pinned, "ptrace", nullptr, "", {}, {}, {}});
  if (access("/usr/bin/runsc", X_OK) == 0)
    sides.push_back({"ptrace-20221219", "/usr/bin/runsc", "ptrace", nullptr, "", {}, {}, {}});
  const testing::Identity agent_id{kWorkloadUid, kWorkloadUid, {kWorkloadUid}};
  for (auto& side : sides) {
    if (side.runsc.empty()) continue;
    testing::ServiceOptions o;
    o.runsc_path = side.runsc;
    o.runsc_platform = side.platform;
    o.extra_rootfs = agent_rootfs;
    o.before_start = [&](const std::string& base) {
      WriteText(base + "/etc/profiles/agent.json",
                "{\"name\": \"agent\", \"rootfsVersion\": " + Quote(version) + "}");
      WriteText(base + "/etc/deployments/workload.json",
                "{\"id\": \"workload\", \"allowedUids\": [" + std::to_string(kWorkloadUid) +
                    "], \"profiles\": [\"agent\"], \"runAs\": {\"uid\": " +
                    std::to_string(kWorkloadUid) + ", \"gid\": " + std::to_string(kWorkloadUid) +
                    "}, \"workspaceRoots\": [{\"hostPath\": " + Quote(ws) + "}]}");
    };
    side.service = std::make_unique<Service>(std::move(o));
    testing::Identity who = agent_id;
    who.groups.push_back(side.service->socket_gid());
    CliResult r = side.service->Cli(who, {"create", "--deployment=workload",
                                          "--workspace=" + ws + ":/workspace:rw"});
    Expect(r.exit_code == 0, "workload: create on " + side.name + ": " + r.err);
    side.sandbox = std::string(absl::StripAsciiWhitespace(r.out));
    Progress("workload: " + side.name + ": sandbox " + side.sandbox + " (" + side.runsc + ")");
  }
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < sides.size(); ++k) {
      WorkloadSide& side = sides[(k + round) % sides.size()];
      std::string dir = "/workspace/run-" + side.name + "-" + std::to_string(round);
      CliResult r;
      if (side.service == nullptr) {
        r = RunNativeWorkload(agent_rootfs + "/rootfs", native_root, ws, dir);
      } else {
        testing::Identity who = agent_id;
        who.groups.push_back(side.service->socket_gid());
        r = side.service->Cli(who, {"exec", side.sandbox, "--", "bash", "/workspace/.inputs/workload.sh", dir},
                              std::chrono::seconds(900));
        r.out += r.err;
      }
      TakeWorkloadRun(side, r.out, r.exit_code);
      Progress("workload round " + std::to_string(round + 1) + "/" + std::to_string(rounds) + ": " +
               side.name + " " + Num(side.totals.back(), 0) + " ms");
    }
  }
  for (auto& side : sides) {
    if (side.service == nullptr) continue;
    testing::Identity who = agent_id;
    who.groups.push_back(side.service->socket_gid());
    side.service->Cli(who, {"rm", side.sandbox});
  }
  const WorkloadSide& native = sides[0];
  std::printf("\nworkload: medians of %d round(s), ms (ratio to native)\n%-14s", rounds, "step");
  for (const auto& side : sides) std::printf(" %22s", side.name.c_str());
  std::printf("\n");
  for (const auto& [step, native_ms] : native.steps) {
    std::printf("%-14s", step.c_str());
    for (const auto& side : sides) {
      double m = Median(side.steps.at(step));
      std::printf(" %13s (%5sx)", Num(m, 0).c_str(), Num(m / Median(native_ms), 1).c_str());
    }
    std::printf("\n");
  }
  std::printf("%-14s", "total");
  for (const auto& side : sides) {
    std::printf(" %13s (%5sx)", Num(Median(side.totals), 0).c_str(),
                Num(Median(side.totals) / Median(native.totals), 2).c_str());
  }
  std::printf("\n\n");
  for (size_t k = 1; k < sides.size(); ++k) {
    WorkloadSide& side = sides[k];
    // What each step produced is the same as natively (the rg hit count, npm's packages, ...).
    for (const auto& [name, value] : native.results)
      Expect(side.results[name] == value, "workload on " + side.name + ": " + name + " " +
                                              side.results[name] + ", natively " + value);
    bool is_chosen = side.runsc == pinned && side.platform == chosen;
    Result r{"workload_" + side.name, "ms",
             "workload.sh exec'd into a kept sandbox (" + side.name + "), total of 10 steps",
             "the same natively: chroot into the agent rootfs, same uid, workspace bound", side.totals,
             native.totals, is_chosen ? "ratio <= 1.50 (the platform auto chose)" : "report only",
             is_chosen ? std::function<bool(double, double, double)>(
                             [](double ratio, double, double) { return ratio <= 1.50; })
                       : nullptr,
             {}};
    std::string per_step = "{";
    for (const auto& [step, ms] : side.steps) {
      if (per_step.size() > 1) per_step += ", ";
      per_step += Quote(step) + ": {\"ms\": " + Num(Median(ms)) + ", \"native_ms\": " +
                  Num(Median(native.steps.at(step))) + ", \"ratio\": " +
                  Num(Median(ms) / Median(native.steps.at(step))) + "}";
    }
    r.extra.push_back({"steps", per_step + "}"});
    r.extra.push_back({"runsc", Quote(side.runsc)});
    r.extra.push_back({"platform", Quote(side.platform)});
    g_results.push_back(r);
    Report(r);
  }
  for (auto& side : sides) {
    if (side.service == nullptr) continue;
    side.service->Stop();
    for (const auto& leak : side.service->Leaks()) Die("workload: " + side.name + " left " + leak);
    side.service.reset();
  }
}

// The bench's part of the service config (ServiceOptions::before_start): deployment `bench`
// (clients uid 0, agents 4242:4242 over base/ws, up to 160 sandboxes) whose one profile keeps
// kOutputBufferBytes of each stream.
void WriteBenchConfig(const std::string& base) {
  // The clients are uid 0, judged by the mode bits like any uid: they write through group 0.
  Check(mkdir((base + "/ws").c_str(), 0775) == 0, "mkdir ws");
  Check(chown((base + "/ws").c_str(), kAgentUid, 0) == 0 && chmod((base + "/ws").c_str(), 0775) == 0,
        "chown ws");
  WriteText(base + "/etc/deployments/bench.json",
            "{\"id\": \"bench\", \"allowedUids\": [0], \"workspaceRoots\": [{\"hostPath\": " +
                Quote(base + "/ws") + "}], \"runAs\": {\"uid\": " + std::to_string(kAgentUid) +
                ", \"gid\": " + std::to_string(kAgentGid) +
                "}, \"profiles\": [\"bench\", \"bench-net\", \"bench-names\", \"bench-secrets\"], "
                "\"maxSandboxes\": 160, \"secrets\": [{\"name\": \"bench\", \"path\": " +
                Quote(base + "/bench-secrets/key") + ", \"hosts\": [\"" + kBulkName +
                "\"], \"header\": \"x-api-key\", \"envVar\": \"BENCH_API_KEY\"}]}");
  WriteText(base + "/etc/profiles/bench.json",
            "{\"name\": \"bench\", \"outputBufferBytes\": " +
                std::to_string(kOutputBufferBytes) + "}");
  WriteText(base + "/etc/profiles/bench-net.json",
            "{\"name\": \"bench-net\", \"outputBufferBytes\": " +
                std::to_string(kOutputBufferBytes) +
                ", \"network\": {\"mode\": \"sandbox\", \"allowCidrs\": [{\"cidr\": \"" +
                kBulkHost + "/32\", \"ports\": [" + std::to_string(kBulkPort) + ", " +
                std::to_string(kSmallPort) + ", " + std::to_string(kTlsPort) + "]}]}}");  // The same server by name, through the egress proxy (decision 58).
  // net_names's TLS responder's certificate, from a throwaway CA the egress proxy trusts (so it
  // can verify the upstream of a terminated connection), and a secret for its name: the bench-
  // secrets profile's TLS to it is terminated by the proxy (decision 59).
  auto ca = egress::CertAuthority::Create("bench", {kBulkName});
  Check(ca.ok(), "bench CA");
  auto leaf = (*ca)->LeafFor(kBulkName);
  Check(leaf.ok(), "bench TLS certificate");
  Check(mkdir((base + "/bench-tls").c_str(), 0755) == 0, "mkdir bench-tls");
  WriteText(base + "/bench-tls/ca.pem", (*ca)->certificate_pem());
  WriteText(base + "/bench-tls/leaf.pem", (*leaf)->certificate_pem);
  WriteText(base + "/bench-tls/leaf.key", (*leaf)->key_pem);
  Check(chmod((base + "/bench-tls/ca.pem").c_str(), 0644) == 0, "chmod ca.pem");
  Check(mkdir((base + "/bench-secrets").c_str(), 0700) == 0, "mkdir bench-secrets");
  WriteText(base + "/bench-secrets/key", "bench-secret-value\n");
  Check(chmod((base + "/bench-secrets/key").c_str(), 0600) == 0, "chmod key");
  std::string helper = ReadFile(base + "/etc/helper.json");
  size_t at = helper.find("@BENCH_CA@");
  Check(at != std::string::npos, "helper.json has @BENCH_CA@");
  helper.replace(at, 10, base + "/bench-tls/ca.pem");
  WriteText(base + "/etc/helper.json", helper);
  WriteText(base + "/etc/profiles/bench-secrets.json",
            "{\"name\": \"bench-secrets\", \"outputBufferBytes\": " +
                std::to_string(kOutputBufferBytes) +
                ", \"network\": {\"mode\": \"sandbox\", \"allowNames\": [{\"name\": \"" +
                kBulkName + "\", \"ports\": [" + std::to_string(kTlsPort) +
                "]}]}, \"secrets\": [{\"name\": \"bench\"}]}");
  WriteText(base + "/etc/profiles/bench-names.json",
            "{\"name\": \"bench-names\", \"outputBufferBytes\": " +
                std::to_string(kOutputBufferBytes) +
                ", \"network\": {\"mode\": \"sandbox\", \"allowNames\": [{\"name\": \"" +
                kBulkName + "\", \"ports\": [" + std::to_string(kBulkPort) + ", " +
                std::to_string(kSmallPort) + ", " + std::to_string(kTlsPort) + "]}]}}");
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--probe-trim") {
      o.probe_trim = true;
    } else if (a == "--perf" && i + 1 < argc) {
      o.perf_dir = argv[++i];
    } else if (a == "--only" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) o.only.insert(item);
    } else {
      std::fprintf(stderr,
                   "usage: bench [--quick] [--perf DIR] "
                   "[--only cold,exec,throughput,replay,density,fanout,stuck_subscriber,runtime_exec,"
                   "session_exec_report,"
                   "net_cold,net_bulk,net_names,workload]\n");
      std::exit(2);
    }
  }
  return o;
}

int Main(int argc, char** argv) {
  Options opts = ParseArgs(argc, argv);
  double started = Now();
  // 1000 client connections need more than the usual 1024 fds (here and in the broker, which
  // inherits the limit through the privhelper).
  rlimit nofile;
  Check(getrlimit(RLIMIT_NOFILE, &nofile) == 0, "getrlimit(RLIMIT_NOFILE)");
  nofile.rlim_cur = nofile.rlim_max;
  Check(setrlimit(RLIMIT_NOFILE, &nofile) == 0, "setrlimit(RLIMIT_NOFILE)");
  if (nofile.rlim_cur < 4096) Die("RLIMIT_NOFILE hard limit below 4096: raise it (ulimit -Hn)");

  int rc = 0;
  std::string service_platform;
  {
    // The harness's service: it checks for root, the paseo-sandbox user and runsc, moves this
    // process into its own mount and network namespaces, lays out a tmpfs work area with the
    // binaries, the rootfs and its config, adds the bench's (WriteBenchConfig) and starts the
    // privhelper.
    testing::ServiceOptions service_options;
    service_options.tmpfs_size = "4g";
    service_options.before_start = WriteBenchConfig;
    // Network mode "sandbox" for net_cold and net_bulk: sandboxes get addresses from this pool;
    // the resolver's upstream is the bench internet's DNS server (testing/test_internet.h).
    service_options.helper_json_extra =
        R"(, "network": {"pool": "10.98.0.0/24", "dnsUpstreams": ["203.0.113.53"], "egressTrustedCa": "@BENCH_CA@"})";
    Service service(std::move(service_options));
    std::string base = service.base();
    std::string version = service.rootfs_version();
    std::string log = service.Log();
    size_t at = log.find("runsc platform: ");
    if (at == std::string::npos) Die("the privhelper's log names no runsc platform:\n" + log);
    std::string platform = log.substr(at + 16, log.find(' ', at + 16) - (at + 16));
    service_platform = platform;
    RawRunsc raw(base + "/raw", base + "/state/rootfs/" + version + "/rootfs", base + "/ws",
                 platform);
    Progress(std::string(opts.quick ? "quick" : "full") + " run; work area " + base +
             ", rootfs " + version + ", platform " + platform);
    try {
      auto io = kj::setupAsyncIo();
      client::Connection conn(io, service.socket());
      Env env;
      env.opts = opts;
      env.base = base;
      env.ws = base + "/ws";
      env.io = &io;
      env.service = &service;
      env.raw = &raw;
      env.conn = &conn;
      auto info = conn.supervisor().infoRequest().send().wait(io.waitScope);
      Progress(std::string("service ") + info.getVersion().cStr() + ", peer uid " +
               std::to_string(info.getPeerUid()));

      auto checkpoint = [&](const std::string& when) {
        pid_t b = service.broker_pid();
        auto list = conn.supervisor().listSandboxesRequest().send().wait(io.waitScope);
        Progress("after " + when + ": broker VmRSS " + Num(b > 0 ? MiB(MemOf(b).rss_kib) : NAN, 1) +
                 " MiB, privhelper VmRSS " + Num(MiB(MemOf(service.privhelper_pid()).rss_kib), 1) +
                 " MiB, listSandboxes: " + std::to_string(list.getSandboxes().size()) +
                 ", broker state dir " + Capture("du -sm " + base + "/state/broker | cut -f1") +
                 " MiB");
      };
      checkpoint("start");
      if (opts.Wants("cold")) Cold(env);
      checkpoint("cold");
      if (opts.Wants("density")) Density(env);
      checkpoint("density");
      if (opts.Wants("exec") || opts.Wants("throughput") || opts.Wants("replay")) {
        auto sandbox = env.CreateSandbox();
        std::string raw_id = raw.CreateIdle();
        if (opts.Wants("exec")) Exec(env, sandbox, raw_id);
        if (opts.Wants("throughput")) Throughput(env, sandbox, raw_id);
        checkpoint("throughput");
        if (opts.Wants("replay")) Replay(env, sandbox, raw_id);
        env.DeleteSandbox(sandbox);
        raw.Delete(raw_id);
        checkpoint("deleting the exec/throughput/replay sandbox");
        if (opts.probe_trim) {
          // Is the broker's RSS after the delete garbage it still holds, or free heap that
          // glibc has not returned? Ask glibc to return it and look again.
          std::system(("gdb -p " + std::to_string(service.broker_pid()) +
                       " -batch -ex 'call (int)malloc_trim(0)' >/dev/null 2>&1")
                          .c_str());
          checkpoint("malloc_trim(0) in the broker");
        }
      }
      if (opts.Wants("fanout")) {
        auto sandbox = env.CreateSandbox();
        FanOut(env, sandbox);
        env.DeleteSandbox(sandbox);
        checkpoint("fan-out");
      }
      if (opts.Wants("stuck_subscriber")) {
        StuckSubscriber(env);
        checkpoint("stuck subscriber");
      }
      if (opts.Wants("session_exec")) {
        SessionExec(env);
        checkpoint("session exec");
      }
      if (opts.Wants("session_exec_report")) {
        SessionExecReport(env);
        checkpoint("session exec with the not-kept report");
      }
      if (opts.Wants("cli_exec")) {
        CliExec(env);
        checkpoint("cli exec");
      }
      if (opts.Wants("runtime_exec")) {
        RuntimeExec(env);
        checkpoint("runtime exec");
      }
      if (opts.Wants("oneshot")) {
        Oneshot(env);
        checkpoint("oneshot");
      }
      if (opts.Wants("net_cold")) {
        NetCold(env);
        checkpoint("net_cold");
      }
      if (opts.Wants("net_bulk")) {
        // The internet (and the raw side's namespace pin) go in a directory of their own
        // outside the work area; the pins are mounts in this process's mount namespace.
        char dir[] = "/tmp/paseo-bench-net-XXXXXX";
        Check(mkdtemp(dir) != nullptr, "mkdtemp");
        setenv("TEST_TMPDIR", dir, 1);  // where testing/test_internet.h pins its namespace
        absl::Status internet = testing::BuildInternet();
        Check(internet.ok(), "the bench internet: " + internet.ToString());
        NetBulk(env, dir);
        checkpoint("net_bulk");
        if (opts.Wants("net_names")) {
          NetNames(env);
          checkpoint("net_names");
        }
        (void)network::RemoveNetns(testing::InternetPin());
        rmdir(dir);
      }
    } catch (kj::Exception& e) {
      std::fprintf(stderr, "bench: FAILED: %s\n", e.getDescription().cStr());
      std::fprintf(stderr, "bench: privhelper log tail:\n%s\n", service.Log().c_str());
      rc = 1;
    }
    raw.DeleteAll();
    service.Stop();
    // The egress proxy ends when it sees its control socket close, a moment after the
    // privhelper did: it gets up to 2 s.
    double stopped = Now();
    while (!PidsMatching(base + "/").empty() && Now() - stopped < 2) usleep(20000);
    if (Now() - stopped > 0.05)
      Progress("processes of the work area ended " + Num((Now() - stopped) * 1000) +
               " ms after the privhelper");
    for (pid_t p : PidsMatching(base + "/")) {
      Progress("leftover process " + std::to_string(p) + ": " + Cmdline(p));
      rc = 1;
    }
    for (const auto& leak : service.Leaks()) {
      Progress("left behind: " + leak);
      rc = 1;
    }
  }  // ~Service removes the work area
  if (opts.Wants("workload")) {
    char cwd[4096];
    Check(getcwd(cwd, sizeof(cwd)) != nullptr, "getcwd");
    try {
      Workload(opts, cwd, service_platform);
    } catch (kj::Exception& e) {
      std::fprintf(stderr, "bench: workload FAILED: %s\n", e.getDescription().cStr());
      rc = 1;
    }
  }
  PrintTable();
  std::printf("total wall time: %.1f s (%s)\n", Now() - started, opts.quick ? "quick" : "full");
  return rc;
}

}  // namespace
}  // namespace paseo::bench

int main(int argc, char** argv) { return paseo::bench::Main(argc, argv); }
