"""A real Airflow cluster on this machine: Postgres as the metadata database, Redis as the Celery broker, and
Airflow 3 with the CeleryExecutor (API server, scheduler, DAG processor, triggerer and two Celery workers),
every process in its own process group with its pid recorded under `data/cluster/pids/`.

    python -m dareforge.cluster start      # `make cluster`
    python -m dareforge.cluster refresh    # trigger dare_refresh, wait, print what it made and what it cost
    python -m dareforge.cluster stop       # `make cluster-stop`: ends exactly the recorded processes

Every component reads the same `airflow.cfg` (the embedded default's) with the cluster's settings as
AIRFLOW__* variables, and the same dareforge store (`DAREFORGE_STORE__ROOT`), a path every worker shares. Data
stays in `data/cluster/` (Postgres, Redis) and in the store when the cluster stops. Postgres and Redis listen on
localhost only, on ports of their own (`PG_PORT`, `REDIS_PORT`), so they never meet a system instance.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dareforge.child_python import child_env, python_argv
from dareforge.errors import DareforgeError
from dareforge.instance_cost import start_up_shares

PG_PORT = 54329
REDIS_PORT = 63799
API_PORT = 8089
WORKER_LOG_PORT = 8793
WORKERS = 2
WORKER_CONCURRENCY = 2
PG_BIN = Path("/usr/lib/postgresql/15/bin")
AIRFLOW_PROCESSES = ("api-server", "scheduler", "dag-processor", "triggerer")


class ClusterError(DareforgeError):
    pass


@dataclass(frozen=True)
class Cluster:
    """Where the cluster of one checkout keeps its state (under `root`, default `<repo>/data/cluster`)."""

    repo: Path
    store: Path
    home: Path | None = None
    """Where the cluster's own state lives (default `<repo>/data/cluster`)."""

    @property
    def root(self) -> Path:
        return self.home or self.repo / "data" / "cluster"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pg_data(self) -> Path:
        return self.root / "postgres"

    @property
    def airflow_home(self) -> Path:
        return self.root / "airflow"

    def env(self) -> dict[str, str]:
        """The environment of every Airflow component and worker."""
        db = f"postgresql+psycopg2://postgres@localhost:{PG_PORT}/airflow"
        secret = self._secret()
        bin_dir = Path(sys.executable).parent
        return child_env(
            {
                "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
                "AIRFLOW_HOME": str(self.airflow_home),
                "AIRFLOW_CONFIG": str(self.repo / "airflow.cfg"),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.repo / "dags"),
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(WORKERS * WORKER_CONCURRENCY),
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://localhost:{API_PORT}/execution/",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(
                    self.airflow_home / "passwords.json"
                ),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db,
                "AIRFLOW__CELERY__BROKER_URL": f"redis://localhost:{REDIS_PORT}/0",
                "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql+psycopg2://postgres@localhost:{PG_PORT}/airflow",
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(WORKER_CONCURRENCY),
                # A task instance whose worker died is failed (then retried elsewhere) after a minute without a
                # heartbeat, not the default five.
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
                "AIRFLOW__API__PORT": str(API_PORT),
                "AIRFLOW__API__BASE_URL": f"http://localhost:{API_PORT}",
                "AIRFLOW__API_AUTH__JWT_SECRET": secret,
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.logs / "tasks"),
                "AIRFLOW__LOGGING__DAG_PROCESSOR_CHILD_PROCESS_LOG_DIRECTORY": str(
                    self.logs / "dag_processor"
                ),
                "DAREFORGE_STORE__ROOT": str(self.store),
                "DAREFORGE_STORE__WORK_DIR": str(self.store.parent / "work"),
            }
        )

    def _secret(self) -> str:
        path = self.root / "jwt_secret"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_urlsafe(64))
            path.chmod(0o600)
        return path.read_text().strip()

    # -- processes -------------------------------------------------------------------------------------------------
    def _spawn(
        self, name: str, command: list[str], user: str | None = None, extra_env: dict[str, str] | None = None
    ) -> int:
        """Start `command` in a process group of its own, its output in logs/<name>.log, its pid recorded."""
        if self.running(name):
            return self._pid(name)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.pids.mkdir(parents=True, exist_ok=True)
        if user is not None:
            command = ["runuser", "-u", user, "--", *command]
        with open(self.logs / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                command,
                env={**self.env(), **(extra_env or {})},
                cwd=self.repo,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        (self.pids / f"{name}.pid").write_text(str(process.pid))
        return process.pid

    def _pid(self, name: str) -> int:
        return int((self.pids / f"{name}.pid").read_text())

    def running(self, name: str) -> bool:
        path = self.pids / f"{name}.pid"
        if not path.exists():
            return False
        try:
            os.kill(int(path.read_text()), 0)
        except (ProcessLookupError, ValueError):
            return False
        return True

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.pids.glob("*.pid")) if self.pids.exists() else []

    def kill(self, name: str, sig: int = signal.SIGTERM, wait_s: float = 30.0) -> None:
        """End the process group recorded for `name` (SIGTERM, then SIGKILL after `wait_s`)."""
        path = self.pids / f"{name}.pid"
        if not path.exists():
            return
        pid = int(path.read_text())
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
            return
        if not _group_ended(pid, wait_s):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _group_ended(pid, 10.0)
        path.unlink(missing_ok=True)

    # -- services --------------------------------------------------------------------------------------------------
    def start_postgres(self) -> None:
        if not (self.pg_data / "PG_VERSION").exists():
            self.pg_data.mkdir(parents=True, exist_ok=True)
            shutil.chown(self.pg_data, "postgres", "postgres")
            _run(
                [
                    "runuser",
                    "-u",
                    "postgres",
                    "--",
                    str(PG_BIN / "initdb"),
                    "-D",
                    str(self.pg_data),
                    "--auth=trust",
                    "-U",
                    "postgres",
                ],
                "initdb",
            )
        sockets = self.root / "pgsock"
        sockets.mkdir(parents=True, exist_ok=True)
        shutil.chown(sockets, "postgres", "postgres")
        self._spawn(
            "postgres",
            [
                str(PG_BIN / "postgres"),
                "-D",
                str(self.pg_data),
                "-p",
                str(PG_PORT),
                "-c",
                "listen_addresses=localhost",
                "-c",
                f"unix_socket_directories={sockets}",
            ],
            user="postgres",
        )
        _wait_for(
            lambda: _ok([str(PG_BIN / "pg_isready"), "-h", "localhost", "-p", str(PG_PORT)]), "postgres"
        )
        exists = subprocess.run(
            _psql("-tAc", "select 1 from pg_database where datname = 'airflow'"),
            capture_output=True,
            text=True,
        ).stdout.strip()
        if exists != "1":
            _run(_psql("-c", "create database airflow"), "create database")

    def start_redis(self) -> None:
        data = self.root / "redis"
        data.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "redis",
            [
                "redis-server",
                "--port",
                str(REDIS_PORT),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(data),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
        )
        _wait_for(lambda: _ok(["redis-cli", "-p", str(REDIS_PORT), "ping"]), "redis")

    def start(self) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        self.airflow_home.mkdir(parents=True, exist_ok=True)
        self.start_postgres()
        self.start_redis()
        env = self.env()
        _run([_airflow(), "db", "migrate"], "airflow db migrate", env)
        _run(python_argv("-m", "dareforge.orchestration", "pools"), "pools", env)
        for name in AIRFLOW_PROCESSES:
            self._spawn(name, [_airflow(), name])
        for n in range(1, WORKERS + 1):
            # Each worker serves its task logs on a port of its own.
            self._spawn(
                f"worker{n}",
                [
                    _airflow(),
                    "celery",
                    "worker",
                    "--celery-hostname",
                    f"worker{n}@%h",
                    "--concurrency",
                    str(WORKER_CONCURRENCY),
                ],
                extra_env={"AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(WORKER_LOG_PORT + n)},
            )
        _wait_for(
            lambda: _ok(["curl", "-sf", f"http://localhost:{API_PORT}/api/v2/monitor/health"]),
            "api-server",
            timeout=180,
        )

    def stop(self) -> list[str]:
        """End every recorded process, workers and Airflow first, the databases last; returns their names."""
        names = self.names()
        order = [n for n in names if n not in ("postgres", "redis")] + [
            n for n in ("redis", "postgres") if n in names
        ]
        for name in order:
            self.kill(name)
        return order

    # -- a refresh through the scheduler ---------------------------------------------------------------------------
    def airflow(self, *args: str) -> str:
        done = subprocess.run([_airflow(), *args], env=self.env(), capture_output=True, text=True)
        if done.returncode != 0:
            raise ClusterError(f"airflow {' '.join(args)} failed: {done.stderr.strip()[-800:]}")
        return done.stdout

    def sql(self, query: str) -> list[list[str]]:
        """Rows of `query` on the metadata database; ClusterError when it cannot answer (the cluster is down)."""
        try:
            done = subprocess.run(
                _psql("-d", "airflow", "-tA", "-F", "\t", "-c", query),
                capture_output=True,
                text=True,
            )
        except FileNotFoundError as exc:
            raise ClusterError(
                "psql is not installed; `make cluster` installs PostgreSQL and starts the cluster"
            ) from exc
        if done.returncode != 0:
            raise ClusterError(
                f"the cluster's Postgres (localhost:{PG_PORT}) did not answer: {done.stderr.strip()[-400:]}; "
                "is the cluster up? `make cluster` starts it"
            )
        return [line.split("\t") for line in done.stdout.splitlines() if line]

    def trigger(self, dag_id: str = "dare_refresh") -> str:
        """Trigger `dag_id` (unpausing it) and return the run id."""
        rows = json.loads(_json_line(self.airflow("dags", "trigger", dag_id, "-o", "json")))
        self.airflow("dags", "unpause", dag_id)
        return rows[0]["dag_run_id"] if isinstance(rows, list) else rows["dag_run_id"]

    def _when_running(self, run_id: str, task_id: str, more_than: int) -> int:
        """Wait until `task_id` has more than `more_than` running instances in `run_id`; returns how many."""
        while True:
            running = self.sql(
                f"select count(*) from task_instance where run_id = '{run_id}' and task_id = '{task_id}' "
                "and state = 'running'"
            )
            if int(running[0][0]) > more_than:
                return int(running[0][0])
            state = self.sql(f"select state from dag_run where run_id = '{run_id}'")
            if state and state[0][0] in ("success", "failed"):
                raise ClusterError(
                    f"{run_id} ended ({state[0][0]}) before {task_id} ran on more than {more_than}"
                )
            time.sleep(1)

    def kill_worker_during(self, run_id: str, task_id: str = "generate", worker: str = "worker1") -> int:
        """Once `task_id` has more running instances in `run_id` than one worker takes (so both workers hold
        some), kill -9 `worker`'s whole process group (the worker and the task processes it forked); returns how
        many instances were running then."""
        running = self._when_running(run_id, task_id, WORKER_CONCURRENCY)
        self.kill(worker, signal.SIGKILL, wait_s=5)
        return running

    def restart_scheduler_during(self, run_id: str, task_id: str = "generate") -> int:
        """While `task_id` runs in `run_id`, kill -9 the scheduler's process group and start a new scheduler
        (which adopts the running task instances); returns how many instances were running at the kill."""
        running = self._when_running(run_id, task_id, 0)
        self.kill("scheduler", signal.SIGKILL, wait_s=5)
        self._spawn("scheduler", [_airflow(), "scheduler"])
        return running

    def wait(
        self, dag_id: str, run_id: str, timeout_s: float | None = None, progress=None, every_s: float = 60
    ) -> str:
        """Poll until the run ends and return its state. No deadline by default: a whole-catalog refresh runs
        for hours, and a waiter that gave up would only leave the run going without anyone reporting it.
        `progress`, when given, receives a line saying how far each stage is, at most every `every_s`."""
        started = time.monotonic()
        said, said_at = "", -every_s
        while timeout_s is None or time.monotonic() - started < timeout_s:
            state = self.sql(f"select state from dag_run where dag_id = '{dag_id}' and run_id = '{run_id}'")
            if state and state[0][0] in ("success", "failed"):
                return state[0][0]
            if progress is not None and time.monotonic() - said_at >= every_s:
                line = self.progress(dag_id, run_id)
                if line != said:
                    progress(f"{(time.monotonic() - started) / 60:.0f} min: {line}")
                    said, said_at = line, time.monotonic()
            time.sleep(5)
        raise ClusterError(f"{dag_id} {run_id} did not finish within {timeout_s:.0f}s")

    def progress(self, dag_id: str, run_id: str) -> str:
        """How far each started stage is: `generate 37/165 (4 running)`, in the order the stages started."""
        rows = self.sql(
            "select task_id, count(*), count(*) filter (where state in ('success', 'skipped')), "
            "count(*) filter (where state = 'running'), count(*) filter (where state = 'failed'), "
            "min(start_date) from task_instance "
            f"where dag_id = '{dag_id}' and run_id = '{run_id}' "
            "group by task_id having count(start_date) > 0 order by min(start_date), task_id"
        )
        parts = []
        for task, total, done, running, failed, _ in rows:
            part = f"{task} {done}/{total}"
            if int(running):
                part += f" ({running} running)"
            if int(failed):
                part += f" ({failed} failed)"
            parts.append(part)
        return ", ".join(parts) or "waiting for the scheduler"

    def figures(self, dag_id: str, run_id: str) -> dict[str, object]:
        """Wall time of the run, task-seconds per task (summed over mapped instances), the overhead."""
        ((start, end),) = self.sql(
            f"select extract(epoch from start_date), extract(epoch from end_date) from dag_run "
            f"where dag_id = '{dag_id}' and run_id = '{run_id}'"
        )
        per_task = {
            task: (float(seconds), int(n))
            for task, seconds, n in self.sql(
                "select task_id, coalesce(sum(extract(epoch from end_date - start_date)), 0), count(*) "
                f"from task_instance where dag_id = '{dag_id}' and run_id = '{run_id}' group by task_id"
            )
        }
        wall = float(end) - float(start)
        busy = sum(seconds for seconds, _ in per_task.values())
        slots = WORKERS * WORKER_CONCURRENCY
        return {
            "wall_s": wall,
            "task_seconds": per_task,
            "busy_s": busy,
            "slots": slots,
            "overhead": 1 - busy / (wall * slots) if wall else None,
        }

    def made(self) -> dict[str, int]:
        """What the store holds: sources that framed into tasks and tasks generated (what a cost model scales)."""
        from dareforge.schema import Task
        from dareforge.store import Store

        tasks = Store(str(self.store)).read_records(Task) if self.store.exists() else []
        return {"sources": len({t.source_id for t in tasks}), "tasks": len(tasks)}

    def keep_figures(self, run_id: str, figures: dict[str, object]) -> Path:
        path = self.root / "reports" / f"{run_id.replace(':', '-').replace('+', '-')}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps({"run_id": run_id, "workers": WORKERS, "cores": os.cpu_count(), **figures}, indent=2)
        )
        return path


