# Pi coding agent: Chat Completions; logs ~/.pi/agent/sessions/--<cwd>--/<ts>_<uuid>.jsonl
PACKAGE=@mariozechner/pi-coding-agent
VERSION=0.73.1
BIN=pi
