"""Headless-Chromium tests of the dashboard (Playwright)."""
