# Gemini CLI: Google's generateContent / streamGenerateContent (GOOGLE_GEMINI_BASE_URL); logs
# ~/.gemini/tmp/<sha256 of the project path>/chats/session-*.jsonl (one JSON per session up to 0.39)
PACKAGE=@google/gemini-cli
VERSION=0.61.0
BIN=gemini
