"""cc_library, cc_binary and cc_test that compile their .cc files in batches.

CMake's build is a unity build (CMakeLists.txt: CMAKE_UNITY_BUILD, batches of
8), and every target's sources are written to build beside each other. The
Bazel build compiled them file by file: at -O0 a file of this tree spends
most of its compile parsing the same gRPC, protobuf, Abseil and GoogleTest
headers (about 3.5 s of the 4 s a small test file takes with clang), so the
Bazel build took twice the CPU of either CMake build.

These macros keep the rules' interface. A target with two or more .cc files
gets one generated file per batch of 8, 16 for a cc_test (in the order the
BUILD file lists them), that #includes them, and compiles those instead; the
.cc files become textual headers, so Bazel still checks that every file a
compile reads is declared. A target with one .cc file, or tagged
"layering_probe", is passed to the native rule unchanged.
"""

load("@rules_cc//cc:defs.bzl", _cc_binary = "cc_binary", _cc_library = "cc_library", _cc_test = "cc_test")

_BATCH = 8

# Test programs in batches of 16, as CMake's zs_test() does: a test file
# is small beside the GoogleTest, gRPC and Abseil templates every batch
# instantiates again.
_TEST_BATCH = 16

def _is_cc(src):
    return type(src) == "string" and src.endswith(".cc")

def _batches(name, srcs, testonly, size = _BATCH):
    """Returns (generated .cc files + the non-.cc srcs, the .cc files)."""
    ccs = [s for s in srcs if _is_cc(s)]
    rest = [s for s in srcs if not _is_cc(s)]
    out = []
    for i in range(0, len(ccs), size):
        batch = ccs[i:i + size]
        gen = "%s_unity_%d.cc" % (name, i // size)
        native.genrule(
            name = "%s_unity_%d" % (name, i // size),
            srcs = batch,
            outs = [gen],
            # $(SRCS) are the files' paths from the execution root, which
            # is on every compile's quote include path.
            cmd = "printf '#include \"%s\"\\n' $(SRCS) > $@",
            testonly = testonly,
            visibility = ["//visibility:private"],
        )
        out.append(gen)
    return out + rest, ccs

# The precompiled system headers (bazel/BUILD.bazel, bazel/system_pch.h):
# one for compiles without options of their own, one for those with OpenMP.
_PCH_VARIANTS = {
    (): "",
    ("-fopenmp",): "_omp",
}

def with_pch(kwargs, srcs, tags):
    """kwargs with a precompiled header's copts and dependency added.

    Only where one can be loaded: a target that compiles something, with no
    options but -fopenmp and no macros of its own (clang refuses a
    precompiled header built with other target features, language options
    or macros); not a layering probe, whose dependencies must be only those
    it names.
    """
    copts = tuple(kwargs.get("copts", []))
    if copts not in _PCH_VARIANTS or kwargs.get("local_defines") or kwargs.get("defines"):
        return kwargs
    if "layering_probe" in tags or not [s for s in srcs if _is_cc(s)]:
        return kwargs
    variant = _PCH_VARIANTS[copts]
    out = dict(kwargs)
    out["copts"] = list(copts) + [
        "-include-pch",
        "$(GENDIR)/bazel/system_pch%s.inc" % variant,
    ]
    out["deps"] = kwargs.get("deps", []) + ["//bazel:system_pch" + variant]
    return out

def _wants_unity(srcs, tags):
    if "layering_probe" in tags:
        return False
    return len([s for s in srcs if _is_cc(s)]) >= 2

def cc_library(name, srcs = [], tags = [], textual_hdrs = [], testonly = False, unity = True, **kwargs):
    """cc_library; unity = False compiles the .cc files one by one."""
    kwargs = with_pch(kwargs, srcs, tags)
    if not unity or not _wants_unity(srcs, tags):
        _cc_library(name = name, srcs = srcs, tags = tags, textual_hdrs = textual_hdrs, testonly = testonly, **kwargs)
        return
    unity, ccs = _batches(name, srcs, testonly)
    _cc_library(
        name = name,
        srcs = unity,
        textual_hdrs = textual_hdrs + ccs,
        tags = tags,
        testonly = testonly,
        **kwargs
    )

def _program(rule, name, srcs, tags, deps, testonly, kwargs, size = _BATCH):
    kwargs = with_pch(dict(kwargs, deps = deps), srcs, tags)
    deps = kwargs.pop("deps")
    if not _wants_unity(srcs, tags):
        rule(name = name, srcs = srcs, tags = tags, deps = deps, testonly = testonly, **kwargs)
        return
    unity, ccs = _batches(name, srcs, testonly, size)

    # A program has no textual_hdrs: a library of the .cc files declares them.
    _cc_library(
        name = name + "_unity_sources",
        textual_hdrs = ccs,
        testonly = testonly,
        visibility = ["//visibility:private"],
    )
    rule(
        name = name,
        srcs = unity,
        tags = tags,
        deps = deps + [":" + name + "_unity_sources"],
        testonly = testonly,
        **kwargs
    )

def cc_binary(name, srcs = [], tags = [], deps = [], testonly = False, **kwargs):
    _program(_cc_binary, name, srcs, tags, deps, testonly, kwargs)

def cc_test(name, srcs = [], tags = [], deps = [], **kwargs):
    _program(_cc_test, name, srcs, tags, deps, True, kwargs, _TEST_BATCH)
