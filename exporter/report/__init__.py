"""Reports: past windows as tables, JSON and OpenMetrics for backfill."""
