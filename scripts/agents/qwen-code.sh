# Qwen Code: Chat Completions (--auth-type openai, OPENAI_BASE_URL); logs
# ~/.qwen/projects/<cwd with / -> ->/chats/<sessionId>.jsonl. Needs Node >= 22 (the Node 24 above).
PACKAGE=@qwen-code/qwen-code
VERSION=0.24.4
BIN=qwen
