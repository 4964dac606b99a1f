// See cert_authority.h.
#include "egress/cert_authority.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paseo::egress {
namespace {

constexpr long kDay = 24 * 60 * 60;

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using Cert = std::unique_ptr<X509, X509Free>;

absl::Status Failed(const char* what) {
  return absl::InternalError(absl::StrCat("egress CA: ", what, " failed"));
}

Pkey NewKey() { return Pkey(EVP_EC_gen("P-256")); }

std::string PemOf(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  std::string out;
  if (PEM_write_bio_X509(bio, cert) == 1) {
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    out.assign(data, static_cast<size_t>(n));
  }
  BIO_free(bio);
  return out;
}

std::string PemOf(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_secmem());
  std::string out;
  if (PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr) == 1) {
    char* data = nullptr;
    long n = BIO_get_mem_data(bio, &data);
    out.assign(data, static_cast<size_t>(n));
  }
  BIO_free(bio);
  return out;
}

// A certificate for `key`'s public half, signed by `issuer_key`, with `extensions` (name, value
// in OpenSSL's configuration syntax) in order; `issuer` null for a self-signed one.
absl::StatusOr<Cert> Sign(EVP_PKEY* key, const std::string& common_name, X509* issuer,
                          EVP_PKEY* issuer_key, long valid_days,
                          const std::vector<std::pair<int, std::string>>& extensions) {
  Cert cert(X509_new());
  if (!cert) return Failed("X509_new");
  uint8_t serial[16];
  if (RAND_bytes(serial, sizeof(serial)) != 1) return Failed("RAND_bytes");
  serial[0] &= 0x7f;  // positive
  BIGNUM* bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  bool ok = bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get())) != nullptr;
  BN_free(bn);
  ok = ok && X509_set_version(cert.get(), 2) == 1 &&
       X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kDay) != nullptr &&
       X509_gmtime_adj(X509_getm_notAfter(cert.get()), valid_days * kDay) != nullptr &&
       X509_set_pubkey(cert.get(), key) == 1;
  X509_NAME* name = X509_get_subject_name(cert.get());
  ok = ok && X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                        reinterpret_cast<const unsigned char*>("paseo-sandbox"), -1,
                                        -1, 0) == 1 &&
       X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                  -1, 0) == 1;
  X509* signer = issuer != nullptr ? issuer : cert.get();
  ok = ok && X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) == 1;
  if (!ok) return Failed("building a certificate");
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, signer, cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] : extensions) {
    X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str());
    if (ext == nullptr) return Failed("an extension");
    bool added = X509_add_ext(cert.get(), ext, -1) == 1;
    X509_EXTENSION_free(ext);
    if (!added) return Failed("adding an extension");
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return Failed("X509_sign");
  return cert;
}

}  // namespace

struct CertAuthority::Keys {
  Pkey key;
  Cert cert;
};

CertAuthority::CertAuthority() : keys_(std::make_unique<Keys>()) {}
CertAuthority::~CertAuthority() = default;

absl::StatusOr<std::unique_ptr<CertAuthority>> CertAuthority::Create(
    const std::string& label, const std::vector<std::string>& hosts) {
  if (hosts.empty()) return absl::InvalidArgumentError("egress CA: no hosts");
  std::unique_ptr<CertAuthority> ca(new CertAuthority());
  ca->hosts_ = hosts;
  ca->keys_->key = NewKey();
  if (!ca->keys_->key) return Failed("EVP_EC_gen");
  std::vector<std::string> permitted;
  for (const std::string& h : hosts) permitted.push_back(absl::StrCat("permitted;DNS:", h));
  auto cert = Sign(ca->keys_->key.get(), absl::StrCat("paseo-sandbox egress CA for ", label),
                   nullptr, ca->keys_->key.get(), 3650,
                   {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                    {NID_key_usage, "critical,keyCertSign,cRLSign"},
                    {NID_subject_key_identifier, "hash"},
                    {NID_name_constraints, absl::StrCat("critical,", absl::StrJoin(permitted, ","))}});
  if (!cert.ok()) return cert.status();
  ca->keys_->cert = std::move(*cert);
  ca->certificate_pem_ = PemOf(ca->keys_->cert.get());
  if (ca->certificate_pem_.empty()) return Failed("PEM_write_bio_X509");
  return ca;
}

absl::StatusOr<const CertAuthority::Leaf*> CertAuthority::LeafFor(const std::string& host) {
  if (auto it = leaves_.find(host); it != leaves_.end()) return &it->second;
  if (std::find(hosts_.begin(), hosts_.end(), host) == hosts_.end())
    return absl::InvalidArgumentError(absl::StrCat("egress CA: ", host, " is none of its hosts"));
  Pkey key = NewKey();
  if (!key) return Failed("EVP_EC_gen");
  auto cert = Sign(key.get(), host, keys_->cert.get(), keys_->key.get(), 397,
                   {{NID_basic_constraints, "critical,CA:FALSE"},
                    {NID_key_usage, "critical,digitalSignature"},
                    {NID_ext_key_usage, "serverAuth"},
                    {NID_subject_key_identifier, "hash"},
                    {NID_authority_key_identifier, "keyid:always"},
                    {NID_subject_alt_name, absl::StrCat("DNS:", host)}});
  if (!cert.ok()) return cert.status();
  Leaf leaf{PemOf(key.get()), PemOf(cert->get()) + certificate_pem_};
  if (leaf.key_pem.empty()) return Failed("PEM_write_bio_PrivateKey");
  return &leaves_.emplace(host, std::move(leaf)).first->second;
}

}  // namespace paseo::egress
