"""The benchmarks wing: what the docs' measured figures come from (benchmarks/README.md).

Entry points run from the repository root as modules, `python -m benchmarks.NAME`; modules
whose name starts with `_` are the harness they share. Nothing in `tuner` imports this package.
"""
