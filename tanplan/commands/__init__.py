"""One module per CLI sub-command: HELP, configure(parser), execute(args) -> exit code (the Python API's stages are tanplan.api.run, ...)."""
