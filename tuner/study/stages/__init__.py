"""The stages after a search: extra trials through the same loop, or its worker path.

Owns the confirmation stage (`confirm`: fresh starts of the top candidates and the baseline,
interleaved), the load sweep (`load_sweep`: the finalists at several agent counts, each on
a server `evaluate()` starts on a Ray worker, `sweep_workers`: no Optuna trials, so no loop)
and the controls of `tuner explain` (`controls`: the baseline cut to a candidate's KV cache, the
candidate without block drop).

May import: `tuner.study.search` (to queue and run trials), `tuner.study.trial` (the load
sweep's requests and their backend), `tuner.study.space`,
`tuner.results` (the export rule and the study reader: a stage decides with the same rules
`tuner export` uses) and tuner's lower packages.
"""
