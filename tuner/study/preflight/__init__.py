"""Before a study runs: its plan, what the installed vLLM accepts and what the workload can use.

Owns `plan.plan_study` (the one step the driver calls: the checks, the model, the space cut
for the workload and the workload's sizing, returned as one `StudyPlan`), `checks.preflight`
(searched knobs the installed vLLM lacks are left out, fixed ones it lacks are refused, a GPU
workload too short to measure is refused) and `checks.StartCheck` (the vLLM version stored on
the study), `dtype` (a CPU preset's `by-cpu` dtype made concrete), `sizing` (the scored
window's length, and the knob values the workload cannot use: `workload_reductions`) and
`calibration` (the sizings a slow box may scale the workload to).

May import: `tuner.study.space`, `tuner.server` (its capabilities query), `tuner.workload`'s
settings, task suite and calibration, `tuner.storage` (to read the study it plans for) and
`tuner.errors`/`tuner.settings`. Nothing that runs a trial.
"""
