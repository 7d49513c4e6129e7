"""Fuzzing helpers shared by tests/test_fuzz_*.py and the on-demand harnesses in fuzz/."""
