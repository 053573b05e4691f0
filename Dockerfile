# syntax=docker/dockerfile:1
# idempotency-proxy: a small, non-root image.
#   docker build -t idempotency-proxy .
#   docker run -p 8080:8080 -v $PWD/config/payments.yaml:/etc/idempotency-proxy/config.yaml:ro \
#     -e DATABASE_URL=postgres://… idempotency-proxy
# The image runs exactly what the tests run: node dist/src/main.js <command>.

# --- build: compile TypeScript with the dev dependencies -------------------
FROM node:20-slim AS build
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
FROM node:20-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build --chown=root:root /app/package.json ./package.json
COPY --from=build --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/dist/src ./dist/src
# The embedded store (used only without a PostgreSQL URL) writes under
# /app/.idempotency-proxy; everything else is read-only for the proxy user.
RUN mkdir -p /etc/idempotency-proxy /app/.idempotency-proxy \
 && chown node:node /app/.idempotency-proxy
USER node
# 8080: client traffic (listen); 9090: /metrics /healthz /readyz (admin).
# The admin listener binds 127.0.0.1:9090 unless the config says otherwise:
# set `admin: 0.0.0.0:9090` for Prometheus or probes from outside the container.
EXPOSE 8080 9090
# Runs inside the container, where 127.0.0.1:9090 is the admin listener.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:9090/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
STOPSIGNAL SIGTERM
# --max-semi-space-size=4: src/node-flags.ts (V8 sizes the heap before our code runs).
ENTRYPOINT ["node", "--max-semi-space-size=4", "dist/src/main.js"]
CMD ["serve", "--config", "/etc/idempotency-proxy/config.yaml"]
