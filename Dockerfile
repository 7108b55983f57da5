# syntax=docker/dockerfile:1
# Multi-stage build: a release binary built from the workspace, run as a
# non-root user on a minimal base. Dependencies are built in their own
# layer, so source changes rebuild only kubefan itself.

FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
# Dependency layer: manifests plus empty targets.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs \
    && echo '' > src/lib.rs \
    && echo 'fn main() {}' > benches/hub.rs \
    && cargo build --release --locked \
    && rm -rf src benches
COPY src src
COPY benches benches
COPY proto proto
# Make sure cargo sees the real sources as newer than the dummy build.
RUN touch src/main.rs src/lib.rs && cargo build --release --locked

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kubefan /usr/local/bin/kubefan
USER 65532:65532
# Inside a container the gateway must listen beyond loopback; expose it
# only through a Service/NetworkPolicy you control.
ENV KUBEFAN_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kubefan"]
CMD ["serve"]
