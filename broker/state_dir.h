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

  // Opens (or reopens, after a broker restart) a process's two output logs, lossless if its
  // output mode says so.
  absl::Status OpenLogs(ProcessRecord& p, uint64_t capacity);
  // Removes a process's logs (released, or its start failed); open fds keep working until
  // they close.
  void RemoveLogs(const std::string& sandbox_id, const std::string& process_id);
  // Writes the sandbox's record next to its logs (at most 4 KiB of argv per process, its
  // processes' keys and output modes, the tombstones of released ones).
  absl::Status Persist(const SandboxRecord& sandbox);
  // What the record says of a process.
  struct SavedProcess {
    std::vector<std::string> argv;
    std::string key;
    api::OutputMode output = api::OutputMode::DROP_OLDEST;
    OutputLog::Gaps stdout_gaps, stderr_gaps;  // OutputLog::gaps() when it was written
  };
  // Reads back what Persist wrote into `sandbox` (owner, labels, key, tombstones) and returns what
  // it says of each process by process id (argv, key, output mode, its logs' gaps); not-found if
  // there is no record.
  absl::StatusOr<std::map<std::string, SavedProcess>> Load(SandboxRecord& sandbox);
  // Removes a sandbox's logs and record.
  void Remove(const std::string& sandbox_id);
  // Removes every sandbox directory whose id is not in `live` (deleted while no broker ran).
  void RemoveAllBut(const std::set<std::string>& live);

 private:
  absl::StatusOr<std::string> SandboxDir(const std::string& sandbox_id, bool create);
  std::string dir_;
};

}  // namespace paseo
