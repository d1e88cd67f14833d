# OpenCode: Chat Completions; keeps sessions in SQLite ~/.local/share/opencode/opencode.db
PACKAGE=opencode-ai
VERSION=1.18.33
BIN=opencode
