"""Queue feature tests, one module a feature (a package, so its conftest is not the
``conftest`` module that tests/test_*.py import from)."""
