"""A reference-solution worker: a separate Python process that runs reference scripts one after another.

Started by `reference_runner.ReferenceRunner` with its thread count pinned before numpy loads. It reads one JSON
request per line on stdin ({"code", "cwd", "threads"}), runs the script in a fresh namespace with that working
directory, and answers one JSON line on stdout ({"ok", "seconds", "error"}), after one `READY` line once its
libraries are imported. Keeping the process alive means scikit-learn is
imported once, not once per task; running in another process keeps a crash or a leak away from the pipeline.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import sys
import threading
import time
import traceback

MAX_ERROR_CHARS = 4000
READY = '{"ready": true}'
PARENT_PID = "DAREFORGE_PARENT_PID"


# Imported before the first request, so a script's timed run measures its own work, not library loading.
WARM_IMPORTS = (
    "pandas",
    "sklearn.compose",
    "sklearn.ensemble",
    "sklearn.impute",
    "sklearn.linear_model",
    "sklearn.neighbors",
    "sklearn.pipeline",
    "sklearn.preprocessing",
    "sklearn.tree",
)


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:
    import importlib

    from threadpoolctl import ThreadpoolController

    for module in WARM_IMPORTS:
        importlib.import_module(module)
    stdout.write(READY + "\n")  # the runner charges a script only the CPU spent after this line
    stdout.flush()

    default_threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    # Finding the threaded libraries loaded costs about 4 ms, as much as a small script's whole run, so it is
    # done again only when a script imported more modules (which may have loaded another such library).
    controller, modules = None, -1
    for line in stdin:
        request = json.loads(line)
        if len(sys.modules) != modules:
            controller, modules = ThreadpoolController(), len(sys.modules)
        with controller.limit(limits=request.get("threads") or default_threads):
            answer = run_one(request["code"], request["cwd"])
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()


def run_one(code: str, cwd: str) -> dict:
    start, cpu_start = time.perf_counter(), time.process_time()
    previous = os.getcwd()
    captured = io.StringIO()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            exec(compile(code, "reference.py", "exec"), {"__name__": "__main__"})
        return {"ok": True, **_elapsed(start, cpu_start), "error": None}
    except BaseException:  # a reference that dies must not take the worker with it
        return {"ok": False, **_elapsed(start, cpu_start), "error": traceback.format_exc()[-MAX_ERROR_CHARS:]}
    finally:
        os.chdir(previous)


def _elapsed(start: float, cpu_start: float) -> dict:
    # CPU time is the script's own work; wall time also counts waiting for a core shared with other workers.
    return {"seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu_start}


def end_with_parent() -> None:
    """Exit as soon as the process that started this worker ends, however it ends. Its stdin closing is not
    enough: a script runs for up to its limit before the next read sees the end, and after a stopped catalog run
    workers were still fitting, re-parented to init, minutes later. The parent's pidfd becomes readable when it
    exits; unlike PR_SET_PDEATHSIG it is tied to the process, not to the thread that happened to start the worker.
    """
    if not hasattr(os, "pidfd_open"):
        return  # not Linux: the end of stdin still ends the worker, after its current script
    parent = int(os.environ.get(PARENT_PID, os.getppid()))
    try:
        pidfd = os.pidfd_open(parent)
    except ProcessLookupError:
        os._exit(1)
    if os.getppid() != parent:  # it ended before the pidfd named it; the pid may already be another process's
        os._exit(1)

    def watch() -> None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.poll()
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


if __name__ == "__main__":
    end_with_parent()
    serve()
