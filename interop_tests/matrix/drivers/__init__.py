"""One driver per client library (see ``interop_tests/matrix/driver.py`` for the API)."""
