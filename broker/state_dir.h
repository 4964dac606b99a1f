// The broker's own state directory: one subdirectory per sandbox holding its processes' output
// logs (output_log.h) and its record (what only the broker knows: owner, labels, processes'
// argv), written crash-safely (record_store.h) so a restarted broker can rebuild its registry.
#pragma once

#include <set>
#include <string>
#include <utility>

#include <capnp/message.h>

#include "absl/status/statusor.h"
#include "broker/output_log.h"
#include "broker/registry.h"
#include "schema/records.capnp.h"

namespace paseo {

class StateDir {
 public:
  explicit StateDir(std::string dir) : dir_(std::move(dir)) {}

  // Opens (or reopens, after a broker restart) a process's two output logs.
  absl::Status OpenLogs(ProcessRecord& p, uint64_t capacity);
  // Writes the sandbox's record next to its logs (at most 4 KiB of argv per process).
  absl::Status Persist(const SandboxRecord& sandbox);
  // Reads back what Persist wrote into `sandbox` (owner, labels, key) and returns each process's
  // argv by process id; not-found if there is no record.
  absl::StatusOr<std::map<std::string, std::vector<std::string>>> Load(SandboxRecord& sandbox);
  // Removes a sandbox's logs and record.
  void Remove(const std::string& sandbox_id);
  // Removes every sandbox directory whose id is not in `live` (deleted while no broker ran).
  void RemoveAllBut(const std::set<std::string>& live);

 private:
  absl::StatusOr<std::string> SandboxDir(const std::string& sandbox_id, bool create);
  std::string dir_;
};

}  // namespace paseo
