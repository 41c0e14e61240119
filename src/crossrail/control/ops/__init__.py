"""Operating a workspace: the workspace on disk and the one opened in process (`workspace`, `local`), every
operation of the client as one actor may do it (`operations`), the fleet file, sweeps, the store's check,
backup and restore, and crossrail's own deployment. Submodules are imported where used.
"""
