"""What the workspace reports, read from the store and written nowhere in it: the research-cycle report
(`report_doc`) and its figures, a sweep's fitted curves, the runs as metrics' facts, the readiness audit and the
Prometheus metrics. Submodules are imported where used (matplotlib, scipy and prometheus-client are extras).
"""
