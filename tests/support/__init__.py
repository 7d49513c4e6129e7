"""Helpers shared by tests/, interop_tests/, fuzz/ and benchmarks/ (not shipped: not in
[tool.setuptools] packages). Import as ``tests.support.<module>`` with the repository root on
sys.path (pytest's ``pythonpath = ["."]``; the scripts insert it or run from the root)."""
