"""Local OpenAI-compatible LLM servers and their answer sources (scripted, SmolLM2, in-process vLLM)."""
