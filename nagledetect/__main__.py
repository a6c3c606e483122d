"""`python -m nagledetect` runs the command line."""

from nagledetect.cli import main

main()
