"""Runs a WorkerAgent against the FakeServer in its own process, for the SIGTERM tests.

usage: python -m tests.support.signal_agent SUMMARY.json PID_FILE SLEEP_S GRACE_S
Prints "ready" once signal handlers are installed; writes the server's call counts to SUMMARY.json on exit.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from tests.support.fake_server import FakeServer
from tests.support.fake_stages import PID_FILE_ENV, SLEEP_S_ENV
from workers.agent import AgentConfig, WorkerAgent
from workers.api import WorkerApi


def main(summary: str, pid_file: str, sleep_s: str, grace_s: str) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    server = FakeServer(heartbeat_interval_s=0.2)
    server.add_job()
    os.environ.update({PID_FILE_ENV: pid_file, SLEEP_S_ENV: sleep_s})  # the runner inherits them
    config = AgentConfig(
        name="signal-test",
        device="cpu",
        backends=["eager"],
        work_dir=Path(summary).parent / "work",
        grace_s=float(grace_s),
        child_stop_grace_s=1.0,
        claim_jitter_s=0.1,
        stages="tests.support.fake_stages:slow",
    )
    agent = WorkerAgent(WorkerApi(server.client()), config)
    agent.install_signal_handlers()
    print("ready", flush=True)
    code = agent.run()
    routes = ("complete", "fail", "cancelled", "deregister", "claim")
    Path(summary).write_text(json.dumps({route: server.count(route) for route in routes}))
    return code


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
