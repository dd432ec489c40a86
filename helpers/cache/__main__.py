"""`python -m helpers.cache`: see helpers/cache/command_line.py."""
import signal
import sys

from helpers.cache.command_line import main

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... ls | head` ends quietly
sys.exit(main())
