// See openssl_hello.h.
#include "egress/openssl_hello.h"

#include <openssl/bio.h>
#include <openssl/ssl.h>

namespace paseo::egress {

std::vector<uint8_t> OpenSslHello(const std::string& sni, const std::vector<std::string>& alpn) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  if (!sni.empty()) SSL_set_tlsext_host_name(ssl, sni.c_str());
  if (!alpn.empty()) {
    std::vector<uint8_t> wire;
    for (const std::string& p : alpn) {
      wire.push_back(static_cast<uint8_t>(p.size()));
      wire.insert(wire.end(), p.begin(), p.end());
    }
    SSL_set_alpn_protos(ssl, wire.data(), static_cast<unsigned>(wire.size()));
  }
  SSL_connect(ssl);  // wants to read the server's answer: the hello is in `out`
  char* data = nullptr;
  long n = BIO_get_mem_data(out, &data);
  std::vector<uint8_t> hello(data, data + n);
  SSL_free(ssl);  // frees both BIOs
  SSL_CTX_free(ctx);
  return hello;
}

}  // namespace paseo::egress
