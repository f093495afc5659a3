"""tanplan: plan, simulate and launch DP-SGD training with the TAN scaling laws.

Importing the package changes nothing in the process and imports no JAX, pandas, matplotlib or Ray:
the planner must answer in about a second. Process-wide settings (XLA's CPU flag, the compilation
cache) are made by the command line's entry point, tanplan.runtime.configure_process().
"""

__version__ = "0.1.0"
