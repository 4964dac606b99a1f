// See stats_view.h.
#include "client/stats_view.h"

#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/json_writer.h"

namespace paseo::client {

std::vector<StatsRow> StatsRows(capnp::List<api::SandboxStats>::Reader before,
                                capnp::List<api::SandboxStats>::Reader now) {
  std::map<std::string, api::SandboxStats::Reader> earlier;
  for (auto s : before) earlier.emplace(s.getSandboxId().cStr(), s);
  std::vector<StatsRow> rows;
  for (auto s : now) {
    StatsRow& r = rows.emplace_back();
    r.id = s.getSandboxId().cStr();
    r.deployment = s.getDeploymentId().cStr();
    r.state = s.getState().cStr();
    r.measured = s.getMeasured();
    r.cpu_seconds = static_cast<double>(s.getCpuNs()) / 1e9;
    r.memory_bytes = s.getMemoryBytes();
    r.memory_limit_bytes = s.getMemoryLimitBytes();
    r.host_tasks = s.getHostTasks();
    r.host_tasks_limit = s.getHostTasksLimit();
    r.processes = s.getProcesses();
    r.output_bytes = s.getOutputBytes();
    r.output_buffered_bytes = s.getOutputBufferedBytes();
    r.networked = s.getNetworked();
    r.network_in_bytes = s.getNetworkInBytes();
    r.network_out_bytes = s.getNetworkOutBytes();
    auto e = earlier.find(r.id);
    if (r.measured && e != earlier.end() && e->second.getMeasured() &&
        s.getSampledAtNs() > e->second.getSampledAtNs() && s.getCpuNs() >= e->second.getCpuNs()) {
      r.cpu_cores = static_cast<double>(s.getCpuNs() - e->second.getCpuNs()) /
                    static_cast<double>(s.getSampledAtNs() - e->second.getSampledAtNs());
    }
  }
  return rows;
}

std::vector<StatsRow> StatsRows(capnp::List<api::SandboxStats>::Reader now) {
  return StatsRows(capnp::List<api::SandboxStats>::Reader(), now);
}

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, "B");
  // Whole numbers without decimals ("2GiB"), the rest with one ("45.2MiB").
  std::string text = absl::StrFormat("%.1f", value);
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
  return text + kUnits[unit];
}

namespace {

std::string OrDash(bool known, const std::string& text) { return known ? text : "-"; }

std::string Limited(uint64_t used, uint64_t limit, bool bytes) {
  std::string u = bytes ? HumanBytes(used) : absl::StrCat(used);
  if (limit == 0) return u + " / -";
  return absl::StrCat(u, " / ", bytes ? HumanBytes(limit) : absl::StrCat(limit));
}

}  // namespace

std::string StatsTable(const std::vector<StatsRow>& rows) {
  std::string out = absl::StrFormat("%-28s %-16s %-10s %6s %-21s %-11s %5s %-21s %s\n", "SANDBOX",
                                    "DEPLOYMENT", "STATE", "CPU", "MEM USAGE / LIMIT",
                                    "TASKS", "PROCS", "OUTPUT / KEPT", "NET IN / OUT");
  for (const StatsRow& r : rows) {
    std::string cpu = r.cpu_cores ? absl::StrFormat("%.2f", *r.cpu_cores) : "-";
    std::string line = absl::StrFormat(
        "%-28s %-16s %-10s %6s %-21s %-11s %5u %-21s %s", r.id, r.deployment, r.state, cpu,
        OrDash(r.measured, Limited(r.memory_bytes, r.memory_limit_bytes, true)),
        OrDash(r.measured, Limited(r.host_tasks, r.host_tasks_limit, false)), r.processes,
        absl::StrCat(HumanBytes(r.output_bytes), " / ", HumanBytes(r.output_buffered_bytes)),
        r.networked ? absl::StrCat(HumanBytes(r.network_in_bytes), " / ",
                                   HumanBytes(r.network_out_bytes))
                    : "-");
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

std::string StatsJson(const std::vector<StatsRow>& rows) {
  JsonWriter json;
  json.BeginObject();
  json.Key("sandboxes");
  json.BeginArray();
  for (const StatsRow& r : rows) {
    json.BeginObject();
    json.Key("id");
    json.String(r.id);
    json.Key("deployment");
    json.String(r.deployment);
    json.Key("state");
    json.String(r.state);
    json.Key("measured");
    json.Bool(r.measured);
    json.Key("cpuCores");
    if (r.cpu_cores) {
      json.Fixed(*r.cpu_cores, 3);
    } else {
      json.Null();
    }
    json.Key("cpuSeconds");
    json.Fixed(r.cpu_seconds, 3);
    json.Key("memoryBytes");
    json.UInt(r.memory_bytes);
    json.Key("memoryLimitBytes");
    json.UInt(r.memory_limit_bytes);
    json.Key("hostTasks");
    json.UInt(r.host_tasks);
    json.Key("hostTasksLimit");
    json.UInt(r.host_tasks_limit);
    json.Key("processes");
    json.UInt(r.processes);
    json.Key("outputBytes");
    json.UInt(r.output_bytes);
    json.Key("outputBufferedBytes");
    json.UInt(r.output_buffered_bytes);
    json.Key("network");
    if (r.networked) {
      json.BeginObject();
      json.Key("inBytes");
      json.UInt(r.network_in_bytes);
      json.Key("outBytes");
      json.UInt(r.network_out_bytes);
      json.EndObject();
    } else {
      json.Null();
    }
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
  return json.Take();
}

}  // namespace paseo::client
