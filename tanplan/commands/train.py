"""`tanplan train --config FILE [--set section.key=value ...] [--out DIR] [--json]`."""

from __future__ import annotations

from tanplan import api
from tanplan.commands._args import print_json, print_table

RELATION = {"add_remove": "add/remove-one", "replace_one": "replace-one"}
HELP = "train one DP-SGD run from a TOML config; writes summary.json, metrics.jsonl and a checkpoint"


def configure(parser) -> None:
    parser.add_argument("--config", default=None, help="TOML config (default: built-in defaults, mnist1d)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config key, e.g. --set train.steps=300 (repeatable)")
    parser.add_argument("--out", default=None, metavar="DIR", help="write config, metrics, summary, checkpoint here")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in DIR exactly (same batches and noise); a finished run takes no step")
    parser.add_argument("--epochs", type=float, default=None, metavar="E",
                        help="train for E epochs: S = ceil(E·N/B) steps (instead of train.steps)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def execute(args) -> int:
    epochs = [f"train.epochs={args.epochs!r}"] if args.epochs is not None else []
    cfg = api.as_config(args.config, [*args.overrides, *epochs])  # bad keys and values fail here, before any compute
    # names, paths, plug-ins, the folder and --resume are checked before the data is loaded or generated
    summary = api.train(cfg, args.out, resume=args.resume, progress=not args.quiet)
    if args.json:
        print_json(summary.to_dict())
        return 0
    fmt = lambda v, f="{:.4g}": "-" if v is None else f.format(v)  # noqa: E731
    rows = [
        ("test accuracy", fmt(summary.test_accuracy, "{:.4f}")),
        ("epsilon of record", f"{fmt(summary.epsilon, '{:.4g}')} ({summary.epsilon_accountant or '-'}, "
                              f"{RELATION.get(summary.epsilon_neighbouring, '-')})"),
        ("epsilon (rdp / pld)", f"{fmt(summary.epsilon_rdp, '{:.3f}')} / {fmt(summary.epsilon_pld, '{:.3f}')} "
                                f"(add/remove-one; {summary.accountant} of record)"),
        ("epsilon, replace-one (pld)", fmt(summary.epsilon_replace_one, "{:.3f}")),
        ("delta", fmt(summary.delta)),
        ("batch size, steps, sigma", f"{summary.batch_size}, {summary.steps}, {fmt(summary.sigma)}"),
        ("wall time", f"{summary.wall_seconds:.1f} s"),
        ("samples/s", fmt(summary.samples_per_second, "{:.0f}")),
        ("params checksum", summary.params_checksum),
    ]
    target = summary.target
    if target:  # a proxy's own ε is no guarantee for anything: show what it stands for
        target_eps = target.epsilon("rdp", "add_remove") or target.target_epsilon
        rows.insert(2, ("proxy for target B, σ, ε", f"{target.batch_size}, {fmt(target.sigma)}, {fmt(target_eps)}"))
    rows.insert(1, ("test accuracy (AugTest)", fmt(summary.test_accuracy_augtest, "{:.4f}")))
    line = init_line(summary)
    if line:
        rows.insert(2, ("init", line))
    if not summary.noise_secret:
        rows.append(("noise", "reproducible from privacy.noise_seed: NOT private"))
    if args.out:
        rows.append(("written to", f"{args.out} (checkpoint/ is private: it holds the run's secret)"))
    print_table(rows, title=f"tanplan train: {cfg.experiment.name}" + ("" if summary.private else " (non-private)"))
    return 0


def init_line(summary) -> str | None:
    """What the run's [init] weights were: "ε = 5.34 composed: this run 4.00 and its init runs/priv1 (2
    releases)" when their releases compose into its ε of record, else the provenance's note ("assumed
    public, not produced by tanplan"); None without [init]."""
    prov = summary.init.provenance if summary.init is not None else None
    if not prov:
        return None
    composed, own = prov.get("composed_releases"), prov.get("epsilon_this_run")
    if composed and summary.epsilon is not None and own is not None:
        return (f"ε = {summary.epsilon:.2f} composed: this run {own:.2f} and its init {prov.get('source')} "
                f"({composed} release{'s' if composed > 1 else ''})")
    return f"{prov.get('source')}: {prov.get('note')}"
