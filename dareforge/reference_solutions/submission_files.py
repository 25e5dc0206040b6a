"""Reading a file an agent wrote, for grading: only a regular file, never followed, never more than a bound.

Every harness that pays a reward (the agent loop behind `evaluate` and the inspect scorer, the RL reward, the
grader a Harbor task bundles) reads an attempt's output through `read_regular_file`, so a symbolic link (to
the answers, say, or to a path that exists only when the verifier runs), a hard-to-read FIFO or device, a
folder named like the output, or a huge or sparse file is refused before a byte of it is parsed. The file is
opened once with O_NOFOLLOW and checked on its descriptor, so it cannot be swapped between the check and the
read.

Standard library only: the module is copied byte for byte into every exported Harbor task's grader.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_PREDICTIONS_BYTES = 1 << 30
"""A predictions CSV larger than this is refused unread (a test file of millions of rows stays under it)."""
MAX_ANSWER_BYTES = 1 << 20
"""An `answer.json` larger than this is refused unread (the longest list answer is a few KB)."""


class UnreadableSubmission(OSError):
    """The output exists but is not a regular file of a readable size; the message says what it is instead."""


def read_regular_file(path: Path | str, max_bytes: int) -> bytes:
    """The bytes of `path` if it is a regular file (not a symbolic link, FIFO, socket, device or folder) of at
    most `max_bytes`. FileNotFoundError when nothing is there; UnreadableSubmission naming what is there
    otherwise."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnreadableSubmission(f"{path.name} is a symbolic link, not a file") from None
        if exc.errno == errno.EISDIR:
            raise UnreadableSubmission(f"{path.name} is a folder, not a file") from None
        if exc.errno in (errno.ENXIO, errno.EACCES, errno.EPERM):
            raise UnreadableSubmission(f"{path.name} cannot be opened for reading ({exc.strerror})") from None
        raise
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise UnreadableSubmission(f"{path.name} is a folder, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableSubmission(f"{path.name} is not a regular file (a FIFO, socket or device)")
        if info.st_size > max_bytes:
            raise UnreadableSubmission(
                f"{path.name} has {info.st_size} bytes, more than the {max_bytes} allowed"
            )
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while it was read
        raise UnreadableSubmission(f"{path.name} has more than the {max_bytes} bytes allowed")
    return data
