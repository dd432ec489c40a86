"""`python -m helpers.cache`: see helpers/cache/cli.py."""
import signal
import sys

from helpers.cache.cli import main

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... ls | head` ends quietly
sys.exit(main())
