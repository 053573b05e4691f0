# idempotency-proxy: a small, non-root image (docs/operations.md, Docker).
#   docker build -t idempotency-proxy .
#   mkdir conf && cp config/payments.yaml conf/config.yaml
#   docker run --stop-timeout 40 -p 8080:8080 -v $PWD/conf:/etc/idempotency-proxy:ro \
#     -e DATABASE_URL=postgres://… idempotency-proxy
# --stop-timeout 40: Docker's default 10 s grace is shorter than the proxy's
# 30 s drain (shutdownTimeout); a SIGKILL mid-request loses the response.
# The folder, not the file, is mounted: SIGHUP then re-reads an edited file
# (a single-file bind mount keeps the old file after an editor replaces it).
# No `# syntax=` line: BuildKit would fetch a frontend image it does not need.
# The image runs exactly what the tests run: node dist/src/main.js <command>.

# --- build: compile TypeScript with the dev dependencies -------------------
FROM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: "prepare" would compile before the sources are copied; no
# dependency needs an install script.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json ./
COPY src ./src
RUN npm run build \
 && npm prune --omit=dev --ignore-scripts --no-audit --no-fund

# --- runtime: production dependencies and the compiled proxy only ----------
FROM node:24-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build --chown=root:root /app/package.json ./package.json
COPY --from=build --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/dist/src ./dist/src
# The embedded store (used only without a PostgreSQL URL) writes under
# /app/.idempotency-proxy; everything else is read-only for the proxy user.
# Group 0 may write it too: an arbitrary uid with gid 0 (OpenShift) works.
RUN mkdir -p /etc/idempotency-proxy /app/.idempotency-proxy \
 && chown 1000:0 /app/.idempotency-proxy && chmod 0775 /app/.idempotency-proxy
# Numeric (node:node in the base image): Kubernetes can verify runAsNonRoot.
USER 1000:1000
# 8080: client traffic (listen); 9090: /metrics /healthz /readyz (admin).
# The admin listener binds 127.0.0.1:9090 unless the config says otherwise:
# set `admin: 0.0.0.0:9090` for Prometheus or probes from outside the container.
EXPOSE 8080 9090
# `healthcheck` reads the admin address from the same file as CMD's serve
# (admin moved: probed there; admin off: the listener must accept). Started
# with other flags or no file? Give the check the same: --health-cmd.
# --timeout=10s: the check is a node start plus the config loader, about
# 0.4 s of CPU alone and several seconds on a loaded host.
HEALTHCHECK --interval=15s --timeout=10s --start-period=20s --retries=3 \
  CMD ["node", "dist/src/main.js", "healthcheck", "--config", "/etc/idempotency-proxy/config.yaml"]
STOPSIGNAL SIGTERM
# --max-semi-space-size=4: src/node-flags.ts (V8 sizes the heap before our code runs).
ENTRYPOINT ["node", "--max-semi-space-size=4", "dist/src/main.js"]
CMD ["serve", "--config", "/etc/idempotency-proxy/config.yaml"]
