# syntax=docker/dockerfile:1
# The service as an image: `docker build -t patchwell .`
# One machine:  docker run -p 3000:3000 -v launcher-data:/data -e ADMIN_PASSWORD=… patchwell
# Many:         compose.yaml (PostgreSQL + S3-compatible storage + instances behind a load balancer)
# Node.js 24 LTS, as CI (`engines`: 22.14+ or 24, as better-sqlite3 13 needs Node-API 10; 20 reached its end of life in April 2026).
ARG NODE_IMAGE=node:24-bookworm-slim

FROM ${NODE_IMAGE} AS build
WORKDIR /app
# A compiler for better-sqlite3: npm builds it from its sources at install (its binding.gyp).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json tsconfig.json ./
# The workspaces (packages/*): the service imports launcher-client's minisign verification.
COPY packages ./packages
RUN npm ci --no-audit --no-fund
COPY . .
# launcher-client then the service (tsc → dist/), the admin console (vite → admin/dist/), and db:copy as one plain
# JavaScript file (the image keeps no TypeScript runner); then drop the dev dependencies (without
# scripts: the workspaces' `prepare` would rebuild them with the TypeScript just removed).
RUN npm run build \
 && npx esbuild scripts/db-copy.ts --bundle --platform=node --format=esm --target=node24 \
      --packages=external --outfile=dist/scripts/db-copy.js \
 && npm prune --omit=dev --ignore-scripts --no-audit --no-fund

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    DATA_DIR=/data
WORKDIR /app
# zstd makes the delta updates (DELTAS, on by default).
RUN apt-get update \
 && apt-get install -y --no-install-recommends zstd \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /app/package.json /app/package-lock.json ./
COPY --from=build /app/node_modules ./node_modules
# node_modules/launcher-client links to the workspace: its package.json and build.
COPY --from=build /app/packages/launcher-client/package.json ./packages/launcher-client/package.json
COPY --from=build /app/packages/launcher-client/dist ./packages/launcher-client/dist
COPY --from=build /app/dist ./dist
COPY --from=build /app/admin/dist ./admin/dist
# npm run backup / restore check the build with it (and find no sources to rebuild from).
COPY --from=build /app/scripts/ensure-build.mjs ./scripts/ensure-build.mjs
# Every entry imports it first: on a Node that package.json's engines exclude, one line and exit 1.
COPY --from=build /app/scripts/node-version.mjs ./scripts/node-version.mjs
# The embedded database and the local file store live in /data; the app files stay root-owned.
RUN mkdir -p /data && chown node:node /data
USER node
VOLUME ["/data"]
EXPOSE 3000
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||3000)+'/healthz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# SIGTERM: the service stops taking requests, writes its buffered heartbeats and exits 0.
STOPSIGNAL SIGTERM
CMD ["node", "dist/server.js"]
