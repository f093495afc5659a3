"""One module per CLI sub-command: HELP, configure(parser), run(args) -> exit code."""
