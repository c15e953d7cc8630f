"""Fakes that stand in for real services in tests (named as fakes; real services where they run).

- `tuner.testing.fake_vllm`: a stand-in vLLM API server, run as
  `python -m tuner.testing.fake_vllm --model M --port P`.
"""
