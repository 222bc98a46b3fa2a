"""The daemon: supervision, ingest, reload, checkpoint then publish, systemd status."""
