"""`python -m exporter` is the `sm-llm-exporter` command."""

import sys

from exporter.entry import main

sys.exit(main())
