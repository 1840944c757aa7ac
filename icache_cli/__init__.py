"""The `icache` console script: the subcommand table, the command-line habits every
subcommand shares, argument types, shell completion and the crd command."""
