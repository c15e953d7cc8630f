"""The search: which configurations run, in what order, and when one stops early.

Owns the study loop (`loop.StudyLoop`: ask, enqueue, prune, tell, the budget), the sampler
(`sampling`), the pruning and screening rules (`pruning`), trial roles (`roles`), resume and its
repair pass (`resume`), writing a finished trial to storage (`recording`), the progress lines and
live table (`progress`, `display`), and `driver.optimize`/`run_waiting`, which open a study,
start Ray and run the loop.

May import: `tuner.study.space`, `tuner.study.preflight`, `tuner.study.trial` (the requests it
builds and the backends that run them), and tuner's lower packages (storage, results' wording
and config labels, attrs, errors). Never the stages after a search (`tuner.study.stages`): they
call this package, not the other way round.
"""
