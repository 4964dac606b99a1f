// CheckEgressCa against the proxy's own CA (egress/cert_authority.h) and against certificates a
// compromised proxy could answer with instead, made with the openssl CLI's library here.
#include "privhelper/egress_ca_check.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "egress/cert_authority.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

// A self-signed certificate with `extensions` (OpenSSL config syntax), as PEM.
std::string SelfSigned(const std::vector<std::pair<int, std::string>>& extensions) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
  X509_set_pubkey(cert, key);
  X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_UTF8,
                             reinterpret_cast<const unsigned char*>("evil"), -1, -1, 0);
  X509_set_issuer_name(cert, X509_get_subject_name(cert));
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  for (const auto& [nid, value] : extensions) {
    X509_EXTENSION* ext = X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str());
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(cert, key, EVP_sha256());
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  X509_free(cert);
  EVP_PKEY_free(key);
  return out;
}

const std::vector<std::string> kHosts = {"api.anthropic.com"};

TEST(CheckEgressCaTest, TheProxysOwnCaPasses) {
  auto ca = egress::CertAuthority::Create("sb-1", {"api.anthropic.com", "api.openai.com"});
  ASSERT_TRUE(ca.ok());
  EXPECT_TRUE(CheckEgressCa((*ca)->certificate_pem(), {"api.openai.com", "api.anthropic.com"}).ok());
  EXPECT_FALSE(CheckEgressCa((*ca)->certificate_pem(), kHosts).ok()) << "one host more than asked";
}

TEST(CheckEgressCaTest, WhatACompromisedProxyCouldSendIsRefused) {
  auto bc = std::make_pair(NID_basic_constraints, std::string("critical,CA:TRUE,pathlen:0"));
  auto nc = std::make_pair(NID_name_constraints, std::string("critical,permitted;DNS:api.anthropic.com"));
  EXPECT_TRUE(CheckEgressCa(SelfSigned({bc, nc}), kHosts).ok()) << "the shape itself passes";
  EXPECT_FALSE(CheckEgressCa(SelfSigned({bc}), kHosts).ok()) << "unconstrained";
  EXPECT_FALSE(CheckEgressCa(SelfSigned({bc, {NID_name_constraints, "permitted;DNS:api.anthropic.com"}}), kHosts).ok())
      << "constraint not critical";
  EXPECT_FALSE(CheckEgressCa(SelfSigned({bc, {NID_name_constraints, "critical,permitted;DNS:com"}}), kHosts).ok())
      << "a wider name";
  EXPECT_FALSE(CheckEgressCa(SelfSigned({bc, {NID_name_constraints,
                                              "critical,permitted;DNS:api.anthropic.com,permitted;IP:0.0.0.0/0.0.0.0"}}),
                             kHosts)
                   .ok())
      << "another kind of name besides";
  EXPECT_FALSE(CheckEgressCa(SelfSigned({{NID_basic_constraints, "critical,CA:TRUE"}, nc}), kHosts).ok())
      << "no pathlen";
  EXPECT_FALSE(CheckEgressCa(SelfSigned({{NID_basic_constraints, "critical,CA:FALSE"}, nc}), kHosts).ok());
  std::string good = SelfSigned({bc, nc});
  EXPECT_FALSE(CheckEgressCa(good + good, kHosts).ok()) << "two certificates";
  EXPECT_FALSE(CheckEgressCa("", kHosts).ok());
  EXPECT_FALSE(CheckEgressCa(std::string(9000, 'A'), kHosts).ok());
  EXPECT_FALSE(CheckEgressCa("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", kHosts).ok());
}

}  // namespace
}  // namespace paseo
