// Crash-safe storage of the broker's registry records (schema/records.capnp BrokerSandbox):
// written to a temporary file, fsynced, renamed over the old one, and the directory fsynced,
// so after a crash the file is either the old record or the new one, never a mix.
#pragma once

#include <string>

#include <capnp/message.h>

#include "absl/status/status.h"
#include "schema/records.capnp.h"

namespace paseo {

absl::Status WriteRecordAtomically(const std::string& dir, const std::string& name,
                                   records::BrokerSandbox::Reader record);

// Reads `dir`/`name` into `message` (root: BrokerSandbox).
absl::Status ReadRecord(const std::string& dir, const std::string& name,
                        capnp::MallocMessageBuilder& message);

}  // namespace paseo
