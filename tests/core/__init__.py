"""Tests of advisor/core: the decision engine, results, context, reports, statistics (torch-free where they can be)."""
