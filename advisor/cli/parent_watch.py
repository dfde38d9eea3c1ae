"""A worker started by `npu-advisor serve` exits when serve is gone, however serve ended (even kill -9).

serve starts its embedded worker in a session of its own (so a terminal's Ctrl-C reaches serve only, which
then stops the worker gracefully) and names itself in ADVISOR_EXIT_WITH_PARENT. The worker watches its parent
pid: once it changes (serve died and the worker was re-parented), the worker gets SIGTERM, its usual graceful
stop. Without this an orphaned worker polled a dead server for as long as the machine ran.
"""

from __future__ import annotations

import os
import signal
import threading

PARENT_ENV = "ADVISOR_EXIT_WITH_PARENT"
POLL_S = 1.0


def exit_with_parent() -> None:
    """Start watching when serve asked for it (no-op otherwise). Exits at once if serve is already gone."""
    expected = os.environ.pop(PARENT_ENV, "")
    if not expected.isdigit():
        return
    parent = int(expected)
    if os.getppid() != parent:
        raise SystemExit("the npu-advisor serve process that started this worker is gone; exiting")

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(POLL_S):
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)  # the worker's graceful stop (second time: at once)
                stop.wait(30)
                os._exit(1)

    threading.Thread(target=watch, name="exit-with-serve", daemon=True).start()
