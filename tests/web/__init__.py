"""Tests of the dashboard pages (app/web) on synthetic analyses."""
