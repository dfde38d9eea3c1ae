"""Tests of advisor/harness: measurement, backends, sandbox and isolation, loading, inspection and coverage."""
