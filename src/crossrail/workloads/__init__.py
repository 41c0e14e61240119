"""Reference trainers crossrail runs; each is a module run as `python -m crossrail.workloads.<name>`."""
