"""Provider adapters: codecs for the OpenAI and Anthropic SDKs, dispatch, and ``instrument()``."""
