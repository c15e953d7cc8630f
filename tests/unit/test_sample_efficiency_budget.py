"""`sample_efficiency.py --total-budget` (benchmarks/_se_budget.py): studies at an equal total
cost, through the confirmation stage that ships.

The replay must drive the product's own stage (`confirm_looks.run_looks`, `confirmation_look`,
`queue_rounds`), not a copy; a study must stay inside its total budget; the stage's loop must
stop, drop and count rounds as `confirm_study` does; and the README's table must be what the
per-seed file gives.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import _se_budget as budget
from benchmarks import _se_write as write
from benchmarks._grid_replay import LARGE_DATA
from benchmarks.grid_truth import load_draws, truth_path
from tuner.metrics import DEFAULT_NOISE
from tuner.results.export_rule import Look
from tuner.study.search.power import LARGEST_K
from tuner.study.stages import confirm_finalists, confirm_looks, confirm_rounds

ROOT = Path(__file__).resolve().parents[2]

README = ROOT / "README.md"


class _T:
    def __init__(self, number: int) -> None:
        self.number = number


def test_the_replay_runs_the_product_s_stage_functions() -> None:
    assert budget.run_looks is confirm_looks.run_looks
    assert budget.queue_rounds is confirm_rounds.queue_rounds
    assert budget.rank_finalists is confirm_finalists.rank_finalists
    from tuner.results import export

    assert budget.confirmation_look is export.confirmation_look


def test_the_stage_loop_looks_drops_the_futile_and_stops() -> None:
    ran: list[tuple[list[int], int]] = []

    def run_rounds(live: list[_T], rounds: int) -> int:
        ran.append(([t.number for t in live], rounds))
        return len(live)

    def look(rounds: int) -> Look:
        if rounds == 2:
            return Look(rounds, 0.0, False, None, "undecided", futile=(2,))
        return Look(rounds, 0.01, True, 1, "#1 beats the baseline")

    dropped: set[int] = set()
    said: list[str] = []
    queued, stopped = confirm_looks.run_looks(
        [_T(0), _T(1), _T(2)], 2, dropped, run_rounds, look, said.append
    )
    assert ran == [([0, 1, 2], 2), ([0, 1], 3)]
    assert stopped == (3, "#1 beats the baseline") and queued == 5 and dropped == {2}
    assert said[-1] == "confirmation: stopped after 3 rounds: #1 beats the baseline"


@pytest.fixture(scope="module")
def _worlds() -> None:
    keys, mu = load_draws(truth_path(LARGE_DATA))
    worlds = [dict(zip(keys, map(float, mu[s]), strict=True)) for s in range(2)]
    budget.init(str(LARGE_DATA), worlds, (0.05,), [0.1])


@pytest.mark.parametrize("total", [0.10, 0.25])
def test_a_study_stays_inside_its_total_budget(_worlds: None, total: float) -> None:
    for search in (0, 1):
        _, run = budget.one((search, total, 0.4, 0.05, 1))
        assert run.search < total  # the guard left the confirmation its time
        assert run.spent <= total * 1.05
        assert run.rounds <= run.cap
        if run.cap:
            assert run.stop in ("win", "futile", "cap")


def test_the_replay_s_budget_is_the_product_s_but_for_the_share_under_test() -> None:
    from tuner.study.search.budget import Budget

    assert issubclass(budget.SplitBudget, Budget)
    for name in ("plan", "may_start_search", "run_started", "run_finished", "left_s", "run_s"):
        assert getattr(budget.SplitBudget, name) is getattr(Budget, name), name
    assert budget.SplitBudget(100.0, 1, 10, True, 0, 10.0, split=0.35).share() == 0.35
    # The loop under the budget is the product's: the search's target and guard are its seam.
    from tuner.study.search.loop import StudyLoop
    from tuner.study.search.loop_budget import LoopBudget

    assert issubclass(StudyLoop, LoopBudget)


def _search_of(seed: int, total: float, split: float) -> tuple[list[int], Any]:
    """The replay's budgeted search of tuner at seed `seed`: the trial counts the sampler was
    handed, and (study, backend, table)."""
    from benchmarks._se_replay import DEFAULT, Search
    from tuner.study.search.sampling import make_sampler

    handed: list[int] = []

    def sampler(seed_: int | None, n: int) -> Any:
        handed.append(n)
        return make_sampler(seed_, n)

    table = budget._WORLDS[0.05][seed % 2]
    study, backend, _ = budget.budgeted_search(
        table, Search("tuner", sampler, DEFAULT.prune), seed, total, split
    )
    return handed, (study, backend, table)


def test_the_sampler_is_handed_the_plan_s_trials_not_the_grid_s_size(_worlds: None) -> None:
    from tuner.study.search.sampling import STARTUP_MIN, startup_trials

    handed, (study, _, table) = _search_of(1, 0.25, 0.7)
    trials = study.get_trials(deepcopy=False)
    assert handed and max(handed) < len(table.configs) // 3  # 52 configs: about 9 trials
    # The sampler's count is the loop's target, which the search never passes.
    assert len(trials) <= max(handed)
    assert {startup_trials(n) for n in handed} == {STARTUP_MIN}  # 3 start-ups, not 5


def test_no_search_trial_starts_that_the_budget_s_guard_refuses(
    _worlds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.study.search.budget import Budget

    asked: list[tuple[float, bool]] = []
    guard = Budget.may_start_search

    def spy(self: Budget, confirm_runs: int) -> bool:
        answer = guard(self, confirm_runs)
        asked.append((self.clock(), answer))
        return answer

    monkeypatch.setattr(Budget, "may_start_search", spy)
    for seed in (0, 1):
        asked.clear()
        _, (_, backend, _) = _search_of(seed, 0.25, 0.4)
        starts = sorted(s for s, _ in backend.spans.values())
        allowed = {t for t, yes in asked if yes}
        assert all(s in allowed for s in starts[1:])  # the first run measures the cost
        refused = [t for t, yes in asked if not yes]
        # Once refused, nothing more starts: the search ends on the guard (or on its target).
        assert not refused or max(starts) <= min(refused)


def test_the_stage_takes_the_budget_s_power_choice_at_the_study_s_noise(
    _worlds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stage's K and cap are what `Budget.confirm_choice` returned for the noise
    `study_noise` measured on that study's runs, on the budget the search ran under."""
    from tuner.results import decision
    from tuner.study.search.budget import Budget

    made: list[Budget] = []
    make = budget.replay_budget

    def made_budget(*a: Any) -> Any:
        made.append(make(*a))
        return made[-1]

    noises: list[Any] = []
    measure = decision.study_noise

    def noise_spy(results: Any) -> Any:
        noises.append(measure(results))
        return noises[-1]

    asked: list[tuple[Budget, Any, Any]] = []
    choose = Budget.confirm_choice

    def choice_spy(self: Budget, noise: Any) -> Any:
        answer = choose(self, noise)
        asked.append((self, noise, answer))
        return answer

    looks: list[tuple[list[int], int]] = []
    run_looks = confirm_looks.run_looks  # the replay's own (the first test)

    def looks_spy(configs: list[Any], first: int, *a: Any, **kw: Any) -> Any:
        looks.append(([t.number for t in configs], first))
        return run_looks(configs, first, *a, **kw)

    monkeypatch.setattr(budget, "replay_budget", made_budget)
    monkeypatch.setattr(budget, "study_noise", noise_spy)
    monkeypatch.setattr(Budget, "confirm_choice", choice_spy)
    monkeypatch.setattr(budget, "run_looks", looks_spy)
    seen_k = set()
    for total, seed in ((0.25, 0), (0.25, 1), (0.5, 0)):
        for seen in (made, noises, asked, looks):
            seen.clear()
        _, run = budget.one((0, total, 0.5, 0.05, seed))
        assert len(asked) == 1 and len(made) == 1
        spent_on, noise, choice = asked[0]
        assert spent_on is made[0]  # the search's budget, carried into the stage
        assert noise is noises[-1]  # the study's measured noise, not the prior
        assert noise.df > DEFAULT_NOISE.df  # the prior updated by the baseline's own starts
        assert spent_on.k_power == LARGEST_K  # no --confirm: the power table's largest K
        assert (run.k, run.cap) == (choice.k, choice.rounds)
        assert choice.k >= 1 and choice.rounds >= 1
        configs, _ = looks[0]
        assert len(configs) == 1 + choice.k  # the baseline and the choice's finalists
        assert run.rounds <= choice.rounds
        seen_k.add(choice.k)
    assert seen_k


