# Letta Code (local backend): Chat Completions; writes Pi's v3 session format to
# ~/.letta/lc-local-backend/conversations/<base64 id>/messages.jsonl
PACKAGE=@letta-ai/letta-code
VERSION=0.32.18
BIN=letta
# `npm install` of this version fails: its package.json names dependency versions the registry does not have.
# Its letta.js is one bundle that needs only `ws` besides Node: unpack the published tarball, add ws beside it.
install_agent() {
  local package_dir="$prefix/lib/node_modules/$PACKAGE"
  mkdir -p "$package_dir" "$prefix/bin"
  (cd "$prefix" && "$NODE_BIN" "$NPM_CLI" pack --silent "$PACKAGE@$VERSION" > .tarball-name)
  tar -xzf "$prefix/$(cat "$prefix/.tarball-name")" -C "$package_dir" --strip-components=1
  rm -f "$prefix/$(cat "$prefix/.tarball-name")" "$prefix/.tarball-name"
  # In a folder of its own (npm would prune the unpacked package from a node_modules it did not install).
  "$NODE_BIN" "$NPM_CLI" install --prefix "$prefix/deps" --no-audit --no-fund --loglevel=error ws@8.19.0
  mkdir -p "$package_dir/node_modules"
  ln -sfn "$prefix/deps/node_modules/ws" "$package_dir/node_modules/ws"
  ln -sf "../lib/node_modules/$PACKAGE/letta.js" "$prefix/bin/letta"
}
