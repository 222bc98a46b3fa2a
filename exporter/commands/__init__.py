"""The commands: what each `sm-llm-exporter` command does (cli.py only parses)."""
