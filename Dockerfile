# poolkeeper's image: the static binary of `cargo xtask dist` and nothing else (no shell, no
# libc, no base image to pull). `cargo xtask image` builds it with buildah or podman; by hand,
# after `cargo xtask dist`: `buildah bud -t poolkeeper:VERSION .` (or podman/docker build).
FROM scratch

# The directory holding the dist binary, relative to the build context. `cargo xtask image`
# uses target/dist itself as the context (so CARGO_TARGET_DIR may point anywhere) and sets ".".
ARG DIST=target/dist
ARG VERSION=unknown

LABEL org.opencontainers.image.title="poolkeeper" \
      org.opencontainers.image.description="NodePool placement webhooks and MachineClass finalizer controller" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}"

COPY ${DIST}/poolkeeper /poolkeeper

# Numeric, so the kubelet can verify runAsNonRoot without an /etc/passwd. The binary writes no
# files, so it runs with readOnlyRootFilesystem: true.
USER 65532:65532

# 9443: the admission webhooks (webhook.listen); 8081: /healthz, /readyz, /metrics (health.listen).
EXPOSE 9443 8081

ENTRYPOINT ["/poolkeeper"]
# The path deploy/deployment.yaml mounts the poolkeeper-config ConfigMap at.
CMD ["run", "--config", "/etc/poolkeeper/poolkeeper.yaml"]
