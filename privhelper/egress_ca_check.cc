// See egress_ca_check.h.
#include "privhelper/egress_ca_check.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace paseo {
namespace {

absl::Status Refused(absl::string_view why) {
  return absl::PermissionDeniedError(absl::StrCat("the egress proxy's CA certificate: ", why));
}

}  // namespace

absl::Status CheckEgressCa(const std::string& pem, const std::vector<std::string>& hosts) {
  if (pem.empty() || pem.size() > kMaxEgressCaBytes) return Refused("empty or too large");
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return Refused("BIO_new_mem_buf failed");
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  X509* second = cert != nullptr ? PEM_read_bio_X509(bio, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(bio);
  struct Free {
    X509* a;
    X509* b;
    ~Free() {
      X509_free(a);
      X509_free(b);
    }
  } owned{cert, second};
  if (cert == nullptr) return Refused("not a PEM certificate");
  if (second != nullptr) return Refused("more than one certificate");
  int critical = 0;
  auto* bc = static_cast<BASIC_CONSTRAINTS*>(
      X509_get_ext_d2i(cert, NID_basic_constraints, &critical, nullptr));
  bool ca = bc != nullptr && bc->ca && critical == 1 && bc->pathlen != nullptr &&
            ASN1_INTEGER_get(bc->pathlen) == 0;
  BASIC_CONSTRAINTS_free(bc);
  if (!ca) return Refused("not a CA with critical basicConstraints and pathlen 0");
  auto* nc = static_cast<NAME_CONSTRAINTS*>(
      X509_get_ext_d2i(cert, NID_name_constraints, &critical, nullptr));
  if (nc == nullptr || critical != 1) {
    NAME_CONSTRAINTS_free(nc);
    return Refused("no critical name constraints");
  }
  std::set<std::string> permitted;
  bool only_dns = true;
  for (int i = 0; i < sk_GENERAL_SUBTREE_num(nc->permittedSubtrees); ++i) {
    GENERAL_SUBTREE* t = sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, i);
    if (t->base->type != GEN_DNS || t->minimum != nullptr || t->maximum != nullptr) {
      only_dns = false;
      continue;
    }
    ASN1_IA5STRING* dns = t->base->d.dNSName;
    permitted.insert(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                                 static_cast<size_t>(ASN1_STRING_length(dns))));
  }
  NAME_CONSTRAINTS_free(nc);
  std::set<std::string> wanted(hosts.begin(), hosts.end());
  if (!only_dns || permitted != wanted)
    return Refused("its name constraints permit other names than the secrets' hosts");
  return absl::OkStatus();
}

}  // namespace paseo
