// A small "internet" for the network suites (issue 13), inside a network namespace the test
// makes: joined to the test's own namespace (the privhelper's host; the harness gives every
// suite its own) by a veth, 192.0.2.1 here and 192.0.2.2 there. It holds an HTTP responder on
// ports 80 and 8080 of every address it has (203.0.113.10, .20-.23, .30, .40, .41,
// 169.254.169.254; a suite adds its own servers on other ports), a DNS
// server on 203.0.113.53 (kZone; NXDOMAIN for the rest; it records what it was asked), and the
// test's namespace routes 203.0.113.0/24 and 169.254.169.254 there. A server on port 8082 of
// every address of the test's own namespace stands for the host's services.
//
//   absl::Status internet = BuildInternet();
//   ASSERT_TRUE(internet.ok()) << internet;
//   network::InNetnsFile(InternetPin(), [] { ...more servers there... });
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace paseo::testing {

// The internet's names and their A records.
extern const std::map<std::string, uint32_t> kZone;

// Builds the internet, once per process (later calls return the first call's status).
absl::Status BuildInternet();
// Where the internet's namespace is pinned.
std::string InternetPin();
// Every name the internet's DNS server was asked, in order.
std::vector<std::string> Asked();

// Runs `argv` (an `ip` command of the test's, never the privhelper's) in the network namespace
// pinned at `pin` (empty: ours), joined with setns; returns its exit code.
int RunIn(const std::string& pin, const std::vector<std::string>& argv);
// A listener on 0.0.0.0:port in the calling thread's namespace, or -1.
int ListenAny(uint16_t port);
// Answers every connection on `listener` with a tiny HTTP response naming `tag`, forever (on a
// detached thread).
void Serve(int listener, std::string tag);

}  // namespace paseo::testing
