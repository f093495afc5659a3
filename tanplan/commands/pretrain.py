"""`tanplan pretrain --config FILE [--set section.key=value ...] --out DIR`: the config's model trained on
its public data, without privacy, into a run folder that [init] path reads (tanplan.workflow.pretrain)."""

from __future__ import annotations

from tanplan import api
from tanplan.commands._args import print_json, print_table

HELP = "train the config's model on its public data (no privacy) into a folder that [init] path reads"


def configure(parser) -> None:
    parser.add_argument("--config", default=None, help="TOML config (default: built-in defaults, mnist1d)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config key of the private run (its public data is pretrained on)")
    parser.add_argument("--out", required=True, metavar="DIR", help="the run folder written (model/ is the init)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def execute(args) -> int:
    cfg = api.as_config(args.config, args.overrides)
    summary = api.pretrain(cfg, args.out, progress=not args.quiet)
    if args.json:
        print_json(summary.to_dict())
        return 0
    acc = "-" if summary.test_accuracy is None else f"{summary.test_accuracy:.4f}"
    print_table([("public test accuracy", acc), ("examples (public)", str(summary.dataset_size)),
                 ("batch size, steps", f"{summary.batch_size}, {summary.steps}"),
                 ("written to", f"{args.out} (use it as [init] path = \"{args.out}\")")],
                title=f"tanplan pretrain: {cfg.experiment.name} (public data, non-private)")
    return 0
