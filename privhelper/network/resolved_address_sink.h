// Where the DNS forwarder reports the addresses it handed a sandbox for an allowed name, so
// the firewall lets the sandbox reach exactly those (netcore's Firewall implements it).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace paseo::network {

class ResolvedAddressSink {  // netcore's Firewall implements it
 public:
  virtual ~ResolvedAddressSink() = default;
  // The sandbox may reach `addr` (host byte order) on `ports` (empty = every port) for `ttl`.
  virtual void AllowResolved(const std::string& sandbox_id, uint32_t addr,
                             const std::vector<uint16_t>& ports, std::chrono::seconds ttl) = 0;
};

}  // namespace paseo::network
