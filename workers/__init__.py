"""The worker agent: registers with an npu-advisor server, claims measurement jobs, runs them, uploads results.

The agent process talks to the server only over HTTP and never imports torch: every stage runs in a
child process, so a crash in torch or a vendor SDK costs one job, not the worker.
"""
