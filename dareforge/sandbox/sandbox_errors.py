"""Sandbox errors. They live here so the package stands alone; they subclass the project's `DareforgeError`."""

from __future__ import annotations

from dareforge.errors import DareforgeError


class SandboxError(DareforgeError):
    """A sandbox could not be started or driven (the kernel died while starting, bad paths...)."""


class SandboxUnavailableError(SandboxError):
    """No working isolation (bubblewrap) on this machine, and running agent code without it was not allowed."""
