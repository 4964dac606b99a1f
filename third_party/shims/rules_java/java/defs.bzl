"""Shim for @rules_java//java:defs.bzl: the native rules, offline."""
java_binary = native.java_binary
java_library = native.java_library
java_import = native.java_import
java_test = native.java_test
java_toolchain = native.java_toolchain
java_runtime = native.java_runtime
