#include "egress/cert_authority.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "gtest/gtest.h"

namespace paseo::egress {
namespace {

X509* Read(const std::string& pem, size_t nth = 0) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = nullptr;
  for (size_t i = 0; i <= nth; ++i) {
    if (cert != nullptr) X509_free(cert);
    cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  }
  BIO_free(bio);
  return cert;
}

// X509_verify_cert of `leaf` against `ca` alone, strict, for `host`: 0 when it verifies, else
// OpenSSL's error.
int Verify(const std::string& ca_pem, const std::string& leaf_pem, const std::string& host) {
  X509* ca = Read(ca_pem);
  X509* leaf = Read(leaf_pem);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  X509_STORE_CTX_init(ctx, store, leaf, nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
  X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_X509_STRICT);
  X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
  int ok = X509_verify_cert(ctx);
  int err = ok == 1 ? 0 : X509_STORE_CTX_get_error(ctx);
  X509_STORE_CTX_free(ctx);
  X509_STORE_free(store);
  X509_free(leaf);
  X509_free(ca);
  return err;
}

TEST(CertAuthorityTest, ALeafVerifiesForItsHostOnly) {
  auto ca = CertAuthority::Create("sb-1", {"api.anthropic.com", "api.openai.com"});
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto leaf = (*ca)->LeafFor("api.anthropic.com");
  ASSERT_TRUE(leaf.ok()) << leaf.status();
  EXPECT_EQ(Verify((*ca)->certificate_pem(), (*leaf)->certificate_pem, "api.anthropic.com"), 0);
  EXPECT_EQ(Verify((*ca)->certificate_pem(), (*leaf)->certificate_pem, "api.openai.com"),
            X509_V_ERR_HOSTNAME_MISMATCH);
  EXPECT_EQ((*ca)->LeafFor("api.anthropic.com").value(), *leaf) << "kept";
  EXPECT_FALSE((*ca)->LeafFor("github.com").ok()) << "a name not its own";
}

TEST(CertAuthorityTest, TheCaIsConstrainedToItsHostsAndMayNotSignCas) {
  auto ca = CertAuthority::Create("sb-1", {"api.anthropic.com"});
  ASSERT_TRUE(ca.ok());
  X509* cert = Read((*ca)->certificate_pem());
  ASSERT_NE(cert, nullptr);
  int crit = 0;
  auto* nc = static_cast<NAME_CONSTRAINTS*>(X509_get_ext_d2i(cert, NID_name_constraints, &crit, nullptr));
  ASSERT_NE(nc, nullptr);
  EXPECT_EQ(crit, 1);
  ASSERT_EQ(sk_GENERAL_SUBTREE_num(nc->permittedSubtrees), 1);
  GENERAL_NAME* name = sk_GENERAL_SUBTREE_value(nc->permittedSubtrees, 0)->base;
  ASSERT_EQ(name->type, GEN_DNS);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(name->d.dNSName))),
            "api.anthropic.com");
  NAME_CONSTRAINTS_free(nc);
  auto* bc = static_cast<BASIC_CONSTRAINTS*>(X509_get_ext_d2i(cert, NID_basic_constraints, &crit, nullptr));
  ASSERT_NE(bc, nullptr);
  EXPECT_TRUE(bc->ca);
  EXPECT_EQ(ASN1_INTEGER_get(bc->pathlen), 0);
  BASIC_CONSTRAINTS_free(bc);
  X509_free(cert);
  EXPECT_EQ((*ca)->certificate_pem().find("PRIVATE KEY"), std::string::npos);
}

TEST(CertAuthorityTest, EachCaIsItsOwn) {
  auto a = CertAuthority::Create("sb-a", {"api.anthropic.com"});
  auto b = CertAuthority::Create("sb-b", {"api.anthropic.com"});
  ASSERT_TRUE(a.ok() && b.ok());
  auto leaf = (*a)->LeafFor("api.anthropic.com");
  ASSERT_TRUE(leaf.ok());
  EXPECT_NE(Verify((*b)->certificate_pem(), (*leaf)->certificate_pem, "api.anthropic.com"), 0)
      << "another sandbox's CA does not vouch for this sandbox's leaf";
}

}  // namespace
}  // namespace paseo::egress
