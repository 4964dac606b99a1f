"""cc_unit: one library from NAME.h/NAME.cc and its test NAME_test.cc beside it."""

def cc_unit(name, deps = [], test_deps = [], visibility = None, testonly = False, test_size = None, test = True, test_tags = [], extra_srcs = []):
    """cc_library `name` (name.cc, name.h, and `extra_srcs`: a class split by role over files)
    and, unless test = False, cc_test `name_test` (name_test.cc, with gtest_main).

    The test runs as an ordinary user under testing/run-tests, so it must need no root.
    `test_tags` go to the test (e.g. "exclusive" for one that must run alone)."""
    native.cc_library(
        name = name,
        srcs = [name + ".cc"] + extra_srcs,
        hdrs = [name + ".h"],
        deps = deps,
        testonly = testonly,
        visibility = visibility,
    )
    if not test:
        return
    native.cc_test(
        name = name + "_test",
        size = test_size,
        tags = test_tags,
        srcs = [name + "_test.cc"],
        deps = [":" + name, "//third_party:gtest_main"] + test_deps,
    )

def cc_fuzz(name, deps = []):
    """A libFuzzer target for one parser, beside the code it fuzzes (docs/testing.md "Fuzzing"):

    - `name`_fuzzer: name_fuzz.cc (LLVMFuzzerTestOneInput) linked with libFuzzer. Built only under
      `--config=asan` (clang, ASan and UBSan; tagged manual and fuzzer), and run for a bounded
      time by testing/run-tests, its seed corpus fuzz/`name`/ as the start.
    - `name`_fuzz_corpus_test: every input of that corpus (seeds and regression inputs of past
      findings) through the same entry point, in the native build, as an ordinary unit test.
    """
    corpus = native.glob(["fuzz/" + name + "/*"])
    native.cc_binary(
        name = name + "_fuzzer",
        testonly = True,
        srcs = [name + "_fuzz.cc"],
        deps = deps,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual", "fuzzer"],
    )
    native.cc_test(
        name = name + "_fuzz_corpus_test",
        size = "small",
        srcs = [name + "_fuzz.cc"],
        deps = deps + ["//testing:fuzz_corpus_main"],
        data = corpus,
        args = ["$(rootpath %s)" % f for f in corpus],
    )
