"""`python -m crossrail.cli ...` runs the `crossrail` command."""

from crossrail.cli.app import main

main()