@pytest.mark.parametrize(("k", "rounds"), [(2, 1), (3, 2), (0, 0)])
def test_the_stage_runs_whatever_the_budget_chooses(
    _worlds: None, monkeypatch: pytest.MonkeyPatch, k: int, rounds: int
) -> None:
    """K and the cap are not the replay's: a budget that chooses the top 2 for 1 round, the
    top 3 for 2, or no round, gets exactly that stage."""
    from tuner.study.search.budget import Budget, ConfirmChoice

    monkeypatch.setattr(
        Budget, "confirm_choice", lambda self, noise: ConfirmChoice(k, rounds, rounds)
    )
    looks: list[int] = []
    run_looks = confirm_looks.run_looks  # the replay's own (the first test)

    def looks_spy(configs: list[Any], *a: Any, **kw: Any) -> Any:
        looks.append(len(configs))
        return run_looks(configs, *a, **kw)

    monkeypatch.setattr(budget, "run_looks", looks_spy)
    _, run = budget.one((0, 0.5, 0.5, 0.05, 0))
    assert (run.k, run.cap) == (k, rounds)
    if k:
        assert looks == [1 + k] and 1 <= run.rounds <= rounds
    else:
        assert looks == [] and (run.rounds, run.stop) == (0, "none")


def _section_and_doc() -> tuple[list[str], dict[str, Any]]:
    text = README.read_text()
    section = text[text.index(write.BEGIN) : text.index(write.END)].splitlines()
    src = next(x for x in section if x.startswith("<!-- source: "))
    md = src.removeprefix("<!-- source: ").removesuffix(" -->").split(",")[0].strip()
    return section, json.loads((ROOT / md).with_suffix(".json").read_text())


