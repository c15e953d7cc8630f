"""One trial: start a server, measure it, stop it, and the seam the search runs trials through.

Owns `evaluate.evaluate` (the trainable: a frozen `TrialRequest` in, a frozen `TrialResult`
out, both in `request`, no Optuna or Ray inside; `abort` ends it on an interrupt, `failures`
reads a failed workload, `loads` runs a load sweep's several workloads on the one server),
the `TrialBackend` protocol (`backend`) and the Ray actors that implement it
(`workers.RayBackend`).

May import: `tuner.server`, `tuner.workload`, `tuner.metrics`, `tuner.records` and
`tuner.errors`. Nothing else of `tuner.study`: a trial knows no sampler, study or storage.
"""
