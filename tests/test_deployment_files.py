"""docker-compose.yml and the Dockerfile, read as files (no container engine runs in CI).

Checked: the fake provider stays on the compose network with its admin API off and takes
the key the service sends, both from the env file, the API
publishes only the tenants' port (its operators' listener stays on the network), no service
runs as root, the database password comes from an env file rather than the compose file,
the image holds every package the `payments` command imports, and it installs its
dependencies from requirements.lock, hashes checked, and nothing beside them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.control.processes import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
ENV_EXAMPLE = REPO_ROOT / "payments.env.example"
ROOT_USERS = {"root", "0", "0:0"}


def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return document


def services() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of each Dockerfile line, continuation lines joined."""
    joined = DOCKERFILE.read_text().replace("\\\n", " ")
    instructions = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, rest = line.partition(" ")
            instructions.append((name.upper(), rest.strip()))
    return instructions


def image_user() -> str | None:
    users = [rest for name, rest in dockerfile_instructions() if name == "USER"]
    return users[-1] if users else None


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.partition("=")[::2] for item in env)
    return {str(k): str(v) for k, v in env.items()}


def test_the_fake_provider_publishes_no_port() -> None:
    provider = services()["fake-provider"]

    assert "ports" not in provider
    assert provider.get("network_mode") != "host"


def test_the_operators_listener_is_not_published() -> None:
    api = services()["api"]
    published = [str(port) for port in api.get("ports", [])]

    assert published == ["8000:8000"]
    assert not any("8001" in port for port in published)
    assert [str(port) for port in api.get("expose", [])] == ["8001"]
    env = environment(api)
    assert env["PAYMENTS_ADMIN_PORT"] == "8001"
    # Reachable from the other containers of the compose network (Prometheus, tooling).
    assert env["PAYMENTS_ADMIN_HOST"] == "0.0.0.0"
    # The service's own environment replaces the shared one: the provider must stay set.
    assert env["PAYMENTS_PROVIDER_URL"] == "http://fake-provider:8100"
    assert "PAYMENTS_DEVELOPMENT" not in env


def test_no_service_publishes_a_port_but_the_api() -> None:
    for name, service in services().items():
        if name != "api":
            assert "ports" not in service, name


def test_the_fake_providers_admin_api_is_off() -> None:
    for name, service in services().items():
        assert environment(service).get("PAYMENTS_FAKE_PROVIDER_ADMIN", "0") in ("", "0"), name


@pytest.mark.parametrize("name", sorted(services()))
def test_no_service_runs_as_root(name: str) -> None:
    service = services()[name]
    user = service.get("user")
    if user is None:
        # Only our own image may leave it out, since its Dockerfile names a user.
        assert "build" in service, f"{name}: set `user`; its image may run as root"
        user = image_user()
    assert user is not None, f"{name} would run as root"
    assert str(user).split(":")[0] not in ROOT_USERS, name


def test_the_image_does_not_run_as_root() -> None:
    user = image_user()

    assert user is not None
    assert user.split(":")[0] not in ROOT_USERS


def test_the_database_password_comes_from_an_env_file() -> None:
    text = COMPOSE.read_text()
    assert "POSTGRES_PASSWORD" not in text
    for name, service in services().items():
        env = environment(service)
        assert "DATABASE_URL" not in env, f"{name}: the URL holds the password"
        if name in ("postgres", "migrate", "api", "worker"):
            assert service.get("env_file"), f"{name} needs the env file"
    example = ENV_EXAMPLE.read_text()
    assert "POSTGRES_PASSWORD=" in example
    assert "DATABASE_URL=" in example
    assert "payments.env" in (REPO_ROOT / ".gitignore").read_text().split()


def test_the_image_holds_every_package_the_command_needs() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*") for pattern in patterns}
    copied: set[str] = set()
    for name, rest in dockerfile_instructions():
        if name == "COPY":
            *sources, _target = rest.split()
            copied.update(Path(source).name for source in sources)

    assert packages == {"app", "worker", "fake_provider", "client"}
    missing = (packages | {"migrations", "alembic.ini", "pyproject.toml"}) - copied
    assert not missing, f"not in the image: {sorted(missing)}"


