"""service_test: a root suite that drives the real privhelper, broker and runsc."""

# What every such suite needs at run time: the binaries and the rootfs recipe.
SERVICE_DATA = [
    "//broker:paseo-sandbox-broker",
    "//client:paseo-sandbox",
    "//egress:paseo-sandbox-egress",
    "//privhelper:paseo-sandbox-privhelper",
    "//rootfs:build-rootfs",
    "//sandbox:paseo-sandbox-shim",
]

def service_test(name, srcs, deps = [], data = [], size = "large", both_process_paths = False, env = {}):
    """A cc_test tagged local (runsc cannot run in Bazel's sandbox), exclusive (suites must not
    share the machine's runsc load) and requires-root.

    env: environment variables of the test (and of its variants).
    both_process_paths: also NAME_runsc_exec, the same suite with the privhelper's spawner off
    (helper.json "spawner": false), so every process is a `runsc exec`."""
    variants = {name: dict(env)}
    if both_process_paths:
        variants[name + "_runsc_exec"] = dict(env, PASEO_TEST_PROCESS_PATH = "runsc-exec")
    for variant, env in variants.items():
        native.cc_test(
            name = variant,
            size = size,
            srcs = srcs,
            data = SERVICE_DATA + data,
            env = env,
            tags = [
                "exclusive",
                "local",
                "requires-root",
            ],
            deps = [":harness"] + deps,
        )
