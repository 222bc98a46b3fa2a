"""`python -m exporter` is the `sm-llm-exporter` command."""

import sys

from exporter.cli import main

sys.exit(main())
