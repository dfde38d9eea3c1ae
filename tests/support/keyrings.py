"""Kernel keyrings from Python, for the keyring tests: Python has no keyutils, so these are raw syscalls (ctypes).

Every function returns the syscall's non-negative result, or -errno; nothing raises, so a probe in a sandbox can
report what the kernel answered."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import platform
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from advisor.harness.seccomp import _ARCHES

KEY_SPEC_SESSION_KEYRING = -3
KEY_SPEC_USER_KEYRING = -4
KEY_SPEC_USER_SESSION_KEYRING = -5
KEYCTL_GET_KEYRING_ID = 0
KEYCTL_JOIN_SESSION_KEYRING = 1
KEYCTL_SETPERM = 5
KEYCTL_LINK = 8
KEYCTL_UNLINK = 9
KEYCTL_SEARCH = 10
KEYCTL_READ = 11
KEYCTL_INVALIDATE = 21
USER_MAY_READ = 0x3F3F0000  # possessor: everything; the owning uid: everything (view, read, write, search, link)


def _syscall(name: str, *args: int | bytes | None) -> int:
    numbers = _ARCHES.get(platform.machine(), (0, {}))[1]
    if name not in numbers:
        return -errno.ENOSYS
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    converted = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = libc.syscall(ctypes.c_long(numbers[name]), *converted)
    return result if result >= 0 else -ctypes.get_errno()


def keyctl(operation: int, *args: int | bytes | None) -> int:
    return _syscall("keyctl", operation, *args)


def add_user_key(description: str, payload: bytes, keyring: int) -> int:
    return _syscall("add_key", b"user", description.encode(), payload, len(payload), keyring)


def request_user_key(description: str) -> int:
    return _syscall("request_key", b"user", description.encode(), None, 0)


def read_key(serial: int) -> bytes | int:
    """The key's payload, or -errno."""
    buffer = ctypes.create_string_buffer(4096)
    size = keyctl(KEYCTL_READ, serial, buffer, 4096)
    return size if size < 0 else buffer.raw[:size]


def search(keyring: int, description: str) -> int:
    return keyctl(KEYCTL_SEARCH, keyring, b"user", description.encode(), 0)


def session_keyring(create: bool = False) -> int:
    return keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, int(create))


def join_session_keyring(name: str | None) -> int:
    return keyctl(KEYCTL_JOIN_SESSION_KEYRING, None if name is None else name.encode())


def invalidate(serial: int) -> int:
    return keyctl(KEYCTL_INVALIDATE, serial)


def listed(description: str) -> bool:
    """Whether /proc/keys (what this process may view) shows a key so described."""
    try:
        lines = Path("/proc/keys").read_text().splitlines()
    except OSError:
        return False
    return any(line.split(None, 8)[-1].startswith(f"{description}:") for line in lines if line.strip())


# ------------------------------------------------------------------ what the hostile tests share
SECRET = b"host-service-secret"


@contextlib.contextmanager
def planted_host_key(*, in_worker_session: bool) -> Iterator[dict]:
    """A key of a host service that no job may read, readable by this uid (the sandbox's uid on the host): in the
    uid's own keyring, or in a session keyring this process (the worker) joins first. On leaving, the key must be
    untouched and nothing a job tried to leave (`left`) may exist on the host."""
    tag = uuid.uuid4().hex[:12]
    if in_worker_session:
        assert join_session_keyring(f"advisor-test-worker-{tag}") > 0
        ring = KEY_SPEC_SESSION_KEYRING
    else:  # possessed through this process's session keyring, as the default user-session keyring has it
        assert keyctl(KEYCTL_LINK, KEY_SPEC_USER_KEYRING, KEY_SPEC_SESSION_KEYRING) == 0
        ring = KEY_SPEC_USER_KEYRING
    description = f"advisor-test-host:{tag}"
    serial = add_user_key(description, SECRET, ring)
    assert serial > 0, f"the test could not add its host key ({serial})"
    assert keyctl(KEYCTL_SETPERM, serial, USER_MAY_READ) == 0
    key = {"serial": serial, "description": description, "left": f"advisor-test-left-by-job:{tag}"}
    try:
        yield key
        assert read_key(serial) == SECRET, "the host's key is untouched"
    finally:
        invalidate(serial)
    assert not eventually_listed(key["left"]), "a key a job added is still on the host"


def probe_kwargs(key: dict) -> dict:
    """For tests.support.sandbox_probes:probe_keyrings."""
    return {"host_key": key["serial"], "host_description": key["description"], "leave_description": key["left"]}


def eventually_listed(description: str, within_s: float = 15.0) -> bool:
    """Whether the host still lists a key so described after `within_s` (the kernel frees unused keys lazily)."""
    deadline = time.monotonic() + within_s
    while listed(description):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)
    return False


def check_refused(seen: dict) -> None:
    """probe_keyrings' observations in a sandbox: every keyring call refused, /proc/keys names no host key."""
    refused = -errno.EPERM
    assert seen["read_host_key"] == refused, "the host's key is not readable"
    assert seen["proc_keys_names_host_key"] is False, "/proc/keys names no host key"
    for attempt in (
        "request_host_key",
        "link_user_keyring",
        "join_session_keyring",
        "search_session",
        "search_user",
        "search_user_session",
        "add_session",
        "add_user",
        "add_user_session",
    ):
        assert seen[attempt] == refused, f"{attempt}: {seen[attempt]}"
