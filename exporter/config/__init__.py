"""The config: the YAML file read, checked and compared with the one in force."""
