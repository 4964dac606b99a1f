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

struct Secret {
  # A secret the sandbox holds a placeholder for (decision 59): on TLS to one of `hosts` the proxy
  # terminates the connection and puts `value` in place of `placeholder` in the header named
  # `header` (lower case), and nowhere else. Validated by the privhelper (config.cc).
  name @0 :Text;
  hosts @1 :List(Text);
  header @2 :Text;
  placeholder @3 :Text;
  value @4 :Data;
}

interface Listener {
  # Carries one listening TCP socket (SCM_RIGHTS); the proxy dups it and drops the capability.
}

interface Control {
  addSandbox @0 (id :Text, sandboxAddr :UInt32, rules :List(Rule), listener :Listener,
                 secrets :List(Secret)) -> (caCertificate :Text);
  # Serve a sandbox: connections on `listener` from `sandboxAddr` (host byte order), checked
  # against `rules`. With secrets, the answer is the certificate (PEM) of the CA the proxy made
  # for this sandbox, whose key stays in the proxy; else "". Fails if the id is served already,
  # no socket came with the call, or a secret's host is allowed by none of `rules`.

  removeSandbox @1 (id :Text) -> ();
  # Stop serving it: its listener closes and its connections end. Unknown ids are no error.
}
