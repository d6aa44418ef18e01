"""Helpers of the test suite: toy data writers, subprocess scripts (torchrun workers), the stock-ST job runner."""
