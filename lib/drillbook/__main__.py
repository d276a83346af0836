"""`python -m drillbook` is the same as the `drillbook` command."""

from drillbook.cli import main

main()
