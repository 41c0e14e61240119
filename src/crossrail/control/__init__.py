"""The control plane: the service that wires the store, the scheduling core and executors.

By role: `agent/` (the reconcile loop and what only it uses), `service/` (submit, preflight, commands and the read
models), `reports/` (what the workspace reports: documents, figures, readiness, Prometheus) and `ops/` (the
workspace, the client's operations, the fleet file, sweeps, the store's care, deployment). The modules here are
shared by several of them: the Executor protocol and its router, access, attempts, budgets, isolation, parents,
placing and the one path rule (uris). Submodules are imported where used (`crossrail.control.service`,
`crossrail.control.ops.workspace`), so the CLI loads only what a command needs.
"""
