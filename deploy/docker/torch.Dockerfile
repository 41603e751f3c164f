# zeroshard-torch image: Debian's torch and the zeroshard package, for the
# ranks of a user's PyTorch script (deploy/k8s/overlays/pytorch). One stage:
# the package is pip-installed into a venv that sees Debian's torch, as the
# README's "pip install" does, so the build tools stay in the image (torch
# dominates its size anyway).
#   podman build -f deploy/docker/torch.Dockerfile -t zeroshard-torch .
# Not built in CI (like worker.Dockerfile); build-images.sh builds the
# server image only.
ARG BASE=docker.io/library/debian:bookworm
FROM ${BASE}
ARG JOBS=2
ARG SOURCE_COMMIT=unknown
LABEL org.opencontainers.image.title="zeroshard-torch" \
      org.opencontainers.image.description="zeroshard's PyTorch front-end on Debian 12's torch" \
      org.opencontainers.image.revision="${SOURCE_COMMIT}"
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh --torch \
 && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY . .
# No CUDA: the ranks train CPU tensors (Gloo); the GPU path is the native
# worker image's.
RUN cmake -S . -B /src/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DZS_ENABLE_CUDA=OFF \
 && export CMAKE_BUILD_PARALLEL_LEVEL="${JOBS}" \
 && python3 -m venv --system-site-packages /opt/zeroshard \
 && /opt/zeroshard/bin/pip install --no-build-isolation --no-index /src \
 && ln -s "$(/opt/zeroshard/bin/python -m zeroshard.deepspeed)" /opt/zeroshard/shim \
 && rm -rf /src/build \
 && useradd --system --uid 10001 --user-group --home-dir /nonexistent \
      --shell /usr/sbin/nologin zeroshard \
 && mkdir -p /etc/zeroshard /ckpt /run/zeroshard \
 && chown zeroshard:zeroshard /ckpt /run/zeroshard
# python3 is the venv's; PYTHONPATH=/opt/zeroshard/shim (the Job sets it)
# makes `import deepspeed` zeroshard's.
ENV PATH=/opt/zeroshard/bin:${PATH}
USER 10001:10001
EXPOSE 29500
CMD ["python3", "-m", "zeroshard.launch", "--help"]
