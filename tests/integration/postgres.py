"""A throw-away PostgreSQL server for the catalogue's tests: initdb in a temp dir, postgres on a free port.

`start_postgres()` returns a `PostgresServer` (its SQLAlchemy URL) or raises `PostgresUnavailable`
with the reason (no server binaries, no psycopg, it would not start), which the tests turn into a
skip. As root (CI), the server runs as the `postgres` user, as PostgreSQL insists.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from harness import free_port


class PostgresUnavailable(Exception):
    pass


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


@dataclass
class PostgresServer:
    root: Path
    port: int
    proc: subprocess.Popen[bytes]
    user: str = "tokspeed"
    password: str = "pg-secret-pw"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        shutil.rmtree(self.root, ignore_errors=True)


def start_postgres(timeout_s: float = 60.0) -> PostgresServer:
    try:
        import psycopg
    except ImportError as exc:
        raise PostgresUnavailable("psycopg is not installed (pip install 'tokspeed[postgres]')") from exc
    initdb, postgres = _binary("initdb"), _binary("postgres")
    if initdb is None or postgres is None:
        raise PostgresUnavailable("no PostgreSQL server binaries (initdb, postgres): apt-get install postgresql")
    root = Path(tempfile.mkdtemp(prefix="tokspeed-pg-"))
    data, pwfile = root / "data", root / "pw"
    run_as: dict[str, str] = {}
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        try:
            import pwd

            pw = pwd.getpwnam("postgres")
        except KeyError as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise PostgresUnavailable("running as root and there is no 'postgres' user to run the server as") from exc
        os.chown(root, pw.pw_uid, pw.pw_gid)
        run_as = {"user": "postgres", "group": str(pw.pw_gid)}
    server = PostgresServer(root, free_port(), None)  # type: ignore[arg-type]
    pwfile.write_text(server.password)
    if run_as:
        os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
    init = subprocess.run(
        [initdb, "-D", str(data), "-U", server.user, "--auth=scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync"],
        capture_output=True, text=True, timeout=120, user=run_as.get("user"), cwd=root,
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise PostgresUnavailable(f"initdb failed: {(init.stderr or init.stdout).strip()[-300:]}")
    log = open(root / "server.log", "wb")
    server.proc = subprocess.Popen(
        [postgres, "-D", str(data), "-p", str(server.port), "-h", "127.0.0.1", "-k", str(root), "-F",
         "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "synchronous_commit=off"],
        stdout=log, stderr=subprocess.STDOUT, user=run_as.get("user"), cwd=root,
    )
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            break
        try:
            psycopg.connect(host="127.0.0.1", port=server.port, user=server.user, password=server.password,
                            dbname="postgres", connect_timeout=2).close()
            return server
        except psycopg.OperationalError as exc:
            last = str(exc)
            time.sleep(0.2)
    tail = (root / "server.log").read_text(errors="replace")[-400:]
    server.stop()
    raise PostgresUnavailable(f"postgres did not start: {last or tail}")
