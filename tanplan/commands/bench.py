"""`tanplan bench [--model M ...] [--batch-size B] [--json]`: DP step time against non-private."""

from __future__ import annotations

from tanplan.commands._args import positive_int, print_json
from tanplan.engine.bench import DEFAULT_MODELS, batch_of, bench_model, input_shape
from tanplan.errors import UsageError

HELP = "time the DP-SGD step against the fastest non-private step of the same model and batch (ratio, samples/s)"


def configure(parser) -> None:
    parser.add_argument("--model", action="append", default=None, metavar="M",
                        help="model to time (repeatable; default: cnn1d and wrn16_4)")
    parser.add_argument("--batch-size", type=positive_int, default=None, metavar="B",
                        help="rows per step (default, sized for a CPU: 256 for cnn1d, 64 for wrn16_4 and "
                             "vit_tiny, 8 for nf_resnet)")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed steps of each kind (median)")
    parser.add_argument("--grad-method", choices=("auto", "ghost", "vmap"), default="auto",
                        help="per-example clipping route of the DP step")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def execute(args) -> int:
    from tanplan.models import available_models  # lazy: JAX; `tanplan --help` builds this parser without it

    models = args.model or list(DEFAULT_MODELS)
    for m in models:
        if m not in available_models():
            raise UsageError(f"unknown model {m!r}; valid: {', '.join(available_models())}")
    for m in models:  # every model before the first is timed
        _check_fits(m, args.batch_size)
    results = [_timed(m, args) for m in models]
    if args.json:
        print_json([r.to_dict() for r in results])
        return 0
    header = f"{'model':<12} {'B':>5} {'params':>9} {'route':<6} {'DP ms':>9} {'non-DP ms (route)':>22} " \
             f"{'ratio':>6} {'DP samples/s':>13}  every non-private route"
    print(header)
    for r in results:
        routes = ", ".join(f"{name} {sec * 1e3:.1f} ms" for name, sec in r.nonprivate_routes.items())
        fastest = f"{r.nonprivate_seconds * 1e3:.1f} ({r.nonprivate_route})"
        print(f"{r.model:<12} {r.batch_size:>5} {r.num_params:>9} {r.route:<6} {r.dp_seconds * 1e3:>9.1f} "
              f"{fastest:>22} {r.ratio:>6.2f} {r.dp_samples_per_second:>13.0f}  {routes}")
    print(f"median of {args.repeats} alternating repeats after warm-up; the ratio divides the DP step by the fastest "
          "non-private route; compare ratios, not absolute times")
    return 0


def _timed(model: str, args):
    """bench_model, with a step that exhausts the device's memory said as bad input (one line, exit 2)."""
    try:
        return bench_model(model, args.batch_size, repeats=args.repeats, grad_method=args.grad_method)
    except Exception as err:  # XLA raises its own error type: only the memory case is the input's
        if "RESOURCE_EXHAUSTED" not in str(err):
            raise
        batch = batch_of(model, args.batch_size)
        raise UsageError(f"--batch-size {batch} is not allowed for {model}: one step ran out of the device's memory; "
                         "give a smaller --batch-size") from None


def _check_fits(model: str, batch_size: int | None) -> None:
    """UsageError when one step of `model` at batch_size cannot fit in the memory this machine has free.

    The estimate is a floor: the random batch (drawn in float64, kept in float32: 12 bytes a value) and
    one float32 copy of every example's gradient (what a per-example route materialises), from the
    model's parameter count (abstract initialisation: no compute).
    """
    import jax
    import numpy as np

    from tanplan.models import create_model  # lazy: JAX; `tanplan --help` builds this parser without it

    batch = batch_of(model, batch_size)
    shape = input_shape(model)
    net = create_model(model, 10)
    params = jax.eval_shape(lambda key: net.init(key, np.zeros((1, *shape), np.float32)), jax.random.key(0))
    num_params = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
    needed = batch * (12 * int(np.prod(shape)) + 4 * num_params)
    free = _available_memory()
    if free is not None and needed > free:
        raise UsageError(f"--batch-size {batch} is not allowed for {model}: one step needs at least "
                         f"{needed / 2**30:.3g} GiB (the batch and per-example gradients of {num_params:,} "
                         f"parameters), more than the {free / 2**30:.3g} GiB this machine has available")


def _available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux: MemAvailable), else the physical memory."""
    import os

    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
