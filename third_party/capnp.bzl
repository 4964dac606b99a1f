"""capnp_cc_library: turns .capnp files into a cc_library with `capnp compile -oc++`."""

def capnp_cc_library(name, srcs, deps = [], capnp_deps = [], visibility = None):
    """Generates <src>.h/<src>.c++ for each .capnp in srcs and wraps them in a cc_library.

    Imports are resolved against the workspace root (`import "/schema/x.capnp"`) and
    /usr/include (for the capnp standard schemas such as c++.capnp and json.capnp).
    capnp_deps lists other .capnp files (labels) that srcs import.
    """
    outs_h = [s + ".h" for s in srcs]
    outs_cc = [s + ".c++" for s in srcs]
    native.genrule(
        name = name + "_gen",
        srcs = srcs + capnp_deps,
        outs = outs_h + outs_cc,
        cmd = " ".join([
            "capnp compile",
            "--no-standard-import -I/usr/include -I.",
            "--src-prefix=$$(dirname $(location %s))" % srcs[0],
            "-oc++:$(@D)",
        ] + ["$(location %s)" % s for s in srcs]) +
              # Project imports are absolute ("/schema/x.capnp"); capnp emits <schema/x.capnp.h>,
              # which Bazel only finds as a quoted include.
              " && sed -i 's|#include <schema/\\(.*\\)>|#include \"schema/\\1\"|' $(OUTS)",
    )
    native.cc_library(
        name = name,
        srcs = outs_cc,
        hdrs = outs_h,
        copts = ["-Wno-unused-parameter"],
        deps = deps + ["//third_party:capnp"],
        visibility = visibility,
    )
