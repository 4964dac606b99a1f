// What the supervisor's resolver (dns_resolver.h) tells the firewall: the addresses an allowed
// name resolved to, which that sandbox alone may then reach for the answer's TTL. Declared here
// so the firewall (netcore) and the resolver (dns) can be built apart; dns_resolver.h includes
// this.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace paseo::network {

class ResolvedAddressSink {  // netcore's Firewall implements it
 public:
  virtual ~ResolvedAddressSink() = default;
  // The sandbox may reach `addrs` (one DNS answer's, host byte order) on `ports` (empty = every
  // port) for `ttl`. One call per answer, so the firewall can open them in one transaction.
  // Returns how long every one of them is known to stay open (at most `ttl`; less when an
  // entry opened earlier was recent enough to keep), which caps the TTL the sandbox is told
  // (no cache may outlive the firewall entry); zero when they could not be opened.
  virtual std::chrono::seconds AllowResolved(const std::string& sandbox_id,
                                             const std::vector<uint32_t>& addrs,
                                             const std::vector<uint16_t>& ports,
                                             std::chrono::seconds ttl) = 0;
};

}  // namespace paseo::network
