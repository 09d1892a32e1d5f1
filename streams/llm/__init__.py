"""The OpenAI-compatible chat client (`client`) and the cost meter of LLM calls and other
worker metrics (`metering`)."""
