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
