# Codex CLI: OpenAI Responses API; logs ~/.codex/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl
PACKAGE=@openai/codex
VERSION=0.171.0
BIN=codex
