#!/usr/bin/env python3
"""Checks that the CMake and Bazel builds name the same sources and tests.

CMake writes every target's sources and every GoogleTest binary to
BUILD_DIR/zs_targets.txt at configure time (the top-level CMakeLists.txt).
The Bazel side is read by evaluating each BUILD.bazel file with stand-ins for
the rules (Starlark is a subset of Python), so no Bazel server is needed.

The check fails, naming each difference, when:
  - a C++ library or program exists in one build and not in the other
    (targets are matched by name; a Bazel helper library tagged
    "zs_part_of=NAME" counts as part of NAME);
  - a target's .cc sources differ between the builds;
  - a test binary exists in one build only;
  - a .cc file in the repository is in neither build.
Sources, tests and targets that only CMake can build (CUDA) are listed in
CMAKE_ONLY, CMAKE_ONLY_TESTS and CMAKE_ONLY_TARGETS below, each with why.

  python3 tests/build/build_parity.py --cmake-manifest build/zs_targets.txt
"""

import argparse
import glob as globlib
import os
import sys

# Built by CMake only, with the reason.
CMAKE_ONLY = {
    "comm/nccl_collectives.cc":
        "CUDA/NCCL: the Bazel build has no CUDA toolchain",
    "comm/nccl_host_group.cc": "CUDA/NCCL: host buffers over NCCL",
    "model/kernels/cuda/cublaslt_api.cc": "CUDA: cuBLASLt loaded at run time",
    "model/cuda/device_arch.cc": "CUDA: an architecture's CUDA model",
    "model/cuda/device_block.cc": "CUDA: a GPT block on the device",
    "model/cuda/device_buffer.cc": "CUDA: device activations",
    "model/cuda/device_gpt.cc": "CUDA: the GPT model on the device",
    "model/cuda/device_decoder.cc": "CUDA: what the device models share",
    "model/cuda/device_llama.cc": "CUDA: the Llama model on the device",
    "model/cuda/device_llama_block.cc": "CUDA: a Llama block on the device",
    "model/cuda/device_memory.cc":
        "CUDA: the engine's units and gradients in device memory",
    "optim/adam_device.cc": "CUDA: the device AdamW (nvcc)",
    "model/kernels/cuda/gemm.cc": "CUDA: cuBLASLt matrix products",
    "model/kernels/cuda/op_timer.cc": "CUDA: per-op times on a stream",
    "bench/device_bench.cc": "CUDA: the device benchmarks",
    "bench/device_gpt_bench.cc": "CUDA: the GPT-2-124M device benchmark",
    "tests/optim/adam_device_test.cc": "CUDA: adam_device_test's source",
    "tests/model/kernels_cuda_test.cc": "CUDA: kernels_cuda_test's source",
    "tests/model/kernels_cuda_args_test.cc": "CUDA: kernels_cuda_test's source",
    "tests/model/device_gpt_test.cc": "CUDA: device_gpt_test's source",
    "tests/model/device_llama_test.cc": "CUDA: device_llama_test's source",
    "tests/worker/engine/engine_device_test.cc": "CUDA: engine_device_test's source",
    "tests/server/shard_store_device_test.cc":
        "CUDA: shard_store_device_test's source",
    "tests/model/flash_attention_emulation_test.cc":
        "runs the CUDA kernels' source (model/kernels/cuda, which the Bazel "
        "build leaves out) on the host",
}
# Test binaries and targets that exist only in CUDA builds of CMake.
CMAKE_ONLY_TESTS = {
    "adam_device_test": "CUDA: the device AdamW against the reference",
    "kernels_cuda_test": "CUDA: the GPU kernels against their CPU twins",
    "shard_store_device_test": "CUDA: --placement=device against host",
    "device_gpt_test": "CUDA: the device model against the CPU model",
    "device_llama_test": "CUDA: the device Llama against the CPU Llama",
    "engine_device_test": "CUDA: the engine on a device against the CPU",
    "flash_attention_emulation_test":
        "the flash attention's CUDA kernel source run on the host",
}
CMAKE_ONLY_TARGETS = {
    "zs_kernels_cuda": "CUDA: the GPU kernels (model/kernels/cuda)",
    "zs_model_cuda": "CUDA: the GPT model on a device (model/cuda)",
}

# Folders that hold no project sources.
SKIP_DIRS = ("third_party/", "build", "bazel-", "out/", "docs/")


class Target:
    def __init__(self, package, name, kind, srcs, tags):
        self.package = package
        self.name = name
        self.kind = kind
        self.srcs = srcs
        self.tags = tags


