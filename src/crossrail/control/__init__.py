"""The control plane: the service that wires the store, the scheduling core and executors.

Submodules are imported where used (`crossrail.control.service`, `crossrail.control.workspace`), so the
CLI loads only what a command needs.
"""
