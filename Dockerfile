# syntax=docker/dockerfile:1
# The Sluice image: sluice-operator and sluice-worker in one image.
#   docker build -t ghcr.io/sluice-dev/sluice:0.1.0 .
# librdkafka is built from source and linked statically by rdkafka-sys; the
# runtime needs only OpenSSL, zlib and CA certificates.

FROM rust:1-bookworm AS builder
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake pkg-config libssl-dev zlib1g-dev python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p sluice-worker -p sluice-operator \
 && install -D -m 0755 target/release/sluice-worker /out/sluice-worker \
 && install -D -m 0755 target/release/sluice-operator /out/sluice-operator

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/*
COPY --from=builder /out/sluice-worker /out/sluice-operator /usr/local/bin/
LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.description="Streaming SQL over Kafka on Kubernetes: sluice-operator and sluice-worker" \
      org.opencontainers.image.source="https://github.com/sluice-dev/sluice" \
      org.opencontainers.image.licenses="Apache-2.0"
# Non-root (the chart and the worker pods run as 65532 with a read-only root).
USER 65532:65532
# The operator Deployment and the worker StatefulSets set their own command.
CMD ["sluice-operator"]