def test_the_readme_table_is_at_equal_total_cost_and_the_per_seed_file_s() -> None:
    section, doc = _section_and_doc()
    assert doc["kind"] == "total-budget"
    seeds = json.loads((ROOT / doc["seeds_file"]).read_text())
    rows = budget.rows(seeds["reported"], doc["chosen"])
    table = budget.table_lines(rows)
    start = section.index(table[0])
    assert section[start : start + len(table)] == table
    assert doc["rows"] == rows
    # Every total has tuner and random at the same split, at 5%, 10% and 12% run noise.
    for label in ("10%", "25%", "50%"):
        pair = [r for r in rows if r["total"] == label]
        assert [budget.short_name(r["search"]) for r in pair] == ["tuner", "random"]
        assert len({(r["split"], r["k"]) for r in pair}) == 1
        assert all(list(r["noise"]) == ["5%", "10%", "12%"] for r in pair)
    tampered = copy.deepcopy(seeds)
    tampered["reported"][0]["regret"] += 0.5
    assert budget.table_lines(budget.rows(tampered["reported"], doc["chosen"])) != table


def test_the_chosen_splits_are_written_for_the_planner() -> None:
    _, doc = _section_and_doc()
    splits = json.loads((ROOT / doc["split_file"]).read_text())
    assert set(splits["totals"]) == {"10%", "25%", "50%"}
    for label, c in splits["totals"].items():
        assert c["search"] + c["confirm"] == pytest.approx(c["total"], abs=1e-3)
        assert (c["search_share"], c["confirm_k"]) == (doc["chosen"][label]["split"], "power")
        tried = {t["split"]: t for t in doc["chosen"][label]["tried"]}
        assert c["confirm_k_median"] == tried[c["search_share"]]["k_median"]


def test_the_split_file_never_takes_the_table_s_place() -> None:
    from benchmarks import sample_efficiency as se

    out = se.out_path(LARGE_DATA)
    assert out.name == "sample-efficiency-total-smollm2-135m-cpu-large.md"
    assert se.split_path(out).name == "sample-efficiency-split-smollm2-135m-cpu-large.json"
    assert se.seeds_path(out).name == "sample-efficiency-seeds-total-smollm2-135m-cpu-large.json"
    assert se.split_path(Path("/tmp/x.md")) == Path("/tmp/x-split.json")
