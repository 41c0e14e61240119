"""The reconcile agent: its loop (`loop.Agent`) and what only the agent uses.

`lock` (one agent per workspace), `leader` (one leader among several agents), `storewatch` (trusting the store
it writes), `channel` (the runtime's report records read into the store), `secrets` (the per-attempt report
secrets the API checks), `pipesize` (resizing a running pipeline's parts), `capacity` (the fleet's capacity as
events) and `cause` (the cause line of a failed attempt). Submodules are imported where used.
"""
