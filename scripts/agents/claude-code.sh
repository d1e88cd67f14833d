# Claude Code: Anthropic Messages API; logs ~/.claude/projects/<cwd slug>/<session>.jsonl
PACKAGE=@anthropic-ai/claude-code
VERSION=2.1.332
BIN=claude
