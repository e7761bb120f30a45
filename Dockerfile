# syntax=docker/dockerfile:1
# qosd container image: a static binary on an empty base.
#
#   docker build -t ghcr.io/qosd/qosd:0.1.0 .
#
# Stage 1 builds a fully static binary (glibc, crt-static: qosd has no C
# dependencies and resolves no host names); stage 2 is `scratch` plus the
# binary and a default config, a few MiB in all.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
ENV CARGO_TERM_COLOR=never
# scripts/build-static-qosd: RUSTFLAGS="-C target-feature=+crt-static",
# the host triple (amd64 or arm64 builders alike), and a refusal of a
# dynamically linked result. The DaemonSet pod test builds with the same
# script and packs the binary at the same path (tests/kube/kube_daemonset.rs).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    scripts/build-static-qosd /out/qosd --release

FROM scratch
COPY --from=build /out/qosd /usr/local/bin/qosd
COPY config/qosd.yaml /etc/qosd/config.yaml
# Root: the host cgroup tree and the CRI socket are root-owned. The
# DaemonSet drops every capability except KILL.
USER 0:0
EXPOSE 9847
ENTRYPOINT ["/usr/local/bin/qosd"]
CMD ["run", "--config", "/etc/qosd/config.yaml"]
