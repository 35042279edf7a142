"""One module per ``harness`` subcommand; the registry is ``harness.cli.COMMANDS``."""
