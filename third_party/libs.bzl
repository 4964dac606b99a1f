"""The Debian system libraries' link flags, shared by third_party/BUILD.bazel's wrappers and by
binaries that link them statically (STATIC_LINKOPTS)."""

KJ_LINKOPTS = ["-lkj-async", "-lkj", "-lpthread"]

CAPNP_LINKOPTS = ["-lcapnp-rpc", "-lcapnp-json", "-lcapnp"]

ABSL_LINKOPTS = [
    "-labsl_flags_parse",
    "-labsl_flags_usage",
    "-labsl_flags_usage_internal",
    "-labsl_flags_internal",
    "-labsl_flags_marshalling",
    "-labsl_flags_reflection",
    "-labsl_flags_config",
    "-labsl_flags_program_name",
    "-labsl_flags_private_handle_accessor",
    "-labsl_flags_commandlineflag",
    "-labsl_flags_commandlineflag_internal",
    "-labsl_statusor",
    "-labsl_status",
    "-labsl_str_format_internal",
    "-labsl_synchronization",
    "-labsl_graphcycles_internal",
    "-labsl_time",
    "-labsl_civil_time",
    "-labsl_time_zone",
    "-labsl_raw_hash_set",
    "-labsl_hash",
    "-labsl_city",
    "-labsl_low_level_hash",
    "-labsl_hashtablez_sampler",
    "-labsl_cord",
    "-labsl_cordz_info",
    "-labsl_cord_internal",
    "-labsl_cordz_functions",
    "-labsl_cordz_handle",
    "-labsl_exponential_biased",
    "-labsl_strings",
    "-labsl_strings_internal",
    "-labsl_int128",
    "-labsl_symbolize",
    "-labsl_demangle_internal",
    "-labsl_stacktrace",
    "-labsl_debugging_internal",
    "-labsl_malloc_internal",
    "-labsl_bad_optional_access",
    "-labsl_bad_variant_access",
    "-labsl_strerror",
    "-labsl_throw_delegate",
    "-labsl_base",
    "-labsl_spinlock_wait",
    "-labsl_raw_logging_internal",
    "-labsl_log_severity",
    "-lrt",
]

# A fully static binary of these libraries (linkopts of a cc_binary). Debian's absl archives
# are not listed in dependency order, so they go in one group (scanned until nothing more
# resolves); the wrappers' own -l flags after it then add nothing. For short-lived programs
# whose start-up matters: loading and binding ~35 shared libraries costs ~4 ms of CPU a run.
STATIC_LINKOPTS = ["-static", "-Wl,--start-group"] + CAPNP_LINKOPTS + KJ_LINKOPTS + ABSL_LINKOPTS + ["-Wl,--end-group"]

# libnl-route-3's headers include each other as <netlink/...> from /usr/include/libnl3.
LIBNL_COPTS = ["-isystem", "/usr/include/libnl3"]
