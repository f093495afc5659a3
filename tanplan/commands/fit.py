"""`tanplan fit`: the batch scaling law over proxy batch sizes, or the privacy-parameter search."""

from __future__ import annotations

from tanplan.commands._args import float_list, int_list, positive_int, print_json, print_table

HELP = "fit the batch law over proxy batch sizes and predict one launch at the target (or search S at constant η)"


def sizes_or_auto(text: str):
    """"auto" (the proxy ladder finds the knee) or comma-separated positive integers."""
    return "auto" if text.strip() == "auto" else int_list(text)


def configure(parser) -> None:
    parser.add_argument("--config", required=True, help="experiment TOML")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--best", help="best.json of a sweep: its configuration is the one trained")
    parser.add_argument("--batch-sizes", type=sizes_or_auto, help="proxy batch sizes, e.g. 64,128,256, or auto: the "
                        "proxy ladder chooses rungs and seeds within its budget (default [fit] batch_sizes)")
    parser.add_argument("--seeds", type=positive_int, help="seeds per batch size (default [fit] seeds)")
    parser.add_argument("--vary", choices=("batch", "steps", "data"), default="batch",
                        help="batch: the scaling law; steps: the privacy-parameter search at constant η and σ; "
                             "data: the dataset-size study at fixed (B, σ, S), δ = 1/N")
    parser.add_argument("--factors", type=float_list, help="k values for --vary steps (S·k², B/k) or data (N·k, "
                        "at most the training set size)")
    parser.add_argument("--proxy-batch-size", type=positive_int, help="proxy batch for --vary steps or data "
                        "(default: the smallest of explicit --batch-sizes)")
    parser.add_argument("--law", choices=("knee", "noise", "flat", "log-linear", "auto"), help="the form of the batch "
                        "law: a rise to a knee then a plateau, a + c/B', a, a + b·ln B', or auto (knee or noise by "
                        "held-out error; default [fit] law)")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    from pathlib import Path

    from tanplan.config import load_config, with_tuned
    from tanplan.errors import UsageError
    from tanplan.reports import fit as fit_report
    from tanplan.workflow import fit, ladder, tuning
    from tanplan.workflow.inputs import check_config, check_out_dir

    cfg = load_config(args.config, args.set)
    cfg = with_tuned(cfg, fit.load_best_overrides(args.best), f"--best {args.best}")
    section = cfg.fit
    sizes = args.batch_sizes or section.batch_sizes
    sizes = sizes if sizes == "auto" else list(sizes)
    seeds = args.seeds or section.seeds
    out = Path(args.out)
    check_config(cfg)  # before any data is read
    check_out_dir(out)
    tuning.check(cfg)
    if args.vary == "batch" and sizes == "auto":
        ladder.check_ladder(cfg)
    elif args.vary == "batch":
        fit.check_batch_sizes(sizes, cfg.train.batch_size, seeds)
    log = (lambda *a, **k: None) if args.json else print
    if args.vary in ("data", "steps"):
        if args.proxy_batch_size is None and sizes == "auto":
            raise UsageError(f"--vary {args.vary} needs --proxy-batch-size (or explicit --batch-sizes): the proxy B' "
                             "that every member trains")
        proxy = args.proxy_batch_size or min(sizes)
    tune = tuning.for_config(cfg)  # every proxy of every mode trains on the [tuning] data (public by default)
    proxies = tune.proxy_cfg
    if args.vary == "data":
        result = fit.dataset_size_study(proxies, args.factors or [0.25, 0.5, 1.0], proxy, seeds, out, log=log)
        _report_spent(result, out, tune, log)
        if args.json:
            print_json(result)
        else:
            print_table([(f"N={m['dataset_size']:,}", f"ε RDP {m['eps_rdp']:.3g} (ε_TAN {m['eps_tan']:.3g}), δ {m['delta']:.2g}, "
                          f"proxy accuracy {m['mean_accuracy']:.4f} ± {m['std_accuracy']:.4f}")
                         for m in result["members"]], title="dataset size at fixed (B, σ, S)")
        return 0
    if args.vary == "steps":
        result = fit.privacy_parameter_search(proxies, args.factors or list(section.factors), proxy, seeds, out, log=log)
        _report_spent(result, out, tune, log)
        if args.json:
            print_json(result)
        else:
            best = result["best"]
            print(f"best k = {best['k']:g}: full-scale B = {best['batch_size']}, S = {best['steps']}, "
                  f"σ = {best['sigma']:.4g}, exact ε (RDP) = {best['eps_rdp']:.4g}, proxy accuracy "
                  f"{best['mean_accuracy']:.4f} ± {best['std_accuracy']:.4f}")
        return 0
    law = args.law or section.law
    if sizes == "auto":
        result = ladder.ladder_fit(proxies.with_overrides({"fit.law": law}), out, log=log)
    else:
        result = fit.fit_batch_law(proxies, sizes, seeds, out, level=section.level, law=law, log=log)
        fit_report.write_fit_report(result, out)
    _report_spent(result, out, tune, log)
    if args.json:
        print_json(result)
    elif result.get("ladder") is not None and "law" not in result:
        print(f"{result['ladder']['reason']}: no law fitted, no prediction; {result['ladder']['what_to_change']}")
        print(f"report: {out / 'ladder' / 'ladder.md'}")
    else:
        print(fit_report.fit_markdown(result))
        print(f"figure: {out / 'scaling_law.png'}")
    return 0



def _report_spent(result: dict, out, tune, log) -> None:
    """privacy_spent.json of the fit's runs, and one line saying what it is the cost to."""
    from tanplan.workflow import privacy_spent

    result["privacy_spent"] = spent = privacy_spent.report(out, out, "proxy runs of this fit", tune)
    result["tuning"] = tune.to_dict()
    whose = (f"the public tuning data ({tune.source}; no private example)" if tune.data == "public"
             else "the private training set")
    log(f"ε of its {spent['runs']} runs composed: {privacy_spent.describe(spent)}: the cost to {whose} "
        f"({out / privacy_spent.FILE})")
