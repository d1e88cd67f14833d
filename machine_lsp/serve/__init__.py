"""`machine serve`: a trained checkpoint behind the APIs the agents speak (OpenAI Chat Completions and Responses,
Anthropic Messages), every exchange logged under `.machine/served/` for tagging; `machine use`: agent configs.

Importing this package is light (no torch, transformers, peft, openai or anthropic); `server` and `generation`
import them when a server starts.
"""
