"""The service's user: files it cannot read are found by `check` (as that user, even when run as
root) and stop `run` with one line and exit 77, which the unit does not restart on. Real
processes as a real unprivileged user (nobody, through setpriv), since systemd cannot run here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agent.cli.context import EX_CONFIG, EX_NOPERM
from agent.config.access import Who, _denied, named_user

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="needs root and setpriv to act as an unprivileged user",
    ),
]
NOBODY = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory every user may enter (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="edge-agent-user-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def _nobody_can_run_the_agent() -> str | None:
    """Why uid 65534 cannot start this checkout's agent (None: it can). A checkout or venv under
    a directory only root may enter (a 0700 temp dir, /root) is out of its reach."""
    probe = subprocess.run(
        [*NOBODY, sys.executable, "-c", "import agent.cli.main, click, yaml"],
        capture_output=True,
        text=True,
        timeout=45,
        cwd="/",
    )
    if probe.returncode == 0:
        return None
    last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
    return f"uid 65534 cannot import this checkout's agent ({last}): a parent directory is not open to others"


@pytest.fixture(scope="module")
def nobody_runs() -> None:
    why = _nobody_can_run_the_agent()
    if why is not None:
        pytest.skip(why)


def agent(*args: str, as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
    cmd = [*(NOBODY if as_nobody else []), sys.executable, "-m", "agent", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=45, cwd="/")


def config(base: Path, *, secret: str, store: Path) -> Path:
    """A Modbus device (never reached: these runs stop before polling) and an MQTT upstream
    whose password file is ``secret``."""
    doc = {
        "site": "plant-1",
        "gateway": "gw",
        "store": {"path": str(store)},
        "upstreams": [
            {
                "name": "central",
                "mqtt": {"url": "mqtt://127.0.0.1:9", "username": "gw", "password_file": secret},
            }
        ],
        "devices": [
            {
                "name": "PUMP-07",
                "connections": [{"modbus": {"host": "127.0.0.1", "port": 9}}],
                "channels": {
                    "Trip": {"transition_id": {"register": 10, "type": "uint32"}, "state": {"register": 12}}
                },
            }
        ],
    }
    path = base / "config.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    path.chmod(0o644)
    return path


def secret_in(folder: Path, mode: int, folder_mode: int) -> Path:
    folder.mkdir(exist_ok=True)
    secret = folder / "mqtt-password"
    secret.write_text("hunter2\n", encoding="utf-8")
    secret.chmod(mode)
    folder.chmod(folder_mode)
    return secret


def open_store_dir(base: Path) -> Path:
    """A store directory nobody owns, writable by all (the unit's DynamicUser counts as others)."""
    folder = base / "state"
    folder.mkdir()
    os.chown(folder, 65534, 65534)
    folder.chmod(0o777)
    return folder / "events.db"


def test_run_as_an_unprivileged_user_stops_with_one_line_and_exit_77(base: Path, nobody_runs: None) -> None:
    secret = secret_in(base / "secrets", 0o600, 0o700)
    cfg = config(base, secret=str(secret), store=open_store_dir(base))
    proc = agent("run", "-c", str(cfg), as_nobody=True)
    assert proc.returncode == EX_NOPERM, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "upstreams[0].mqtt.password_file" in lines[0] and str(secret) in lines[0]
    assert "uid 65534" in lines[0] and "Permission denied" in lines[0]


def test_run_as_an_unprivileged_user_names_a_store_directory_it_cannot_write(
    base: Path, nobody_runs: None
) -> None:
    secret = secret_in(base / "secrets", 0o644, 0o755)
    (base / "rootonly").mkdir(mode=0o755)
    cfg = config(base, secret=str(secret), store=base / "rootonly" / "events.db")
    proc = agent("run", "-c", str(cfg), as_nobody=True)
    assert proc.returncode == EX_NOPERM, proc.stderr
    assert "store.path" in proc.stderr and "cannot write" in proc.stderr
    assert not (base / "rootonly" / "events.db").exists()


def test_check_as_root_names_the_file_and_the_user_that_cannot_read_it(base: Path) -> None:
    secret = secret_in(base / "secrets", 0o600, 0o700)
    cfg = config(base, secret=str(secret), store=open_store_dir(base))
    plain = agent("check", "-c", str(cfg))
    assert plain.returncode == 0, plain.stderr  # root itself reads everything
    proc = agent("check", "-c", str(cfg), "--as-user", "nobody")
    assert proc.returncode == EX_NOPERM, proc.stdout + proc.stderr
    assert f"{cfg}:" in proc.stderr and "upstreams[0].mqtt.password_file" in proc.stderr
    assert "user nobody (uid 65534) cannot read it" in proc.stderr
    assert f"{base / 'secrets'} is drwx------ root:root: others lack x" in proc.stderr


def test_check_warns_about_a_secret_every_user_can_read(base: Path) -> None:
    secret = secret_in(base / "secrets", 0o644, 0o755)
    cfg = config(base, secret=str(secret), store=open_store_dir(base))
    proc = agent("check", "-c", str(cfg), "--as-user", "nobody")
    assert proc.returncode == 0, proc.stderr
    assert f"warning: {cfg}:" in proc.stderr and "secret readable by every user (-rw-r--r--)" in proc.stderr
    assert "readable by user nobody (uid 65534)" in proc.stdout


def unit_file(base: Path, secret: Path) -> Path:
    unit = base / "edge-agent.service"
    unit.write_text(
        f"[Service]\nDynamicUser=yes\nStateDirectory=edge-agent\nLoadCredential=mqtt-password:{secret}\n",
        encoding="utf-8",
    )
    return unit


def test_a_root_only_secret_passes_as_a_credential_of_the_unit(base: Path) -> None:
    secret = secret_in(base / "secrets", 0o600, 0o700)
    cfg = config(base, secret="${CREDENTIALS_DIRECTORY}/mqtt-password", store=open_store_dir(base))
    unit = unit_file(base, secret)
    proc = agent("check", "-c", str(cfg), "--unit", str(unit))
    assert proc.returncode == 0, proc.stderr
    assert "readable by the unit's dynamic user" in proc.stdout
    without = agent("check", "-c", str(cfg))
    assert without.returncode == EX_CONFIG
    assert "give --unit FILE" in without.stderr and f"{cfg}:" in without.stderr


def test_the_unit_s_dynamic_user_cannot_read_a_file_only_its_group_may_read(base: Path) -> None:
    secret = secret_in(base / "secrets", 0o640, 0o755)
    cfg = config(base, secret=str(secret), store=open_store_dir(base))
    unit = base / "edge-agent.service"
    unit.write_text("[Service]\nDynamicUser=yes\n", encoding="utf-8")
    proc = agent("check", "-c", str(cfg), "--unit", str(unit))
    assert proc.returncode == EX_NOPERM, proc.stdout + proc.stderr
    assert "the unit's dynamic user (DynamicUser=yes in" in proc.stderr
    assert "-rw-r----- root:root: others lack r" in proc.stderr


@pytest.mark.parametrize(
    ("folder_mode", "file_mode"),
    [(0o700, 0o644), (0o711, 0o644), (0o755, 0o600), (0o755, 0o640), (0o755, 0o604), (0o750, 0o644)],
)
def test_the_permission_model_agrees_with_the_kernel(base: Path, folder_mode: int, file_mode: int) -> None:
    target = secret_in(base / "d", file_mode, folder_mode)
    os.chown(base / "d", 0, 65534)  # nobody's group owns the folder: the group bits count too
    who: Who = named_user("nobody")
    model = _denied(target, 4, who) is None
    kernel = subprocess.run([*NOBODY, "cat", str(target)], capture_output=True, timeout=10).returncode == 0
    assert model == kernel


def test_certs_creates_what_the_unit_s_user_can_read_and_the_key_as_a_credential(base: Path) -> None:
    pki = base / "etc" / "pki"
    made = subprocess.run(
        ["sh", "-c", f'umask 077 && exec "$0" -m agent certs --dir {pki} --gateway gw', sys.executable],
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert made.returncode == 0, made.stderr
    assert f"trusted:         {pki / 'trusted'}" in made.stdout
    assert f"LoadCredential=opcua-key.pem:{pki / 'agent_key.pem'}" in made.stdout
    for path in (pki / "agent_cert.der", pki / "trusted"):
        assert subprocess.run([*NOBODY, "ls", "-d", str(path)], capture_output=True).returncode == 0
        assert subprocess.run([*NOBODY, "test", "-r", str(path)]).returncode == 0, path
    assert subprocess.run([*NOBODY, "test", "-r", str(pki / "agent_key.pem")]).returncode != 0
    assert (pki / "agent_key.pem").stat().st_mode & 0o777 == 0o600


def test_what_certs_prints_passes_check_as_the_unit_s_dynamic_user(base: Path) -> None:
    """The install steps end to end: `certs` as root, its config lines and its LoadCredential=
    line used as printed, `check` with that unit passes for the DynamicUser; the key stays root's."""
    pki = base / "etc" / "pki"
    made = agent("certs", "--dir", str(pki), "--gateway", "gw")
    assert made.returncode == 0, made.stderr
    credential = next(x.split()[0] for x in made.stdout.splitlines() if "LoadCredential=" in x)
    unit = base / "edge-agent.service"
    unit.write_text(f"[Service]\nDynamicUser=yes\n{credential}\n", encoding="utf-8")
    security = {
        "certificate": str(pki / "agent_cert.der"),
        "private_key": "${CREDENTIALS_DIRECTORY}/opcua-key.pem",
        "trusted": str(pki / "trusted"),
    }
    doc = yaml.safe_load(config(base, secret="/unused", store=open_store_dir(base)).read_text())
    del doc["upstreams"]
    doc["devices"][0]["connections"] = [
        {"opcua": {"endpoint": "opc.tcp://127.0.0.1:9", "security": security}}
    ]
    for field in doc["devices"][0]["channels"]["Trip"].values():
        field["node"] = "ns=2;s=X"
    cfg = base / "config.yaml"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    proc = agent("check", "-c", str(cfg), "--unit", str(unit))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "readable by the unit's dynamic user" in proc.stdout
    (pki / "trusted").chmod(0o700)  # what the old `certs` made: now named, with the user
    proc = agent("check", "-c", str(cfg), "--unit", str(unit))
    assert proc.returncode == EX_NOPERM
    assert f"security.trusted: {pki / 'trusted'}: the unit's dynamic user" in proc.stderr
