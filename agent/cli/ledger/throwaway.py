"""What `ledger demo` starts when the machine has none: a throwaway PostgreSQL cluster and its own
Mosquitto, both on free loopback ports in a temporary directory, removed when the demo ends.

Only when nothing is configured: a DSN (--dsn, EDGE_LEDGER_DSN) or a libpq variable (PGHOST,
PGPORT, PGDATABASE, PGSERVICE, ...) means the user's PostgreSQL is the one to use; an explicit
--mqtt means that broker. When a part is missing the demo says what to install.

The tests and the benches start their PostgreSQL clusters with the same parts (tests/ledger/pgcluster.py):
`pg_binaries`, `server_user`, `run_as`, `initdb`, `free_port` and `listening` are theirs too.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Protocol, TypeVar

R_co = TypeVar("R_co", covariant=True)
PG_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGSERVICE", "PGUSER")
INSTALL_POSTGRES = (
    "no PostgreSQL is configured (--dsn, EDGE_LEDGER_DSN or PGHOST/PGDATABASE...) and the PostgreSQL "
    "server binaries (initdb, pg_ctl) are not installed to start a throwaway one: "
    "install them (Debian/Ubuntu: apt-get install postgresql) or give --dsn"
)
INSTALL_MOSQUITTO = (
    "no MQTT broker listens at 127.0.0.1:1883 and mosquitto is not installed to start one: "
    "install it (Debian/Ubuntu: apt-get install mosquitto) or give --mqtt HOST:PORT"
)


class Unavailable(RuntimeError):
    """A part the demo needs is missing; the message says what to install."""


def postgres_configured(dsn: str | None) -> bool:
    return bool(dsn) or any(os.environ.get(v) for v in PG_VARIABLES)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def pg_binaries(*first: str) -> Path | None:
    """The folder holding initdb and pg_ctl (`first` folders tried before PATH and
    /usr/lib/postgresql/*/bin, empty ones skipped), or None."""
    candidates = list(first)
    found = shutil.which("initdb")
    if found:
        candidates.append(str(Path(found).resolve().parent))
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for folder in candidates:
        if folder and (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def server_user() -> str | None:
    """PostgreSQL refuses to run as root: as root, run it as `postgres` (or `nobody`)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise Unavailable("running as root and no unprivileged user (postgres, nobody) to run PostgreSQL")


def run_as(
    user: str | None, bindir: Path, *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """One PostgreSQL program of `bindir` (`args[0]`), as `user` when one is given (runuser)."""
    cmd = [str(bindir / args[0]), *args[1:]]
    if user is not None:
        cmd = ["runuser", "-u", user, "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def own_directory(root: Path, user: str | None) -> None:
    """Hand the temporary directory to the server's user (when it is not ourselves)."""
    if user is not None:
        info = pwd.getpwnam(user)
        os.chown(root, info.pw_uid, info.pw_gid)
        root.chmod(0o700)


def initdb(user: str | None, bindir: Path, data: Path) -> subprocess.CompletedProcess[str]:
    """A new cluster in `data`: superuser `postgres`, trust, UTF-8, no locale."""
    return run_as(
        user, bindir, "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale"
    )


class OwnPart(Protocol[R_co]):
    """A part the demo starts of its own: on a free loopback `port`, `start()` (Unavailable when
    it does not), `stop()` stops it and removes its directory."""

    port: int

    def start(self) -> R_co: ...

    def stop(self) -> None: ...


class ThrowawayPostgres:
    """initdb + pg_ctl in a temporary directory; `start` gives its DSN; `stop` removes it all."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.user = server_user()
        self.root = Path(tempfile.mkdtemp(prefix="edge-ledger-demo-pg-"))
        self.port = free_port()
        self.log = self.root / "server.log"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_as(self.user, self.bindir, *args)

    def start(self) -> str:
        own_directory(self.root, self.user)
        data = str(self.root / "data")
        made = initdb(self.user, self.bindir, self.root / "data")
        if made.returncode != 0:
            raise Unavailable(f"initdb failed: {(made.stderr or made.stdout).strip()[-500:]}")
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
        started = self._run(
            "pg_ctl", "-D", data, "-l", str(self.log), "-w", "-t", "60", "-o", options, "start"
        )
        if started.returncode != 0:
            raise Unavailable(f"the throwaway PostgreSQL did not start: {started.stderr.strip()[-500:]}")
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


class OwnBroker:
    """A Mosquitto of the demo's own on a free loopback port (queue per session unlimited)."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.root = Path(tempfile.mkdtemp(prefix="edge-ledger-demo-mqtt-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        conf = self.root / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\nmax_queued_messages 0\n"
            f"log_dest file {self.root / 'mosquitto.log'}\n"
            f"user {pwd.getpwuid(os.geteuid()).pw_name}\n"
        )
        self.proc = subprocess.Popen(
            [self.binary, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not listening(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise Unavailable(f"mosquitto did not start (see {self.root / 'mosquitto.log'})")
            time.sleep(0.05)
        return self.port

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


def mosquitto_binary() -> str | None:
    return shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if Path("/usr/sbin/mosquitto").exists() else None
    )
