"""`python -m tuner.cli`: the same as the `tuner` script."""

from tuner.cli import main

main()
