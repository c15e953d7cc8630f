"""`--slots` and the preset's gpu.count against what a Ray cluster's nodes offer (ray_session)."""

from __future__ import annotations

import pytest

from tuner.errors import ConfigError
from tuner.study.search.ray_session import check_slots, slots_offered

CPU = "tuner_cpu_slot"


def test_gpu_slots_count_whole_servers_per_node() -> None:
    # Two nodes of 3 GPUs hold two 2-GPU servers, not three: a server never spans nodes.
    nodes = [{"GPU": 3.0}, {"GPU": 3.0}]
    assert slots_offered(nodes, gpus_per_slot=2, cpu_resource=CPU) == 2
    assert slots_offered(nodes, gpus_per_slot=1, cpu_resource=CPU) == 6


def test_cpu_slots_are_the_nodes_tuner_cpu_slots() -> None:
    nodes = [{CPU: 1.0, "CPU": 16.0}, {CPU: 1.0, "CPU": 16.0}, {"CPU": 4.0}]
    assert slots_offered(nodes, gpus_per_slot=0, cpu_resource=CPU) == 2
    assert slots_offered([{"CPU": 4.0}], gpus_per_slot=0, cpu_resource=CPU) is None


def _check(slots: int, nodes: list[dict[str, float]], gpus: int, *, option: bool) -> None:
    check_slots(
        slots, nodes, gpus_per_slot=gpus, gpu_count=slots * max(gpus, 1), cpu_resource=CPU,
        where="10.0.0.1:6379", from_option=option,
    )  # fmt: skip


def test_too_many_slots_is_one_line_naming_the_fix() -> None:
    with pytest.raises(ConfigError) as err:
        _check(3, [{CPU: 1.0}, {CPU: 1.0}], 0, option=True)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith("--slots 3 needs 3 slot(s)")
    assert "offers 2" in line and "--slots 2" in line
    with pytest.raises(ConfigError, match=r"gpu.count 4 needs 4 slot\(s\) of 1 GPU"):
        _check(4, [{"GPU": 2.0}], 1, option=False)
    with pytest.raises(ConfigError, match="offers none"):
        _check(1, [{"CPU": 8.0}], 1, option=False)


def test_what_fits_passes() -> None:
    _check(2, [{CPU: 1.0}, {CPU: 1.0}], 0, option=True)
    _check(2, [{"GPU": 8.0}], 4, option=False)
    _check(2, [{"CPU": 2.0}], 0, option=False)  # one box, no slot resource: the preset says


def test_a_cpu_cluster_without_slot_resources_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"offers no 'tuner_cpu_slot' resource"):
        _check(2, [{"CPU": 2.0}, {"CPU": 2.0}], 0, option=True)
