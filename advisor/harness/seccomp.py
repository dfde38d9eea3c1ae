"""The seccomp filter of every sandbox: no process inside may trace or read/write another process's memory.

A job's children run as one uid, so without this a child could `PTRACE_ATTACH` its sandbox's pid 1 (the zygote)
or a sibling and take over its descriptors - the channel to the worker included. The zygote is also made
non-dumpable, which already refuses ptrace from an unprivileged process; this filter is the second wall, and it
refuses the calls outright: ptrace, process_vm_readv/writev, pidfd_getfd and kcmp answer EPERM.

Kernel keyrings are refused too (add_key, keyctl, request_key answer EPERM, as in container runtimes' default
profiles): they are not namespaced, and the sandbox's uid is the worker's uid on the host, so a job could otherwise
read the keys of the worker's uid (its `_uid.N` keyring) and leave keys there for the next job. Each sandbox also gets
a session keyring of its own before this filter applies (advisor.harness.session_keyring). Syscalls of
another ABI (i386 compat, x32) are refused too: nothing in a sandbox needs them, and their numbers differ.

bubblewrap loads the program (`--seccomp FD`): a raw array of `struct sock_filter` read from a memfd.
Torch-free, Linux only; on an architecture not listed here no filter is built (`program()` returns None) and
the isolation note says so.
"""

from __future__ import annotations

import errno
import platform
import struct

# struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}; seccomp_data {int nr; u32 arch; ...}
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_REFUSE = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO | EPERM
_X32_BIT = 0x40000000

# name -> (audit arch, {syscall: number}); numbers from the kernel's syscall tables (unistd_64.h, asm-generic)
_ARCHES = {
    "x86_64": (
        0xC000003E,
        {
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "kcmp": 312,
            "pidfd_getfd": 438,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "kcmp": 272,
            "pidfd_getfd": 438,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
        },
    ),
}
KEYRING_SYSCALLS = ("add_key", "keyctl", "request_key")
REFUSED_SYSCALLS = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", *KEYRING_SYSCALLS)


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def machine_name(machine: str | None = None) -> str:
    return machine or platform.machine()


def program(machine: str | None = None) -> bytes | None:
    """The BPF program for `machine` (default: this one), or None where it is not known."""
    arch = _ARCHES.get(machine_name(machine))
    if arch is None:
        return None
    audit_arch, numbers = arch
    tests = [(_JUMP_AT_LEAST, _X32_BIT)] if machine_name(machine) == "x86_64" else []
    tests += [(_JUMP_EQUAL, numbers[name]) for name in REFUSED_SYSCALLS]
    # a matching test jumps past the tests after it and the "allow", to the final "refuse"
    ops = [_op(code, k, jt=len(tests) - index) for index, (code, k) in enumerate(tests)]
    head = [
        _op(_LOAD_WORD, 4),  # arch
        _op(_JUMP_EQUAL, audit_arch, jt=1, jf=0),
        _op(_RETURN, _REFUSE),  # another ABI: refused
        _op(_LOAD_WORD, 0),  # syscall number
    ]
    return b"".join([*head, *ops, _op(_RETURN, _ALLOW), _op(_RETURN, _REFUSE)])


def program_fd() -> int | None:
    """A memfd holding `program()`, positioned at its start, for `bwrap --seccomp FD`; None without a program.
    The caller passes it to bubblewrap (`pass_fds`) and closes it once bubblewrap started."""
    code = program()
    if code is None:
        return None
    from advisor.harness.child_streams import memfd_with

    return memfd_with(code, "advisor-seccomp")
