"""tsattn inside other libraries.

``tsattn.integrations.transformers``: ``attn_implementation="tsattn"`` for Hugging Face transformers
(docs/transformers.md). Nothing here is imported by ``import tsattn``, and importing this package
imports no third-party library: each integration imports its library when it is used.
"""
