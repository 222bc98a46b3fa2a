"""The daemon: sources followed, batches ingested, the config reloaded, checkpoint then publish."""
