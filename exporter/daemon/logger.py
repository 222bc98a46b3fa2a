"""The one logger every part of the daemon logs under: its lines read `exporter.daemon.daemon`."""

from __future__ import annotations

import logging

log = logging.getLogger("exporter.daemon.daemon")
