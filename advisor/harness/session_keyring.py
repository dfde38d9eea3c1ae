"""A fresh session keyring for every sandbox, then bubblewrap: `python -I -S session_keyring.py BWRAP ARGS...`.

Kernel keyrings are not a namespace: a process inherits its parent's session keyring across fork, exec and a new
user namespace, and the sandbox's uid is the worker's uid on the host. A sandbox started straight from the worker
would possess the worker's session keyring (systemd services, SSH logins and container runtimes give it one) and
every key in it, and every job would share it. So every sandbox is started through this launcher: it joins a new,
anonymous session keyring (`keyctl(KEYCTL_JOIN_SESSION_KEYRING, NULL)`) and execs bubblewrap, which keeps the pid,
so the caller's Popen, its `--die-with-parent` and its `--as-pid-1` mean what they meant. Everything in the sandbox
inherits that keyring; the kernel frees it when the sandbox's last process is gone. It must happen here, before
bubblewrap installs the seccomp filter (advisor.harness.seccomp), which refuses `keyctl` inside the sandbox.

Run by path with `-I -S` (no site, no environment, no project on the path): it imports only the standard library.
Where the kernel has no keyrings (ENOSYS) or a seccomp profile of the worker's own already refuses `keyctl` (EPERM,
as Docker's default does), nothing in the sandbox can reach a keyring either, and bubblewrap starts as it is. Any
other failure (the uid's key quota used up) stops the launch with exit code 125 and a message: no sandbox starts
holding the worker's keyring.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys

KEYCTL_NUMBERS = {"x86_64": 250, "aarch64": 219}  # the keyctl syscall (unistd_64.h, asm-generic)
KEYCTL_GET_KEYRING_ID = 0
KEYCTL_JOIN_SESSION_KEYRING = 1
KEY_SPEC_SESSION_KEYRING = -3
LAUNCH_FAILED = 125  # the exit code when no fresh keyring could be made (bubblewrap itself uses 1)
_UNREACHABLE = (errno.ENOSYS, errno.EPERM)  # no keyrings here, or keyctl already refused to this process


def keyctl(operation: int, *args: int | bytes | None) -> int:
    """The raw syscall: its non-negative result, or -errno."""
    number = KEYCTL_NUMBERS.get(platform.machine())
    if number is None:
        return -errno.ENOSYS
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    converted = [ctypes.c_long(arg) if isinstance(arg, int) else arg for arg in args]
    result = libc.syscall(ctypes.c_long(number), ctypes.c_long(operation), *converted)
    return result if result >= 0 else -ctypes.get_errno()


def join_fresh_session_keyring() -> int:
    """Join a new anonymous session keyring; its serial, or -errno."""
    return keyctl(KEYCTL_JOIN_SESSION_KEYRING, None)


def main(argv: list[str]) -> None:
    if not argv:
        sys.stderr.write("usage: session_keyring.py PROGRAM [ARGS...]\n")
        os._exit(2)
    joined = join_fresh_session_keyring()
    if joined < 0 and -joined not in _UNREACHABLE:
        sys.stderr.write(f"npu-advisor: no fresh session keyring for the sandbox: {os.strerror(-joined)}\n")
        sys.stderr.flush()
        os._exit(LAUNCH_FAILED)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
