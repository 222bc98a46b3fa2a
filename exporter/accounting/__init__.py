"""Accounting: intervals and events in, every figure the exporter shows out."""
