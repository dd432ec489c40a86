"""`python -m helpers.classroom notebooks|reset|cache|check`: helpers/classroom/commands.py."""
import sys

from helpers.classroom.commands import main

sys.exit(main())
