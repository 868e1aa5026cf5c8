from __future__ import annotations
class LLM: pass
class SentenceEncoder: pass
