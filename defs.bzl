"""Build macros: Nereid's own code compiles warning-free with -Werror."""

NEREID_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
]

def nereid_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = NEREID_COPTS + copts, **kwargs)

def nereid_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = NEREID_COPTS + copts, **kwargs)

def nereid_cc_test(name, copts = [], deps = [], size = "small", **kwargs):
    native.cc_test(
        name = name,
        size = size,
        copts = NEREID_COPTS + copts,
        deps = deps + ["@system//:gtest_main"],
        **kwargs
    )
