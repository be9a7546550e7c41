"""Helpers for tests and the demo: the fake NVML library and its state file."""
