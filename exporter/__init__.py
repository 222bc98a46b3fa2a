"""sm-llm-exporter: exact busy time, requests and tokens of llama.cpp nodes, from their journals."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sm-llm-exporter")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
