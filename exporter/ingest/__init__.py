"""Ingest: a source's batch through a node's parser into the accounting."""