def test_the_image_installs_the_hashed_lock_and_nothing_else() -> None:
    instructions = dockerfile_instructions()
    copied = {
        Path(source).name
        for name, rest in instructions
        if name == "COPY"
        for source in rest.split()[:-1]
    }
    installs = [rest for name, rest in instructions if name == "RUN" and "pip install" in rest]

    assert "requirements.lock" in copied
    assert any(
        "--require-hashes" in run.split() and "requirements.lock" in run.split() for run in installs
    ), "the image must install requirements.lock with --require-hashes"
    for run in installs:
        for command in run.split("&&"):
            words = command.split()
            if words[:2] != ["pip", "install"]:
                continue
            # Anything else pip installs must bring no dependencies of its own along.
            assert "--require-hashes" in words or "--no-deps" in words, command


def _compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


def test_compose_itself_accepts_the_file(tmp_path: Path) -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("neither docker-compose nor the docker compose plugin is installed")
    shutil.copy(COMPOSE, tmp_path / "docker-compose.yml")
    shutil.copy(ENV_EXAMPLE, tmp_path / "payments.env")
    result = subprocess.run(
        [*command, "config", "--quiet"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_the_provider_key_comes_from_the_env_file_and_the_fake_provider_takes_it() -> None:
    from fake_provider.merchants import merchant_for, parse_keys

    secrets_ = ("PAYMENTS_PROVIDER_API_KEY", "PAYMENTS_FAKE_PROVIDER_KEYS")
    for name, service in services().items():
        assert not set(secrets_) & set(environment(service)), name
    for name in ("fake-provider", "api", "worker"):
        assert services()[name]["env_file"] == "payments.env", name
    example = dict(
        line.partition("=")[::2]
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    )
    accepted = parse_keys(example["PAYMENTS_FAKE_PROVIDER_KEYS"])
    assert merchant_for(accepted, example["PAYMENTS_PROVIDER_API_KEY"]) == "payments"


def test_the_fake_provider_notifies_the_api_with_the_secret_the_api_knows() -> None:
    from app.settings import Settings
    from fake_provider.settings import FakeProviderSettings

    provider_env = environment(services()["fake-provider"])
    assert provider_env["PAYMENTS_FAKE_PROVIDER_NOTIFY_URL"] == (
        "http://api:8000/provider-events/primary"
    )
    example = dict(
        line.partition("=")[::2]
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    )
    secrets_ = ("PAYMENTS_FAKE_PROVIDER_NOTIFY_SECRET", "PAYMENTS_PROVIDER_EVENT_SECRETS")
    for name, service in services().items():
        assert not set(secrets_) & set(environment(service)), name
    # The provider's settings take the compose file's and the example's values, and send to
    # the merchant the service's key names; the service knows the secret it signs with.
    provider = FakeProviderSettings(
        keys=example["PAYMENTS_FAKE_PROVIDER_KEYS"],
        notify_url=provider_env["PAYMENTS_FAKE_PROVIDER_NOTIFY_URL"],
        notify_secret=example["PAYMENTS_FAKE_PROVIDER_NOTIFY_SECRET"],
        notify_merchant=provider_env["PAYMENTS_FAKE_PROVIDER_NOTIFY_MERCHANT"],
    )
    endpoint = provider.notify_endpoint()
    assert endpoint is not None
    assert endpoint.merchant == "payments"
    service_settings = Settings(
        provider_event_secrets=json.loads(example["PAYMENTS_PROVIDER_EVENT_SECRETS"])
    )
    assert service_settings.provider_event_secrets is not None
    [known] = service_settings.provider_event_secrets["primary"]
    assert known.get_secret_value() == example["PAYMENTS_FAKE_PROVIDER_NOTIFY_SECRET"]


def test_the_consumer_reads_commands_from_the_broker_with_the_env_files_password() -> None:
    from app.settings import Settings

    consumer, rabbitmq = services()["consumer"], services()["rabbitmq"]
    assert consumer["command"] == ["payments", "consume"]
    assert consumer["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
    assert consumer["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert "ports" not in rabbitmq
    for name, service in services().items():
        written = set(environment(service))
        assert not {"PAYMENTS_BROKER_URL", "RABBITMQ_DEFAULT_PASS"} & written, name
    assert consumer["env_file"] == rabbitmq["env_file"] == "payments.env"
    example = dict(
        line.partition("=")[::2]
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    )
    url = Settings(broker_url=example["PAYMENTS_BROKER_URL"]).broker_url
    assert url is not None
    user, password = example["RABBITMQ_DEFAULT_USER"], example["RABBITMQ_DEFAULT_PASS"]
    assert url.get_secret_value() == f"amqp://{user}:{password}@rabbitmq:5672/"
