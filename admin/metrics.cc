// See metrics.h.
#include "admin/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace paseo::admin {
namespace {

// A label value: backslash, double quote and newline escaped.
std::string Escape(absl::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// One metric family: its HELP and TYPE lines, then each sample.
class Family {
 public:
  Family(std::string& out, const char* name, const char* type, const char* help)
      : out_(out), name_(name) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Sample(const std::vector<std::pair<const char*, std::string>>& labels, double value) {
    out_ += name_;
    if (!labels.empty()) {
      out_ += '{';
      for (size_t i = 0; i < labels.size(); ++i)
        absl::StrAppend(&out_, i ? "," : "", labels[i].first, "=\"", Escape(labels[i].second), "\"");
      out_ += '}';
    }
    // Counts as integers, the rest (seconds) to the nanosecond.
    bool whole = value >= 0 && value < 9.0e15 && value == std::floor(value);
    absl::StrAppend(&out_, " ", whole ? absl::StrFormat("%.0f", value) : absl::StrFormat("%.9f", value),
                    "\n");
  }
  void Sample(double value) { Sample({}, value); }

 private:
  std::string& out_;
  const char* name_;
};

double Seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

}  // namespace

std::string PrometheusDown() {
  std::string out;
  Family(out, "paseo_sandbox_up", "gauge",
         "1 if the service answered on its operator socket, 0 if it could not be asked.")
      .Sample(0);
  return out;
}

std::string PrometheusText(operator_api::Operator::MetricsResults::Reader metrics) {
  std::string out;
  auto service = metrics.getService();
  auto sandboxes = metrics.getSandboxes();
  Family(out, "paseo_sandbox_up", "gauge",
         "1 if the service answered on its operator socket, 0 if it could not be asked.")
      .Sample(1);
  Family(out, "paseo_sandbox_info", "gauge", "The service's version.")
      .Sample({{"version", service.getVersion().cStr()}}, 1);

  std::map<std::pair<std::string, std::string>, uint64_t> by_state;
  for (auto s : sandboxes) ++by_state[{s.getDeploymentId().cStr(), s.getState().cStr()}];
  {
    Family f(out, "paseo_sandbox_sandboxes", "gauge", "Sandboxes by deployment and state.");
    for (const auto& [key, n] : by_state)
      f.Sample({{"deployment", key.first}, {"state", key.second}}, static_cast<double>(n));
  }

  // Per sandbox: figures of a measured one (the cgroup's), then the broker's own, then network.
  struct Per {
    const char* name;
    const char* type;
    const char* help;
    bool needs_measured, needs_network;
    double (*value)(api::SandboxStats::Reader);
  };
  static const Per kPer[] = {
      {"paseo_sandbox_sandbox_cpu_seconds_total", "counter",
       "CPU time used by the sandbox's host tasks (its gVisor kernel and file server).", true,
       false, [](api::SandboxStats::Reader s) { return Seconds(s.getCpuNs()); }},
      {"paseo_sandbox_sandbox_memory_bytes", "gauge",
       "Memory charged to the sandbox, less the file cache reclaimed first (working set).", true,
       false, [](api::SandboxStats::Reader s) { return static_cast<double>(s.getMemoryBytes()); }},
      {"paseo_sandbox_sandbox_memory_limit_bytes", "gauge",
       "The sandbox's memory limit (0: none).", true, false,
       [](api::SandboxStats::Reader s) { return static_cast<double>(s.getMemoryLimitBytes()); }},
      {"paseo_sandbox_sandbox_host_tasks", "gauge", "Host threads in the sandbox's cgroup.", true,
       false, [](api::SandboxStats::Reader s) { return static_cast<double>(s.getHostTasks()); }},
      {"paseo_sandbox_sandbox_host_tasks_limit", "gauge",
       "The sandbox's limit of host threads (0: none).", true, false,
       [](api::SandboxStats::Reader s) { return static_cast<double>(s.getHostTasksLimit()); }},
      {"paseo_sandbox_sandbox_processes", "gauge", "The sandbox's running processes.", false,
       false, [](api::SandboxStats::Reader s) { return static_cast<double>(s.getProcesses()); }},
      {"paseo_sandbox_sandbox_output_bytes_total", "counter",
       "Bytes the sandbox's processes wrote to stdout and stderr.", false, false,
       [](api::SandboxStats::Reader s) { return static_cast<double>(s.getOutputBytes()); }},
      {"paseo_sandbox_sandbox_output_buffered_bytes", "gauge",
       "Bytes of the sandbox's output the service keeps for replay.", false, false,
       [](api::SandboxStats::Reader s) { return static_cast<double>(s.getOutputBufferedBytes()); }},
      {"paseo_sandbox_sandbox_network_receive_bytes_total", "counter",
       "Bytes that reached the sandbox over its link (networked sandboxes).", false, true,
       [](api::SandboxStats::Reader s) { return static_cast<double>(s.getNetworkInBytes()); }},
      {"paseo_sandbox_sandbox_network_transmit_bytes_total", "counter",
       "Bytes the sandbox sent over its link (networked sandboxes).", false, true,
       [](api::SandboxStats::Reader s) { return static_cast<double>(s.getNetworkOutBytes()); }},
  };
  for (const Per& per : kPer) {
    Family f(out, per.name, per.type, per.help);
    for (auto s : sandboxes) {
      if ((per.needs_measured && !s.getMeasured()) || (per.needs_network && !s.getNetworked()))
        continue;
      f.Sample({{"sandbox", s.getSandboxId().cStr()}, {"deployment", s.getDeploymentId().cStr()}},
               per.value(s));
    }
  }

  Family(out, "paseo_sandbox_service_cpu_seconds_total", "counter",
         "CPU time used by all sandboxes together.")
      .Sample(Seconds(service.getCpuNs()));
  Family(out, "paseo_sandbox_service_memory_bytes", "gauge",
         "Memory charged to all sandboxes together (working set).")
      .Sample(static_cast<double>(service.getMemoryBytes()));
  Family(out, "paseo_sandbox_service_memory_limit_bytes", "gauge",
         "The service's memory bound on all sandboxes together (0: none).")
      .Sample(static_cast<double>(service.getMemoryLimitBytes()));
  Family(out, "paseo_sandbox_service_host_tasks", "gauge", "Host threads of all sandboxes.")
      .Sample(service.getHostTasks());
  Family(out, "paseo_sandbox_service_host_tasks_limit", "gauge",
         "The service's bound on host threads of all sandboxes (0: none).")
      .Sample(service.getHostTasksLimit());
  Family(out, "paseo_sandbox_service_cpu_limit_cores", "gauge",
         "The service's CPU bound on all sandboxes together, in cores.")
      .Sample(service.getCpuMillisLimit() / 1000.0);

  Family(out, "paseo_sandbox_privhelper_start_time_seconds", "gauge",
         "When the privhelper started (Unix time).")
      .Sample(static_cast<double>(service.getPrivhelperStartedAtUnixMs()) / 1000);
  Family(out, "paseo_sandbox_broker_start_time_seconds", "gauge",
         "When the running broker started (Unix time).")
      .Sample(static_cast<double>(service.getBrokerStartedAtUnixMs()) / 1000);
  Family(out, "paseo_sandbox_broker_restarts_total", "counter",
         "Brokers the privhelper restarted after one ended by itself (crashed, killed).")
      .Sample(service.getBrokerRestarts());
  Family(out, "paseo_sandbox_broker_reloads_total", "counter",
         "Brokers the privhelper restarted for a config reload.")
      .Sample(service.getBrokerReloads());
  Family(out, "paseo_sandbox_audit_records_total", "counter",
         "Calls and refused connections the running broker audited.")
      .Sample(static_cast<double>(service.getAuditRecords()));
  Family(out, "paseo_sandbox_audit_lines_total", "counter",
         "Audit lines the running broker wrote (a coalesced second of refusals is one).")
      .Sample(static_cast<double>(service.getAuditLines()));
  {
    Family f(out, "paseo_sandbox_refused_requests_total", "counter",
             "Audited calls and connections refused, failed or cancelled, by reason.");
    for (auto c : service.getNotOk())
      f.Sample({{"reason", c.getReason().cStr()}}, static_cast<double>(c.getCount()));
  }
  Family(out, "paseo_sandbox_client_connections", "gauge", "Client connections open now.")
      .Sample(service.getConnections());
  Family(out, "paseo_sandbox_parked_calls", "gauge", "Client calls waiting now.")
      .Sample(service.getParkedCalls());
  return out;
}

absl::Status WriteTextfile(const std::string& dir, const std::string& text) {
  std::string path = dir + "/paseo_sandbox.prom";
  // node_exporter reads only *.prom: the temporary name is not one until the rename.
  std::string tmp = absl::StrCat(dir, "/.paseo_sandbox.prom.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open", tmp);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = ErrnoStatus("write", tmp);
      close(fd);
      unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  bool synced = fchmod(fd, 0644) == 0 && fsync(fd) == 0;
  absl::Status s = synced ? absl::OkStatus() : ErrnoStatus("fchmod/fsync", tmp);
  if (close(fd) != 0 && s.ok()) s = ErrnoStatus("close", tmp);
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = ErrnoStatus("rename", path);
    unlink(tmp.c_str());
    return s;
  }
  return absl::OkStatus();
}

}  // namespace paseo::admin
