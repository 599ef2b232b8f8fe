"""Build macros: Nereid's own code compiles warning-free with -Werror."""

NEREID_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wno-unused-parameter",
    "-Wno-missing-field-initializers",
] + select({
    # GCC 12 at -O2 vectorises almost no loop (its "very cheap" cost model
    # refuses runtime alias checks), so the elementwise kernels ran scalar and
    # branchy: ReLU took ~3 ns per element. -O3 does not reorder float
    # arithmetic (no -ffast-math), so results do not change.
    "//:opt_build": ["-O3"],
    "//conditions:default": [],
})

# The packages a training step spends its time in. Built at -O2 even in the
# default (fastbuild) mode: the tests that train run about 3x faster (a
# 4-worker gossip run: 4.6 s -> 1.7 s), for about a minute more of compiling
# from a fresh clone. The arithmetic is the same (no -ffast-math, no FMA on
# the baseline x86-64): the run's parameter fingerprint does not change.
HOT_PACKAGES = ["coded", "comm", "compress", "core", "ops/cpu", "runtime", "schedulers"]

def _hot_copts():
    if native.package_name() not in HOT_PACKAGES:
        return []
    return select({
        "//:fastbuild_build": ["-O2"],
        "//conditions:default": [],
    })

def nereid_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = NEREID_COPTS + _hot_copts() + copts, **kwargs)

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
