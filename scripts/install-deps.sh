#!/usr/bin/env bash
# Installs the Debian 12 packages zeroshard builds and runs with. Idempotent:
# does nothing (and needs no network) when everything is already there.
# Installs without recommends, so the list names everything a minimal root
# (mmdebstrap --variant=apt; see scripts/fresh-root.sh) lacks: e.g.
# ocl-icd-opencl-dev, only recommended by libdnnl-dev, though Debian's
# dnnl-config.cmake needs OpenCL (CMake's configure fails without it);
# python3 runs the build-parity check (tests/build/build_parity.py);
# clang, libclang-rt-14-dev (the sanitizer and libFuzzer runtimes, not a
# dependency of clang), libomp-14-dev (clang's OpenMP, which the worker's
# kernels need), llvm-14 (llvm-symbolizer for readable reports) and lld
# (links the instrumented programs about three times faster than ld.bfd)
# build and run scripts/sanitize.sh; openssl makes the development
# certificates (scripts/make-dev-credentials.sh) that scripts/demo.sh and the
# TLS tests use; libcpp-httplib-dev is the HTTP server behind
# --metrics_listen (common/metrics_http.cc) and prometheus the real scraper
# tests/integration/metrics_test.cc runs (it skips without it); ccache keeps
# compiled objects between builds (CMakeLists.txt uses it when present).
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libgloo-dev libopenblas-dev libdnnl-dev ocl-icd-opencl-dev
  zlib1g-dev libxxhash-dev libssl-dev
  bazel-bootstrap gnuplot-nox ccache
  python3 openssl
  clang libclang-rt-14-dev libomp-14-dev llvm-14 lld
  # tests/deploy's Kubernetes checks: kubectl 1.20 (kustomize v2.0.3)
  # renders deploy/k8s, node with node-ajv and node-js-yaml validates the
  # objects offline (they skip without them)
  kubernetes-client nodejs node-ajv node-js-yaml
  libcpp-httplib-dev prometheus
  # tests/deploy/multihost_run.sh: network namespaces (ip), mount (not in a
  # minimal root), and python3-yaml
  # reads the rendered manifests for the pods' commands (tests/deploy/pod_plan.py)
  iproute2 python3-yaml mount
  # the PyTorch front-end (python/): pybind11 and Python's headers build its
  # extension module; torch and pytest run its tests; venv (with its pip and
  # setuptools) and wheel (setuptools' bdist_wheel, which a venv's pip needs
  # to build the package) for `pip install .` (tests/python/test_pip_install.py)
  pybind11-dev python3-dev python3-torch python3-pytest python3-venv python3-wheel
)
# Options (the default, no option, installs PKGS as before):
#   --build-only  PKGS less NOT_FOR_BUILD: what configuring and compiling the
#                 CMake build needs, without Bazel, gnuplot, the clang /
#                 sanitizer toolchain and test-only tools; the image builders
#                 (deploy/docker/*.Dockerfile) use it. A package added to PKGS
#                 is thus in the image build unless listed here.
#   --torch       --build-only's packages plus python3-torch and python3-venv:
#                 what the torch examples (scripts/run-torch-example.sh) and
#                 the zeroshard-torch image (pip install .) need.
#   --images      PKGS plus podman, buildah and mmdebstrap, which only the
#                 optional image build (deploy/docker/build-images.sh and its
#                 test, tests/deploy/image_test.sh) needs.
NOT_FOR_BUILD=(
  bazel-bootstrap gnuplot-nox openssl
  clang libclang-rt-14-dev libomp-14-dev llvm-14 lld
  kubernetes-client nodejs node-ajv node-js-yaml
  prometheus iproute2 python3-yaml mount
  python3-torch python3-pytest python3-venv python3-wheel
)
case "${1:-}" in
  "") ;;
  --build-only)
    build=()
    for p in "${PKGS[@]}"; do
      [[ " ${NOT_FOR_BUILD[*]} " == *" $p "* ]] || build+=("$p")
    done
    PKGS=("${build[@]}") ;;
  --images) PKGS+=(podman buildah mmdebstrap) ;;
  --torch)
    build=()
    for p in "${PKGS[@]}"; do
      [[ " ${NOT_FOR_BUILD[*]} " == *" $p "* ]] || build+=("$p")
    done
    PKGS=("${build[@]}" python3-torch python3-venv python3-wheel) ;;
  *) echo "usage: $0 [--build-only | --images | --torch]" >&2; exit 2 ;;
esac
missing=()
for p in "${PKGS[@]}"; do
  # A kubectl from elsewhere (Kubernetes' own packages) already renders
  # kustomize; Debian's kubernetes-client would conflict with its file.
  if [ "$p" = kubernetes-client ] && command -v kubectl >/dev/null &&
     ! dpkg-query -S "$(command -v kubectl)" 2>/dev/null | grep -q '^kubernetes-client:'; then
    continue
  fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
