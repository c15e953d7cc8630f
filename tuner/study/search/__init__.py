"""The search: which configurations run, in what order, and when one stops early.

Its modules, by what each owns:

- Running a study: `driver` (`optimize`, `run_waiting`: open the study, start Ray, run the
  loop; `open_study`, `request_factory`), `options` (`OptimizeOptions`, what a run is given,
  and `loop_settings`, how the loop reads it), `summary` (`StudySummary`, what a run leaves
  behind), `ray_session` (Ray's start and stop, the cluster's slots), `interrupts` (Ctrl-C and
  SIGTERM), `sizing_backend` (the backend the loop runs on: the first calibration stored, the
  interrupt's gate).
- The study loop: `loop` (`StudyLoop`: ask, enqueue, run, tell), `loop_settings`
  (`LoopSettings`, `RequestFactory`, `LoopOutcome`), `loop_progress` (progress to Optuna,
  pruning and screening, the finished-trial lines), `loop_budget` (the loop's `--budget`
  target, guard and measuring).
- What runs and what counts: `sampling` (the sampler), `pruning` (the pruning and screening
  rules), `roles` (trial roles, queued extra runs), `resume` (heartbeats, resume and its repair
  pass), `recording` (writing a finished trial to storage).
- Time: `estimate` (the estimate before anything ran, the measured ETA), `budget` (`Budget`:
  `--budget`'s cost, revised plan and guards), `budget_plan` (`split_runs`: a budget's runs
  between the search and the confirmation), `power` (the power table `Budget` reads: what a
  confirmation's rounds buy at the study's noise).
- What the user sees: `progress` (plain progress lines), `display` (the live table).

May import: `tuner.study.space`, `tuner.study.preflight`, `tuner.study.trial` (the requests it
builds and the backends that run them), and tuner's lower packages (storage, results' wording
and config labels, attrs, errors). Never the stages after a search (`tuner.study.stages`): they
call this package, not the other way round.
"""
