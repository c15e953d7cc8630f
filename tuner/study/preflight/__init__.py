"""Before a study runs: what the installed vLLM accepts and what the workload can use.

Owns `checks.preflight` (searched knobs the installed vLLM lacks are left out, fixed ones it
lacks are refused, a GPU workload too short to measure is refused) and `checks.StartCheck`
(the vLLM version stored on the study), and `sizing` (the scored window's length, and the
knob values the workload cannot use: `workload_reductions`).

May import: `tuner.study.space`, `tuner.server` (its capabilities query), `tuner.workload`'s
settings and task suite, and `tuner.errors`/`tuner.settings`. Nothing that runs a trial.
"""