def _group_ended(pgid: int, wait_s: float) -> bool:
    """Wait up to `wait_s` for every process of group `pgid` to end; a leader this process started is reaped
    (else it stays a zombie, and the group with it)."""
    deadline = time.monotonic() + wait_s
    while True:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pgid, os.WNOHANG)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


def _json_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(("[", "{")))


def _psql(*args: str) -> list[str]:
    """A psql command line against the cluster's Postgres, as its superuser."""
    return ["psql", "-h", "localhost", "-p", str(PG_PORT), "-U", "postgres", *args]


def _airflow() -> str:
    return str(Path(sys.executable).parent / "airflow")


def _ok(command: list[str]) -> bool:
    return subprocess.run(command, capture_output=True).returncode == 0


def _run(command: list[str], what: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ClusterError(f"{what} failed:\n{tail}")


def _wait_for(ready, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.5)
    raise ClusterError(f"{what} did not come up within {timeout:.0f}s; see data/cluster/logs/")


REFRESHES = ("refresh", "refresh-killing-a-worker", "refresh-restarting-the-scheduler")


def main(argv: list[str]) -> int:
    repo = Path(__file__).resolve().parents[1]
    store = Path(os.environ.get("DAREFORGE_STORE__ROOT", repo / "data" / "cluster" / "store")).resolve()
    cluster = Cluster(repo, store)
    command = argv[0] if argv else ""
    if command == "start":
        cluster.start()
        print(f"cluster up: {', '.join(cluster.names())}; UI http://localhost:{API_PORT}; store {store}")
    elif command == "stop":
        print(f"stopped: {', '.join(cluster.stop()) or 'nothing was running'}; data kept in {cluster.root}")
    elif command in REFRESHES:
        before = cluster.made()["tasks"]  # a refresh of a store that holds tasks reuses them: not a full run
        started = time.monotonic()
        run_id = cluster.trigger()
        print(f"dare_refresh {run_id} triggered (the UI on http://localhost:{API_PORT} shows it)", flush=True)
        if command == "refresh-killing-a-worker":
            running = cluster.kill_worker_during(run_id)
            print(f"killed worker1's process group while {running} generate instances ran", flush=True)
        elif command == "refresh-restarting-the-scheduler":
            running = cluster.restart_scheduler_during(run_id)
            print(f"killed and restarted the scheduler while {running} generate instances ran", flush=True)
        try:
            state = cluster.wait("dare_refresh", run_id, progress=lambda line: print(line, flush=True))
        except KeyboardInterrupt:
            print(f"\nstopped waiting; {run_id} goes on in the cluster (`make cluster-stop` ends it)")
            return 130
        except ClusterError as exc:
            print(
                f"stopped waiting for {run_id}: {exc}. A cluster stopped mid-run keeps what it finished: "
                "`make cluster` then `make cluster-refresh` goes on from there.",
                file=sys.stderr,
            )
            return 1
        retried = cluster.sql(
            f"select task_id, count(*) from task_instance where run_id = '{run_id}' and try_number > 1 group by 1"
        )
        print(f"retried: {dict(retried) or 'nothing'}")
        print(f"dare_refresh {run_id}: {state} after {time.monotonic() - started:.0f}s")
        figures = {
            "state": state,
            "how": command,
            "tasks_before": before,
            **cluster.figures("dare_refresh", run_id),
            "start_up": start_up_shares(
                cluster.logs / "tasks", cluster.env(), repo / "dags", "dare_refresh", run_id
            ),
            **cluster.made(),
        }
        print(json.dumps(figures, indent=2))
        print(
            f"figures kept in {cluster.keep_figures(run_id, figures)} (bench/cost_model.py compares with them)"
        )
    elif command == "env":
        print(
            json.dumps(
                {k: v for k, v in cluster.env().items() if k.startswith(("AIRFLOW", "DAREFORGE"))}, indent=2
            )
        )
    else:
        print(
            f"usage: python -m dareforge.cluster start | stop | {' | '.join(REFRESHES)} | env",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
