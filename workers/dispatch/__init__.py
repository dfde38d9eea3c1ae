"""Start one-shot workers (`npu-advisor worker --once`) through a cluster's scheduler when the queue has work for
them: the dispatcher (workers.dispatch.dispatcher) and the executors it submits through (Slurm: workers.dispatch.slurm).
"""
