"""Tests of workers/: the worker agent, its client, stages and per-job sandboxes, end to end with a server."""
