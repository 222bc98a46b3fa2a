"""sm-llm-exporter: exact busy time, requests and tokens of llama.cpp nodes, from their journals."""

__version__ = "0.1.0"  # (pyproject.toml reads it from here: one place)
