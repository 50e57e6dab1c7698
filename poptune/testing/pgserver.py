"""A throwaway PostgreSQL server on loopback, for the tests and benchmarks of shared studies.

Uses the server binaries of this machine (``initdb`` on the PATH, else Debian's ``/usr/lib/postgresql/N/bin``):
a new cluster in a temporary directory, trust authentication for the user ``poptune``, listening on
127.0.0.1 at a free port and on a Unix socket in that directory. PostgreSQL refuses to run as root, so as root
the server runs as the system user ``postgres`` (Debian's package creates it) through ``runuser``.

    with LocalPostgres() as server:
        url = server.create_database("study")   # postgresql://poptune@127.0.0.1:PORT/study
        ...
        server.restart()                         # what a database restart mid-study looks like
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["LocalPostgres", "PostgresUnavailable", "find_bin_dir"]

_USER = "poptune"


class PostgresUnavailable(RuntimeError):
    """No local server can be started here (no binaries, or root without a ``postgres`` user)."""


def find_bin_dir() -> Path | None:
    """The directory of ``initdb``/``pg_ctl``: on the PATH, else the newest of Debian's, else None."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPostgres:
    """A PostgreSQL cluster in a temporary directory; :meth:`start` it, :meth:`stop` it (which deletes it)."""

    def __init__(self) -> None:
        self.bin_dir = find_bin_dir()
        self.port = 0
        self.root: Path | None = None
        self._as_user: list[str] = []

    @property
    def data(self) -> Path:
        assert self.root is not None
        return self.root / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str) -> None:
        assert self.bin_dir is not None
        cmd = [*self._as_user, str(self.bin_dir / argv[0]), *argv[1:]]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise PostgresUnavailable(f"{argv[0]} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")

    def start(self) -> "LocalPostgres":
        """initdb a new cluster and start the server (returns once it accepts connections)."""
        if self.bin_dir is None:
            raise PostgresUnavailable("no PostgreSQL server binaries (initdb) found; Debian: apt-get install "
                                      "postgresql")
        self.root = Path(tempfile.mkdtemp(prefix="poptune-pg-"))
        if os.geteuid() == 0:  # initdb and postgres refuse root
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError as e:
                raise PostgresUnavailable("running as root and there is no 'postgres' user to run the server") from e
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self.port = _free_port()
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", _USER, "-E", "UTF8", "--no-sync")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w",
                  "-t", "60", "start")
        return self

    def restart(self) -> None:
        """Stop the server (fast: open connections are cut) and start it again, as an operator would."""
        assert self.root is not None, "restart() of a server never started"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-m", "fast", "-w", "-t", "60",
                  "restart")  # -l again: otherwise the server keeps our output pipe open

    def stop(self) -> None:
        """Stop the server and delete the cluster."""
        if self.root is None:
            return
        if (self.data / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            except PostgresUnavailable:
                pass  # already down
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def create_database(self, name: str) -> str:
        """Create an empty database; returns its SQLAlchemy URL."""
        import sqlalchemy

        engine = sqlalchemy.create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()
        return self.url(name)

    def __enter__(self) -> "LocalPostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
