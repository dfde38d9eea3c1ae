"""Tests of the API server (app/): queue, storage, auth, HTTP contract, migrations."""
