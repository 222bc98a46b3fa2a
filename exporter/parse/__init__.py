"""Parsing: one node's journal lines in, request intervals and events out."""
