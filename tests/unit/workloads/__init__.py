"""Tests of the reference workloads."""
