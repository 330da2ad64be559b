"""`python -m buildkit.cli`."""
from buildkit.cli.main import main

main()
