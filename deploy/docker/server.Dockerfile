# zeroshard-server image: zeroshard-server and zeroshard-ctl on Debian 12 slim.
# Built from the checkout (the context is the repository root):
#   podman build -f deploy/docker/server.Dockerfile -t zeroshard-server .
# deploy/docker/build-images.sh makes the two Debian bases locally (no
# registry reachable) and builds this with --isolation=chroot; see README.md.
ARG BUILDER_BASE=docker.io/library/debian:bookworm
ARG RUNTIME_BASE=docker.io/library/debian:bookworm-slim

# --- builder: the README's install-deps (build packages only) + CMake ------
FROM ${BUILDER_BASE} AS build
ARG JOBS=2
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh --build-only
COPY . .
# No CUDA in this image: the server serves --placement=host only.
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DZS_ENABLE_CUDA=OFF \
 && cmake --build /build -j"${JOBS}" --target zeroshard-server zeroshard-ctl \
 && mkdir -p /out/bin \
 && install -s -m 0755 /build/bin/zeroshard-server /build/bin/zeroshard-ctl /out/bin/ \
 && bash deploy/docker/runtime-packages.sh /out/bin/* > /out/runtime-packages.txt \
 && cat /out/runtime-packages.txt

# --- runtime: slim Debian + the packages owning the libraries ldd names -----
FROM ${RUNTIME_BASE}
ARG SOURCE_COMMIT=unknown
LABEL org.opencontainers.image.title="zeroshard-server" \
      org.opencontainers.image.description="zeroshard shard server and zeroshard-ctl (Debian 12)" \
      org.opencontainers.image.revision="${SOURCE_COMMIT}"
COPY --from=build /out/runtime-packages.txt /usr/local/share/zeroshard/runtime-packages.txt
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
# 7070: gRPC (shard service + grpc.health.v1); 9400: Prometheus /metrics.
EXPOSE 7070 9400
# No ENTRYPOINT: the pods' `command: [sh, -c, 'exec zeroshard-server ...']`
# (deploy/k8s) and `podman run IMAGE zeroshard-ctl health ...` both run as
# written. The default command is one server on the pod's gRPC port.
CMD ["zeroshard-server", "--listen=0.0.0.0:7070", "--credentials=/etc/zeroshard/credentials", \
     "--placement=host"]
