"""service_test: a root suite that drives the real privhelper, broker and runsc."""

# What every such suite needs at run time: the binaries and the rootfs recipe.
SERVICE_DATA = [
    "//broker:paseo-sandbox-broker",
    "//client:paseo-sandbox",
    "//privhelper:paseo-sandbox-privhelper",
    "//rootfs:build-rootfs",
    "//sandbox:paseo-sandbox-shim",
]

def service_test(name, srcs, deps = [], data = [], size = "large"):
    """A cc_test tagged local (runsc cannot run in Bazel's sandbox), exclusive (suites must not
    share the machine's runsc load) and requires-root."""
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs,
        data = SERVICE_DATA + data,
        tags = [
            "exclusive",
            "local",
            "requires-root",
        ],
        deps = [":harness"] + deps,
    )
