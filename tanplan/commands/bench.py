"""`tanplan bench [--model M ...] [--batch-size B] [--json]`: DP step time against non-private."""

from __future__ import annotations

from tanplan.commands._args import positive_int

HELP = "time the DP-SGD step against the fastest non-private step of the same model and batch (ratio, samples/s)"


def configure(parser) -> None:
    parser.add_argument("--model", action="append", default=None, metavar="M",
                        help="model to time (repeatable; default: cnn1d and wrn16_4)")
    parser.add_argument("--batch-size", type=positive_int, default=None, metavar="B",
                        help="rows per step (default: 256 for cnn1d, 64 for wrn16_4)")
    parser.add_argument("--repeats", type=positive_int, default=5, help="timed steps of each kind (median)")
    parser.add_argument("--grad-method", choices=("auto", "ghost", "vmap"), default="auto",
                        help="per-example clipping route of the DP step")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def run(args) -> int:
    from tanplan.engine.bench import DEFAULT_MODELS, bench_model
    from tanplan.commands._args import print_json
    from tanplan.errors import UsageError
    from tanplan.models import available_models

    models = args.model or list(DEFAULT_MODELS)
    for m in models:
        if m not in available_models():
            raise UsageError(f"unknown model {m!r}; valid: {', '.join(available_models())}")
    results = [bench_model(m, args.batch_size, repeats=args.repeats, grad_method=args.grad_method) for m in models]
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
