"""docker/: the compose file validates, and the image installs tuner as the README says."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"


def _compose_command() -> list[str]:
    """`docker compose` (v2 plugin) or `docker-compose` (v1), whichever this machine has."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy is not None:
        return [legacy]
    if docker is None:
        pytest.skip("the docker CLI is not installed")
    if os.environ.get("CI"):
        pytest.fail("docker has no compose command: .ci/run installs Debian's docker-compose")
    pytest.skip("docker has no compose command (apt-get install -y docker-compose)")


def _resolved_compose(env: dict[str, str]) -> dict[str, object]:
    out = subprocess.run(
        [*_compose_command(), "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return dict(yaml.safe_load(out.stdout))


def test_compose_config_validates_and_wires_the_storage() -> None:
    config = _resolved_compose({"POSTGRES_PASSWORD": "s3cret", "TUNER_GPU": "rtx-pro-6000"})
    services = config["services"]
    assert isinstance(services, dict)
    assert set(services) == {"postgres", "tuner", "dashboard"}
    storage = "postgresql://tuner:s3cret@postgres:5432/tuner"
    assert services["tuner"]["environment"]["TUNER_STORAGE"] == storage
    assert services["dashboard"]["environment"]["TUNER_STORAGE"] == storage
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "s3cret"
    assert services["tuner"]["command"] == [
        "optimize",
        "--model",
        "qwen3.8-27b",
        "--gpu",
        "rtx-pro-6000",
    ]
    devices = services["tuner"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert services["dashboard"]["command"][0] == "dashboard"
    # The dashboard is published on the host's loopback only (v1 and v2 spell ports apart).
    ports = services["dashboard"]["ports"]
    assert len(ports) == 1
    port = ports[0]
    if isinstance(port, dict):
        assert (port["host_ip"], str(port["published"]), port["target"]) == (
            "127.0.0.1",
            "8080",
            8080,
        )
    else:
        assert port.removesuffix("/tcp") == "127.0.0.1:8080:8080"
    assert "ports" not in services["postgres"] and "ports" not in services["tuner"]


def test_compose_presets_exist() -> None:
    # The default command must name a preset that ships (search_spaces/MODEL/GPU.yaml).
    text = COMPOSE.read_text()
    model = re.search(r"\$\{TUNER_MODEL:-([^}]+)\}", text)
    gpu = re.search(r"\$\{TUNER_GPU:-([^}]+)\}", text)
    assert model is not None and gpu is not None
    assert (ROOT / "search_spaces" / model.group(1) / f"{gpu.group(1)}.yaml").is_file()


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n\s*", " ", dockerfile)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_dockerfile_pins_the_vllm_image_and_runs_tuner() -> None:
    steps = _instructions(DOCKERFILE.read_text())
    assert steps[0] == ("FROM", "vllm/vllm-openai:v0.32.0")
    assert ("ENTRYPOINT", '["tuner"]') in steps


def test_dockerfile_copies_everything_the_wheel_needs() -> None:
    steps = _instructions(DOCKERFILE.read_text())
    copied = {src for kind, rest in steps if kind == "COPY" for src in rest.split()[:-1]}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wheel = pyproject["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", pyproject["project"]["readme"], *wheel["packages"]}
    needed |= set(wheel["force-include"])
    assert needed <= copied
    for src in copied:
        assert (ROOT / src).exists(), src


def _readme_outside_docker_section() -> str:
    text = (ROOT / "README.md").read_text()
    return re.sub(r"^## Docker\n.*?(?=^## |\Z)", "", text, flags=re.MULTILINE | re.DOTALL)


def test_dockerfile_installs_tuner_as_the_readme_says() -> None:
    runs = [rest for kind, rest in _instructions(DOCKERFILE.read_text()) if kind == "RUN"]
    installs = [r for r in runs if r.startswith("pip install")]
    assert len(installs) == 1, runs
    # The README's own install instructions (not the Docker section quoting the Dockerfile)
    # must give this exact command, so the image and a plain install cannot drift apart.
    assert installs[0] in _readme_outside_docker_section()
