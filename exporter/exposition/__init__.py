"""Exposition: the metric families and their renderers for /metrics."""
