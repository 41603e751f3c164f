# zeroshard-worker image: zeroshard-worker and zeroshard-ctl on a CUDA
# runtime base with NCCL (Ubuntu 24.04, the base NVIDIA publishes for CUDA 13).
#   docker build -f deploy/docker/worker.Dockerfile -t zeroshard-worker .
# The build stage mirrors server.Dockerfile's (install-deps --build-only, a
# CMake build of only the targets the image holds) on the matching CUDA
# devel image, so nvcc and libnccl-dev are there and the CUDA targets build.
# NOT BUILT ON THE DEVELOPMENT MACHINE: no registry is reachable there, so
# nvidia/cuda cannot be pulled (only server.Dockerfile is built and tested,
# tests/deploy/image_test.sh). install-deps.sh is written for Debian 12; its
# --build-only list uses names Ubuntu 24.04 also has.
ARG CUDA_VERSION=13.0.1
ARG BUILDER_BASE=docker.io/nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04
ARG RUNTIME_BASE=docker.io/nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04

FROM ${BUILDER_BASE} AS build
ARG JOBS=2
# sm_90 (H100/H200); pass e.g. --build-arg CUDA_ARCHS="80;90" for more.
ARG CUDA_ARCHS=90
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh --build-only
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DZS_CUDA_ROOT=/usr/local/cuda -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS}" \
 && cmake --build /build -j"${JOBS}" --target zeroshard-worker zeroshard-ctl \
 && mkdir -p /out/bin \
 && install -s -m 0755 /build/bin/zeroshard-worker /build/bin/zeroshard-ctl /out/bin/ \
 && bash deploy/docker/runtime-packages.sh /out/bin/* > /out/runtime-packages.txt \
 && cat /out/runtime-packages.txt

FROM ${RUNTIME_BASE}
ARG SOURCE_COMMIT=unknown
LABEL org.opencontainers.image.title="zeroshard-worker" \
      org.opencontainers.image.description="zeroshard worker and zeroshard-ctl (CUDA runtime, NCCL)" \
      org.opencontainers.image.revision="${SOURCE_COMMIT}"
COPY --from=build /out/runtime-packages.txt /usr/local/share/zeroshard/runtime-packages.txt
# The runtime packages ldd derived (CUDA's own, such as cuda-cudart-13-0 and
# libnccl2, are already in the base; apt leaves them as they are).
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive xargs -a /usr/local/share/zeroshard/runtime-packages.txt \
      apt-get install -y -qq --no-install-recommends \
 && apt-get clean && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /nonexistent \
      --shell /usr/sbin/nologin zeroshard \
 && mkdir -p /etc/zeroshard /ckpt /run/zeroshard \
 && chown zeroshard:zeroshard /ckpt /run/zeroshard
COPY --from=build /out/bin/ /usr/local/bin/
USER 10001:10001
# 9401: Prometheus /metrics.
EXPOSE 9401
# No ENTRYPOINT: the Indexed Job's command (deploy/k8s) names the binary.
CMD ["zeroshard-worker", "--help"]
