"""Tests of advisor/cli: the `npu-advisor` commands, the source front and the remote client."""
