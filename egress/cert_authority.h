// A sandbox's own certificate authority, made inside the egress proxy for the hosts a sandbox's
// secrets are bound to (decision 59): the proxy terminates TLS for those hosts with leaf
// certificates it issues here, so it can put the real secret into the request. The CA's private
// key is made here and never leaves the proxy's memory; only its certificate goes out (to the
// privhelper, which puts it in that sandbox's trust store and nowhere else).
//
//   ASSIGN_OR_RETURN(auto ca, CertAuthority::Create("sb-1", {"api.anthropic.com"}));
//   send(ca->certificate_pem());
//   ASSIGN_OR_RETURN(const CertAuthority::Leaf* leaf, ca->LeafFor("api.anthropic.com"));
//
// The CA is name-constrained (RFC 5280 nameConstraints, critical) to exactly its hosts: even
// in a sandbox that trusts it, a certificate it signed for any other name fails verification.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace paseo::egress {

class CertAuthority {
 public:
  struct Leaf {
    std::string key_pem;          // the leaf's private key (P-256), for the TLS server only
    std::string certificate_pem;  // the leaf's certificate, then the CA's
  };

  // A new CA (P-256 key, self-signed, valid from a day ago for ten years) for `hosts` (lower-case
  // DNS names, at least one), its subject naming `label` (the sandbox id).
  static absl::StatusOr<std::unique_ptr<CertAuthority>> Create(const std::string& label,
                                                              const std::vector<std::string>& hosts);
  ~CertAuthority();
  CertAuthority(const CertAuthority&) = delete;
  CertAuthority& operator=(const CertAuthority&) = delete;

  const std::string& certificate_pem() const { return certificate_pem_; }
  // The leaf for `host` (one of the CA's hosts; an error for any other), issued at its first
  // use and kept: valid from a day ago for 397 days.
  absl::StatusOr<const Leaf*> LeafFor(const std::string& host);

 private:
  struct Keys;
  CertAuthority();
  std::unique_ptr<Keys> keys_;
  std::vector<std::string> hosts_;
  std::string certificate_pem_;
  std::map<std::string, Leaf> leaves_;
};

}  // namespace paseo::egress
