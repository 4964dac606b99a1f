// Tests' ClientHellos: what OpenSSL's client sends first (made on memory BIOs, nothing sent).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace paseo::egress {

// The first flight of an OpenSSL TLS client naming `sni` (no server_name if empty) and offering
// `alpn`.
std::vector<uint8_t> OpenSslHello(const std::string& sni, const std::vector<std::string>& alpn = {});

}  // namespace paseo::egress
