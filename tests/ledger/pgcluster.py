"""A throwaway PostgreSQL cluster for tests and the bench: initdb + pg_ctl in a temp directory.

Free TCP port on 127.0.0.1 and the unix socket inside the directory. `durable=False` (tests)
turns fsync off: the tests kill ledger processes, never the server or the machine; the bench
keeps the server's defaults (fsync on, synchronous_commit on). As root (CI), initdb refuses to run, so the cluster is
made and run by an unprivileged user (`postgres` if it exists, else `nobody`) that owns the
directory. `find_binaries()` returns None when no PostgreSQL server binaries are installed.

The parts are those of `edge-agent ledger demo`'s throwaway cluster (agent/cli/ledger/throwaway.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# free_port: the tests and benches take it from here too
from agent.cli.ledger.throwaway import free_port, initdb, own_directory, pg_binaries, run_as, server_user


def find_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl (EDGE_AGENT_PG_BIN first), or None."""
    return pg_binaries(os.environ.get("EDGE_AGENT_PG_BIN", ""))


@dataclass
class Cluster:
    bindir: Path
    root: Path
    port: int
    user: str | None  # the OS user running the server (None: ourselves)
    durable: bool = True
    options: str = ""  # more server options for `pg_ctl start -o` (e.g. -c cluster_name=s1)

    @property
    def datadir(self) -> Path:
        return self.root / "data"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run_as(self.user, self.bindir, *args, timeout=timeout)

    def start(self) -> None:
        proc = self._run(
            "pg_ctl",
            "-D",
            str(self.datadir),
            "-l",
            str(self.root / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
            " -c max_connections=60 -c shared_buffers=32MB"
            + ("" if self.durable else " -c fsync=off -c full_page_writes=off")
            + (f" {self.options}" if self.options else ""),
            "start",
        )
        if proc.returncode != 0:
            log = (self.root / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed: {proc.stderr}\n{log}")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.datadir), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        self.stop("immediate")
        if self.durable:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            # A test session leaves a few hundred MB of databases; removing them took 10-18 s on a
            # busy disk, so the removal runs on after the session (nothing uses the directory).
            subprocess.Popen(["rm", "-rf", "--", str(self.root)], start_new_session=True)


def create(bindir: Path, *, durable: bool = True) -> Cluster:
    """initdb a new cluster in a fresh temp directory and start it; the caller destroys it."""
    user = server_user()
    root = Path(tempfile.mkdtemp(prefix="edge-ledger-pg-"))
    cluster = Cluster(bindir, root, free_port(), user, durable)
    own_directory(root, user)
    proc = initdb(user, bindir, cluster.datadir)
    if proc.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {proc.stderr or proc.stdout}")
    for attempt in range(3):
        try:
            cluster.start()
            return cluster
        except RuntimeError:
            if attempt == 2:
                raise
            cluster.port = free_port()  # someone took the port between bind and start
            time.sleep(0.2)
    raise AssertionError("unreachable")


def _sql(cluster: Cluster, *statements: str) -> None:
    import psycopg

    with psycopg.connect(cluster.dsn(), autocommit=True, connect_timeout=10) as conn:
        for st in statements:
            conn.execute(st.encode())


class Pair:
    """A primary and a streaming standby made from it (`pg_basebackup -R` with a replication slot),
    synchronous (`synchronous_standby_names = 'FIRST 1 (*)'`) unless `sync=False`.

    `failover()` kills the primary (`pg_ctl stop -m immediate`) and promotes the standby; `rejoin()`
    makes a fresh standby of the new primary on the old primary's port, so a DSN naming both
    ports stays right through any number of failovers. The standby starts with
    `synchronous_standby_names = ''` in its own postgresql.auto.conf: otherwise, once promoted,
    it would wait for a standby of its own (library notes section 12).
    """

    def __init__(self, bindir: Path, *, sync: bool = True, durable: bool = False) -> None:
        self.bindir = bindir
        self.sync = sync
        self.durable = durable
        self.generation = 0
        self.dbname = "postgres"
        self.failed_over = False
        self.primary = create(bindir, durable=durable)
        self.primary.options = "-c cluster_name=n0"
        self._sync_setting(self.primary)
        self.standby = self._standby_of(self.primary, free_port())
        self.wait_streaming()

    def dsn(self, dbname: str | None = None, *, order: tuple[int, int] | None = None) -> str:
        """A multi-host DSN naming both servers (primary first unless `order` says otherwise)."""
        ports = order or (self.primary.port, self.standby.port)
        return (
            f"host=127.0.0.1,127.0.0.1 port={ports[0]},{ports[1]} user=postgres"
            f" dbname={dbname or self.dbname} connect_timeout=3"
        )

    def new_database(self, name: str) -> None:
        """A fresh database on the primary (replicated), the default of `dsn()` from now on; it
        returns once the standby has replayed it too (a synchronous commit waits for the standby's
        flush, not its replay: a loaded machine once connected to the standby before it had it)."""
        import psycopg

        _sql(self.primary, f"CREATE DATABASE {name}")
        self.dbname = name
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with psycopg.connect(self.standby.dsn(), autocommit=True, connect_timeout=10) as conn:
                if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                    return
            time.sleep(0.05)
        raise RuntimeError(f"the standby did not replay CREATE DATABASE {name} within 60 s")

    def _sync_setting(self, cluster: Cluster) -> None:
        names = "FIRST 1 (*)" if self.sync else ""
        _sql(cluster, f"ALTER SYSTEM SET synchronous_standby_names = '{names}'", "SELECT pg_reload_conf()")

    def _standby_of(self, primary: Cluster, port: int) -> Cluster:
        self.generation += 1
        name = f"n{self.generation}"
        user = primary.user
        root = Path(tempfile.mkdtemp(prefix="edge-ledger-pg-standby-"))
        own_directory(root, user)
        standby = Cluster(self.bindir, root, port, user, self.durable, f"-c cluster_name={name}")
        proc = standby._run(
            "pg_basebackup",
            "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres", "-D", str(standby.datadir),
            "-R", "-X", "stream", "-C", "-S", f"slot_{name}", "-c", "fast",
        )  # fmt: skip
        if proc.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"pg_basebackup failed: {proc.stderr or proc.stdout}")
        auto = standby.datadir / "postgresql.auto.conf"
        with auto.open("a") as f:
            f.write("synchronous_standby_names = ''\n")
        standby.start()
        return standby

    def wait_streaming(self, primary: Cluster | None = None, timeout: float = 60) -> None:
        import psycopg

        primary = primary or self.primary
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with psycopg.connect(primary.dsn(), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                    + (" AND sync_state = 'sync'" if self.sync else "")
                ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.1)
        raise RuntimeError("the standby did not start streaming")

    def failover(self) -> None:
        """Kill the primary and promote the standby (the standby becomes the primary)."""
        self.primary.stop("immediate")
        proc = self.standby._run("pg_ctl", "-D", str(self.standby.datadir), "-w", "-t", "60", "promote")
        if proc.returncode != 0:
            raise RuntimeError(f"pg_ctl promote failed: {proc.stderr or proc.stdout}")
        self.primary, self.standby = self.standby, self.primary
        self.failed_over = True

    def rejoin(self) -> None:
        """The old primary (now `standby`, stopped) is thrown away; a fresh standby of the new
        primary takes its port. The new primary gets the synchronous setting."""
        old = self.standby
        old.destroy()
        # the old primary's slot is not on the new primary: nothing to drop
        self.standby = self._standby_of(self.primary, old.port)
        self._sync_setting(self.primary)
        self.wait_streaming()
        self.failed_over = False

    def stop_standby(self) -> None:
        self.standby.stop("fast")

    def start_standby(self) -> None:
        self.standby.start()

    def destroy(self) -> None:
        self.standby.destroy()
        self.primary.destroy()