def project_dirs(root):
    """(folder relative to root, its file names) for every project folder:
    walked, not asked of git (a copied tree has no .git), skipping SKIP_DIRS
    and hidden folders."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        dirnames[:] = [d for d in dirnames
                       if not (os.path.join(rel, d) + "/").startswith(SKIP_DIRS)
                       and not d.startswith(".")]
        yield rel, filenames


def read_cmake_manifest(path):
    targets = {}  # name -> set of .cc paths
    tests = set()
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "target":
                targets.setdefault(parts[1], set())
            elif parts[0] == "source":
                if parts[2].endswith(".cc"):
                    targets.setdefault(parts[1], set()).add(parts[2])
            elif parts[0] == "test":
                tests.add(parts[1])
            else:
                raise ValueError("%s: unexpected line %r" % (path, line))
    return targets, tests


def read_bazel(root):
    """Evaluates every BUILD.bazel under root; returns the cc_* rules."""
    rules = []
    build_files = []
    for rel, filenames in project_dirs(root):
        if "BUILD.bazel" in filenames:
            build_files.append(rel)
    for package in sorted(build_files):
        pkg_dir = os.path.join(root, package)

        def glob(include, exclude=(), pkg_dir=pkg_dir):
            out = set()
            for pattern in include:
                for p in globlib.glob(os.path.join(pkg_dir, pattern),
                                      recursive=True):
                    out.add(os.path.relpath(p, pkg_dir))
            for pattern in exclude:
                for p in globlib.glob(os.path.join(pkg_dir, pattern),
                                      recursive=True):
                    out.discard(os.path.relpath(p, pkg_dir))
            return sorted(out)

        def select(branches):
            merged = []
            for value in branches.values():
                merged.extend(v for v in value if v not in merged)
            return merged

        def rule(kind, package=package):
            def record(name, srcs=(), tags=(), **kwargs):
                srcs = [s for s in srcs if not s.startswith((":", "//", "@"))]
                rules.append(Target(package, name, kind,
                                    [os.path.join(package, s) for s in srcs],
                                    list(tags)))
            return record

        def ignore(*args, **kwargs):
            return None

        env = {
            "load": ignore,
            "package": ignore,
            "package_group": ignore,
            "filegroup": ignore,
            "genrule": ignore,
            "exports_files": ignore,
            "glob": glob,
            "select": select,
            "cc_library": rule("cc_library"),
            "cc_binary": rule("cc_binary"),
            "cc_test": rule("cc_test"),
        }
        path = os.path.join(pkg_dir, "BUILD.bazel")
        with open(path) as f:
            code = compile(f.read(), path, "exec")
        exec(code, env)  # noqa: S102 - our own BUILD files
    return rules


def repository_sources(root):
    """Every .cc file of the project."""
    out = set()
    for rel, filenames in project_dirs(root):
        out.update(os.path.join(rel, f) for f in filenames if f.endswith(".cc"))
    return out


def compare(cmake_targets, cmake_tests, bazel_rules, repo_sources):
    errors = []
    bazel_targets = {}  # name -> set of .cc
    bazel_tests = set()
    defined = set()
    for r in bazel_rules:
        if "layering_probe" in r.tags:
            continue  # visibility checks, not built (scripts/bazel-test.sh)
        if r.kind == "cc_library" and not any(s.endswith(".cc") for s in r.srcs):
            continue  # header-only: CMake needs no target (include path only)
        if r.name in defined:
            errors.append("Bazel defines %s twice" % r.name)
        defined.add(r.name)
        owner = r.name
        for tag in r.tags:
            if tag.startswith("zs_part_of="):
                owner = tag.split("=", 1)[1]
        bazel_targets.setdefault(owner, set()).update(
            s for s in r.srcs if s.endswith(".cc"))
        if r.kind == "cc_test":
            bazel_tests.add(r.name)

    # Generated sources (the protos) are compared by target name only.
    def in_tree(srcs):
        return {s for s in srcs if s in repo_sources}

    for name in sorted(set(cmake_targets) | set(bazel_targets)):
        if name not in bazel_targets:
            if name not in CMAKE_ONLY_TARGETS and name not in CMAKE_ONLY_TESTS:
                errors.append("target %s is built by CMake only" % name)
            continue
        if name not in cmake_targets:
            errors.append("target %s is built by Bazel only" % name)
            continue
        c = in_tree(cmake_targets[name]) - set(CMAKE_ONLY)
        b = in_tree(bazel_targets[name])
        for s in sorted(c - b):
            errors.append("%s: %s is in CMake's sources, not Bazel's" % (name, s))
        for s in sorted(b - c):
            errors.append("%s: %s is in Bazel's sources, not CMake's" % (name, s))
    for t in sorted(cmake_tests - bazel_tests - set(CMAKE_ONLY_TESTS)):
        errors.append("test %s is registered by CMake only" % t)
    for t in sorted(bazel_tests - cmake_tests):
        errors.append("test %s is registered by Bazel only" % t)

    built = set()
    for srcs in list(cmake_targets.values()) + list(bazel_targets.values()):
        built |= srcs
    for s in sorted(repo_sources - built - set(CMAKE_ONLY)):
        errors.append("%s is in neither build" % s)
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cmake-manifest", required=True)
    parser.add_argument("--root", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    parser.add_argument(
        "--drop-cmake-source", action="append", default=[],
        help="testing: remove this source from CMake's side before comparing "
             "(the check must then fail)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    cmake_targets, cmake_tests = read_cmake_manifest(args.cmake_manifest)
    for drop in args.drop_cmake_source:
        for srcs in cmake_targets.values():
            srcs.discard(drop)
    rules = read_bazel(root)
    # Nothing to compare is a broken check, not agreement.
    if not cmake_targets or not cmake_tests or not rules:
        print("build parity: nothing to compare (%d CMake targets, %d CMake "
              "tests, %d Bazel rules under %s)" %
              (len(cmake_targets), len(cmake_tests), len(rules), root))
        return 1
    errors = compare(cmake_targets, cmake_tests, rules,
                     repository_sources(root))
    n_sources = sum(len(s) for s in cmake_targets.values())
    if errors:
        print("build parity: %d difference(s) between CMake and Bazel:" %
              len(errors))
        for e in errors:
            print("  " + e)
        return 1
    print("build parity: CMake and Bazel agree on %d targets, %d sources, "
          "%d tests (CMake only: %s)" %
          (len(cmake_targets), n_sources, len(cmake_tests),
           ", ".join(sorted(CMAKE_ONLY) + sorted(CMAKE_ONLY_TESTS) +
                    sorted(CMAKE_ONLY_TARGETS))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
