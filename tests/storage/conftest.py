"""The storage suite's fixtures; they live in ``storage_backends`` so that test modules can import
its classes by a name no other folder's ``conftest`` shares."""

from __future__ import annotations

from storage_backends import backend, moto_s3, no_read_retry_pause, pytest_terminal_summary, remote_backend

__all__ = ["backend", "moto_s3", "no_read_retry_pause", "pytest_terminal_summary", "remote_backend"]
