"""Fixtures for the scale-out tests: small synthetic car logs and a throwaway PostgreSQL.

`postgres_url` starts a real PostgreSQL server (initdb + pg_ctl) in a temporary
directory, listening on 127.0.0.1 at a free port and on a unix socket in that
directory, creates one database and yields its SQLAlchemy URL; the server is
stopped and the directory removed afterwards. As root (CI containers) the server
runs as the ``postgres`` system user, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sysid.robot_adapter import get_adapter
from sysid.synth import write_synthetic

# Off-nominal "true" car (as tests/sysid): inside every range.
TRUE = {"motor_gain": 0.06, "back_emf": 0.082, "rolling_resistance": 0.04, "steer_max": 0.42,
        "steer_trim": 0.02, "latency": 0.03, "gyro_bias": 0.01}


@pytest.fixture(scope="session")
def scale_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five 6 s synthetic rc_car episodes simulated with `TRUE`."""
    p = tmp_path_factory.mktemp("scale") / "synth.h5"
    return write_synthetic(p, {**get_adapter("rc_car").nominal, **TRUE}, episodes=5, seconds=6.0, seed=3)


def postgres_bin() -> Path | None:
    """The folder holding initdb and pg_ctl (PATH first, then /usr/lib/postgresql/*/bin)."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2])
                  if d.split("/")[-2].isdigit() else 0)
    for d in reversed(dirs):
        if Path(d, "initdb").is_file() and Path(d, "pg_ctl").is_file():
            return Path(d)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """SQLAlchemy URL of a database on a fresh loopback PostgreSQL server (module doc)."""
    pytest.importorskip("psycopg2", reason="psycopg2 not installed (pip install -e '.[dev]')")
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in "
                    "/usr/lib/postgresql/*/bin; install the 'postgresql' package (.ci/run does)")
    user: str | None = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and no 'postgres' user to run the server as")
        user = "postgres"
    root = Path(tempfile.mkdtemp(prefix="realsim-pg-"))
    if user is not None:
        pw = pwd.getpwnam(user)
        os.chown(root, pw.pw_uid, pw.pw_gid)
    data, port = root / "data", _free_port()
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}

    def pg(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(bindir / args[0]), *args[1:]], capture_output=True, text=True,
                              env=env, user=user, check=check, timeout=60, cwd=root)

    try:
        pg("initdb", "-D", str(data), "-U", "realsim", "--auth=trust", "-E", "UTF8", "--no-sync")
        opts = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=50")
        pg("pg_ctl", "-D", str(data), "-o", opts, "-l", str(root / "server.log"), "-w", "-t", "30",
           "start")
    except subprocess.CalledProcessError as e:
        log = root / "server.log"
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"could not start PostgreSQL: {e.stderr or e.stdout}"
                           f"{log.read_text() if log.exists() else ''}") from None
    try:
        import psycopg2

        con = psycopg2.connect(host="127.0.0.1", port=port, user="realsim", dbname="postgres")
        con.autocommit = True
        con.cursor().execute("CREATE DATABASE realsim_test")
        con.close()
        yield f"postgresql+psycopg2://realsim@127.0.0.1:{port}/realsim_test"
    finally:
        pg("pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(root, ignore_errors=True)
