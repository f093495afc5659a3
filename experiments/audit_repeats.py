"""The audits of docs/privacy.md, repeated: each audit kind at each claimed ε, `--repeats` times, one row each
(the bound, the f-DP estimate where there is one, the claim, the AUROC, the verdict), appended to
OUT/audits.jsonl as measured, then mean ± std per (kind, ε). Every audit draws its own secret canaries and
noise, so the spread is the audit's own.

    python experiments/audit_repeats.py --kinds gradient,input,final --epsilons 1,4,8 --repeats 3 --out DIR
(gradient / input: `tanplan audit` at S = --steps on the demo's config; final: `tanplan audit --final-model`,
the demo's config at its own S.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from tanplan import api

DEMO = Path(__file__).resolve().parent / "mnist1d.toml"


def one(kind: str, epsilon: float, steps: int, work: Path) -> dict:
    sets = [f"privacy.epsilon={epsilon}"]
    if kind == "final":
        r = api.final_audit(str(DEMO), work / "audit", overrides=sets)
        fdp = None
    else:
        r = api.audit(str(DEMO), work / "audit", overrides=[*sets, f"train.steps={steps}"], canary_kind=kind)
        fdp = r.fdp_estimate
    return {"kind": kind, "epsilon": epsilon, "claim": r.claimed_epsilon, "bound": r.lower_bound, "ratio": r.ratio,
            "fdp": fdp, "fdp_ratio": None if fdp is None else fdp / r.claimed_epsilon, "auroc": r.auroc,
            "verdict": r.verdict, "wall_seconds": r.wall_seconds}


def summary(rows: list[dict]) -> list[str]:
    lines = []
    for key in sorted({(r["kind"], r["epsilon"]) for r in rows}):
        group = [r for r in rows if (r["kind"], r["epsilon"]) == key]
        def stat(name):
            values = [r[name] for r in group if r[name] is not None]
            if not values:
                return "-"
            return f"{statistics.mean(values):.3f} ± {statistics.stdev(values) if len(values) > 1 else float('nan'):.3f}"
        lines.append(f"{key[0]} ε {key[1]} ({len(group)} audits): bound {stat('bound')} (ratio {stat('ratio')}), "
                     f"f-DP {stat('fdp')} (ratio {stat('fdp_ratio')}), AUROC {stat('auroc')}, verdicts "
                     f"{sorted({r['verdict'] for r in group})}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="gradient", help="comma-separated: gradient, input, final")
    parser.add_argument("--epsilons", default="4", help="comma-separated claimed ε")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100, help="S of the white-box audits (gradient, input)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for _ in range(args.repeats):  # repeats outermost: a run cut short still holds some of every cell
        for kind in args.kinds.split(","):
            for epsilon in map(float, args.epsilons.split(",")):
                with tempfile.TemporaryDirectory() as work:
                    row = one(kind, epsilon, args.steps, Path(work))
                rows.append(row)
                with open(out / "audits.jsonl", "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)
    print("\n".join(summary(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
