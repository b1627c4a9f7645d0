# Ratchet's container images. They cannot be built on the development
# machine (it has no container runtime or registry); the release workflow
# (.github/workflows/release.yml) builds and pushes them:
#
#   ratchet-mcp/ratchet       the sidecar (target "ratchet", the default):
#                             the static binary on an empty base, as UID
#                             65532, the UID transparent mode's rules exclude
#   ratchet-mcp/ratchet-init  transparent mode's init container (target
#                             "ratchet-init"): the same binary with iptables,
#                             run as root with NET_ADMIN to apply the rules
#
# configs/kubernetes/*.yaml run these images; a test there checks that the
# UID below, the manifests' runAsUser and the rules' --uid agree.

# Build with the official Go image, on the build machine's own platform,
# for the target's (cross-compiling, no emulation for the Go build).
FROM --platform=$BUILDPLATFORM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o /out/ratchet ./cmd/ratchet

# Transparent mode's init container: applies `ratchet transparent rules`
# once, as root with NET_ADMIN, before the sidecar and the app start.
FROM debian:bookworm-slim AS ratchet-init
RUN apt-get update && apt-get install -y --no-install-recommends iptables && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ratchet /usr/local/bin/ratchet
ENTRYPOINT ["/usr/local/bin/ratchet"]
CMD ["transparent", "rules", "--uid", "65532", "--apply"]

# The sidecar: a static binary, the public roots for its calls to the
# vendors, nothing else; never root.
FROM scratch AS ratchet
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/ratchet /ratchet
USER 65532:65532
ENTRYPOINT ["/ratchet"]
CMD ["serve"]
