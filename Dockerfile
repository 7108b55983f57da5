# syntax=docker/dockerfile:1
# Multi-stage build: a release binary built from the workspace, run as a
# non-root user on a minimal base. Dependencies are built in their own
# layer, so source changes rebuild only kubefan itself.

FROM rust:1.95-slim-bookworm AS build
# jemalloc (the default allocator, src/heap.rs) is built from its C
# sources by its configure script and make, which the slim image lacks.
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
#
# The build is `cargo build --release --locked --package kubefan`: the
# package and Cargo.lock that CI (`.ci/run`, a debug `cargo test`) tests;
# tests/gateway/deploy.rs checks that this file keeps to that, copies every
# workspace member's manifest and stubs every bench target.
# Dependency layer: manifests plus empty targets.
COPY Cargo.toml Cargo.lock ./
COPY loadtest/Cargo.toml loadtest/
COPY crates/sim/Cargo.toml crates/sim/
RUN mkdir -p src benches loadtest/src crates/sim/src \
    && echo 'fn main() {}' > src/main.rs \
    && echo '' > src/lib.rs \
    && echo '' > crates/sim/src/lib.rs \
    && echo 'fn main() {}' > benches/hub.rs \
    && echo 'fn main() {}' > benches/decode.rs \
    && echo 'fn main() {}' > loadtest/src/main.rs \
    && cargo build --release --locked --package kubefan \
    && rm -rf src benches crates/sim/src
COPY src src
COPY crates/sim/src crates/sim/src
COPY benches benches
COPY proto proto
# Embedded in the binary and served at /lib/ (src/web/mod.rs).
COPY clients/js/kubefan.js clients/js/kubefan-worker.js clients/js/kubefan.d.ts clients/js/
# Make sure cargo sees the real sources as newer than the dummy build.
RUN touch src/main.rs src/lib.rs crates/sim/src/lib.rs \
    && cargo build --release --locked --package kubefan

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kubefan /usr/local/bin/kubefan
USER 65532:65532
# Inside a container the gateway must listen beyond loopback; expose it
# only through a Service/NetworkPolicy you control.
ENV KUBEFAN_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kubefan"]
CMD ["serve"]
