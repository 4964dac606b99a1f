// `paseo-sandbox stats`: what sandboxes use (api.capnp SandboxStats), as a table like
// `docker stats` or as JSON (docs/stats.schema.json). CPU is a rate: the difference of two
// samples' cpuNs over the difference of their sampledAtNs, in cores (1.00 = one core busy).
//
//   auto rows = StatsRows(first_sample, second_sample);   // first_sample may be empty
//   std::fputs(StatsTable(rows).c_str(), stdout);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "schema/api.capnp.h"

namespace paseo::client {

struct StatsRow {
  std::string id, deployment, state;
  bool measured = false;
  std::optional<double> cpu_cores;  // none: no earlier sample of it (or it is not measured)
  double cpu_seconds = 0;
  uint64_t memory_bytes = 0, memory_limit_bytes = 0;
  uint32_t host_tasks = 0, host_tasks_limit = 0, processes = 0;
  uint64_t output_bytes = 0, output_buffered_bytes = 0;
  bool networked = false;
  uint64_t network_in_bytes = 0, network_out_bytes = 0;
};

// One row per sandbox of `now`, in its order; CPU cores from the same sandbox in `before`.
std::vector<StatsRow> StatsRows(capnp::List<api::SandboxStats>::Reader before,
                                capnp::List<api::SandboxStats>::Reader now);
std::vector<StatsRow> StatsRows(capnp::List<api::SandboxStats>::Reader now);

// "1.5KiB", "45.2MiB", "2GiB": binary units, as docker stats shows memory.
std::string HumanBytes(uint64_t bytes);

// The table, with its header line; "-" for a figure that is not known.
std::string StatsTable(const std::vector<StatsRow>& rows);
// One JSON document (no newline): {"sandboxes":[{...}, ...]}.
std::string StatsJson(const std::vector<StatsRow>& rows);

}  // namespace paseo::client
