"""tuner: pick a vLLM server's speculative-decoding configuration by successful agent tasks/hour."""

__version__ = "0.1.0"
