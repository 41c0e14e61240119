"""Executors that run attempts: `local.LocalExecutor` runs them as supervised processes on this machine.

Nothing is imported here, so that `python -m crossrail.executors.supervisor` starts with the standard library only.
"""
