# The private privhelper -> egress proxy protocol, over a socketpair the privhelper made when it
# started the proxy (decision 58). The proxy is unprivileged and trusts only this: which
# sandboxes it serves, each with its own address, its allowNames rules, and the listening socket
# the privhelper made on that sandbox's link. A closed set of two requests.
@0xd393870f8c8644a0;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("paseo::egress::rpc");

struct Rule {
  # One allowNames rule, as the config has it (validated there): "api.example.com" or
  # "*.example.com", lower case.
  name @0 :Text;
  ports @1 :List(UInt16);
  # Empty: every port.
}

interface Listener {
  # Carries one listening TCP socket (SCM_RIGHTS); the proxy dups it and drops the capability.
}

interface Control {
  addSandbox @0 (id :Text, sandboxAddr :UInt32, rules :List(Rule), listener :Listener) -> ();
  # Serve a sandbox: connections on `listener` from `sandboxAddr` (host byte order), checked
  # against `rules`. Fails if the id is served already or no socket came with the call.

  removeSandbox @1 (id :Text) -> ();
  # Stop serving it: its listener closes and its connections end. Unknown ids are no error.
}
