// What the supervisor's resolver (dns_resolver.h) tells the firewall: an address an allowed name
// resolved to, which that sandbox alone may then reach for the answer's TTL. Declared here so the
// firewall (netcore) and the resolver (dns) can be built apart; dns_resolver.h includes this.
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
