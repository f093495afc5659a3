"""The planner's report: report.md, the constant-TAN family tables (CSV) and three figures.

Figures: ε against σ at constant η for several S (the paper's "privacy wall", Fig. 2); the ratio
g_α(σ, q)/(α·η_step²) against α for several (q, σ) at one η_step (Fig. 3); the two constant-TAN
families with their exact ε.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tanplan.config import MAX_STEPS, SIGMA_MIN
from tanplan.privacy import accounting, tan
from tanplan.fileio import write_text_atomic
from tanplan.privacy.plan import Plan, advice
from tanplan.reports.figures import figure

PRIVACY_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)


@dataclass(frozen=True)
class ProxyRow:
    """A member of the constant-η_step, constant-S family (a row of proxy_family.csv)."""

    batch_size: int
    sigma: float
    steps: int
    eta_step: float
    savings: float
    regime: str
    eps_rdp_of_proxy: float


@dataclass(frozen=True)
class FamilyRow:
    """A member of the constant-η, constant-σ family (a row of privacy_family.csv)."""

    k: float
    batch_size: int
    sigma: float
    steps: int
    lr_scale: float
    eta: float
    compute_ratio: float
    eps_rdp: float


def proxy_rows(plan: Plan, batch_sizes=None) -> list[ProxyRow]:
    """The constant-η_step, constant-S family from B down by powers of two (at least 1)."""
    if batch_sizes is None:
        batch_sizes = sorted({max(1, plan.batch_size >> i) for i in range(0, 9, 2)}, reverse=True)
    rows = []
    for point in tan.proxy_family(plan.batch_size, plan.sigma, plan.steps, batch_sizes):
        if point.sigma < SIGMA_MIN:  # below the accountants' domain (tanplan.privacy.accounting)
            continue
        proxy = plan.proxy(point.batch_size)
        rows.append(ProxyRow(proxy.batch_size, proxy.sigma, proxy.steps, proxy.eta_step, plan.savings(proxy),
                             proxy.regime.value, proxy.epsilon("rdp")))
    return rows


def privacy_family_rows(plan: Plan, factors=PRIVACY_FACTORS) -> list[FamilyRow]:
    """The constant-η, constant-σ family: S·k² steps at B/k, learning rate × 1/k²."""
    rows = []
    for point in tan.privacy_parameter_family(plan.batch_size, plan.sigma, plan.steps, factors):
        if point.batch_size > plan.dataset_size or point.steps > MAX_STEPS:
            continue
        member = Plan(plan.dataset_size, point.batch_size, point.steps, plan.sigma, plan.delta)
        rows.append(FamilyRow(plan.batch_size / point.batch_size, point.batch_size, plan.sigma, point.steps,
                              point.lr_scale, member.eta,
                              point.batch_size * point.steps / (plan.batch_size * plan.steps), member.epsilon("rdp")))
    return rows


def _csv(rows: list) -> str:
    keys = [f.name for f in dataclasses.fields(rows[0])]
    lines = [",".join(keys)] + [",".join(_fmt(v) for v in dataclasses.astuple(r)) for r in rows]
    return "\n".join(lines) + "\n"


def _fmt(value) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _markdown(rows: list) -> str:
    keys = [f.name for f in dataclasses.fields(rows[0])]
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    out += ["| " + " | ".join(_fmt(v) for v in dataclasses.astuple(r)) + " |" for r in rows]
    return "\n".join(out)


def figure_privacy_wall(plan: Plan, path: Path) -> Path:
    """ε (exact, RDP) against σ at the plan's η, one curve per S; q follows from σ, η and S."""
    with figure(path, figsize=(6, 4)) as (fig, ax):
        sigmas = np.geomspace(0.35, 10.0, 8)
        for steps in sorted({max(1, plan.steps // 10), plan.steps, min(plan.steps * 10, MAX_STEPS)}):
            xs, ys = [], []
            for s in sigmas:
                q = math.sqrt(2.0) * s * plan.eta / math.sqrt(steps)
                if q <= 1:
                    xs.append(s)
                    ys.append(accounting.cached_epsilon(q, float(s), steps, plan.delta, "rdp"))
            ax.plot(xs, ys, marker="o", ms=3, label=f"S={steps:,}")
        ax.axhline(plan.eps_tan, color="k", ls="--", lw=1, label="ε_TAN (heuristic)")
        ax.axvline(tan.WALL_SIGMA, color="r", ls=":", lw=1)
        ax.axvline(tan.TAN_SIGMA, color="g", ls=":", lw=1)
        ax.scatter([plan.sigma], [plan.epsilon("rdp")], color="k", zorder=5, label="this plan")
        ax.set(xscale="log", yscale="log", xlabel="σ", ylabel="exact ε (RDP)",
               title=f"Privacy wall at constant η={plan.eta:.3g}, δ={plan.delta:.2g}")
        ax.legend(fontsize=8)
    return path


def figure_rdp_ratio(plan: Plan, path: Path) -> Path:
    """g_α(σ, q)/(α·η_step²) against α for several (q, σ) with the plan's η_step: ≈ 1 once σ ≥ 2."""
    with figure(path, figsize=(6, 4)) as (fig, ax):
        for s in (0.5, 1.0, 2.0, 4.0, 8.0):
            q = math.sqrt(2.0) * s * plan.eta_step
            if q > 1:
                continue
            orders, rdp = accounting.per_step_rdp(q, s)
            keep = orders <= 256
            ax.plot(orders[keep], rdp[keep] / (orders[keep] * plan.eta_step**2), label=f"σ={s:g}, q={q:.3g}")
        ax.axhline(1.0, color="k", ls="--", lw=1)
        ax.set(xscale="log", yscale="log", xlabel="Rényi order α", ylabel="g_α(σ,q) / (α·η_step²)",
               title=f"Per-step RDP against its TAN approximation, η_step={plan.eta_step:.3g}")
        ax.legend(fontsize=8)
    return path


def figure_families(plan: Plan, proxies: list[ProxyRow], privacy: list[FamilyRow], path: Path) -> Path:
    with figure(path, 1, 2, figsize=(10, 4)) as (fig, (left, right)):
        left.plot([r.batch_size for r in proxies], [r.eps_rdp_of_proxy for r in proxies], marker="o")
        left.axhline(plan.epsilon("rdp"), color="k", ls="--", lw=1, label="target ε")
        left.set(xscale="log", yscale="log", xlabel="proxy batch size B'", ylabel="exact ε of the member (RDP)",
                 title="Constant η_step and S (proxies)")
        left.legend(fontsize=8)
        right.plot([r.k for r in privacy], [r.eps_rdp for r in privacy], marker="o")
        right.axhline(plan.eps_tan, color="k", ls="--", lw=1, label="ε_TAN")
        right.set(xscale="log", xlabel="k (B/k, S·k²)", ylabel="exact ε (RDP)", title="Constant η and σ")
        right.set_xticks([r.k for r in privacy], [f"{r.k:.3g}" for r in privacy])
        right.minorticks_off()
        right.legend(fontsize=8)
    return path


def summary_rows(plan, accountants, epochs_asked: float | None = None) -> list[tuple[str, str]]:
    """The plan's table; given by epochs (epochs_asked = E), S is shown as ceil(E·N/B) beside the E asked."""
    by_epochs = [("epochs asked E", f"{epochs_asked:g}")] if epochs_asked is not None else []
    rows = [
        ("dataset size N", f"{plan.dataset_size:,}"),
        ("batch size B", f"{plan.batch_size:,}"),
        *by_epochs,
        ("steps S" + (" = ceil(E·N/B)" if by_epochs else ""), f"{plan.steps:,}"),
        ("epochs S·B/N", f"{plan.steps * plan.batch_size / plan.dataset_size:.4g}"),
        ("noise σ" + (" (calibrated)" if plan.target_epsilon else ""), f"{plan.sigma:.4g}"),
        ("δ", f"{plan.delta:.3g}"),
        ("sampling rate q", f"{plan.q:.4g}"),
        ("η_step = q/(√2σ)", f"{plan.eta_step:.4g}"),
        ("η = √S·η_step", f"{plan.eta:.4g}"),
        ("TAN Σ = 1/η", f"{plan.tan:.4g}"),
        ("ε_TAN (heuristic)", f"{plan.eps_tan:.4g}"),
    ]
    record = lambda acc, rel: " — of record" if (acc, rel) == (plan.accountant, plan.neighbouring) else ""  # noqa: E731
    for acc in accountants:
        rows.append((f"ε exact ({acc.upper()}, add/remove-one){record(acc, 'add_remove')}",
                     f"{plan.epsilon(acc, 'add_remove'):.4g}"))
    if "pld" in accountants and plan.sigma >= accounting.PLD_SIGMA_MIN:
        rows.append((f"ε exact (PLD, replace-one){record('pld', 'replace_one')}",
                     f"{plan.epsilon('pld', 'replace_one'):.4g}"))
    return rows


def write_plan_report(plan: Plan, out: Path, accountants=("pld", "rdp"), title: str = "TAN plan",
                      epochs_asked: float | None = None) -> dict:
    """Write report.md, proxy_family.csv, privacy_family.csv and three figures into `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    proxies, privacy = proxy_rows(plan), privacy_family_rows(plan)
    write_text_atomic(out / "proxy_family.csv", _csv(proxies))
    write_text_atomic(out / "privacy_family.csv", _csv(privacy))
    figures = {
        "privacy_wall": figure_privacy_wall(plan, out / "privacy_wall.png"),
        "rdp_ratio": figure_rdp_ratio(plan, out / "rdp_ratio.png"),
        "families": figure_families(plan, proxies, privacy, out / "families.png"),
    }
    table = "\n".join(f"| {k} | {v} |" for k, v in summary_rows(plan, accountants, epochs_asked))
    text = f"""# {title}

| quantity | value |
|---|---|
{table}

**Regime:** {tan.REGIME_TEXT[plan.regime]}.

{chr(10).join('- ' + line for line in advice(plan, accountants[0]))}

ε_TAN = η² + 2η·√log(1/δ) is a heuristic for quick reasoning, never a guarantee; the exact ε comes from
dp_accounting (Poisson-subsampled Gaussian composed S times), under add/remove-one neighbours and, by
PLD, under replace-one (N public: the meaningful relation); which one is of record is marked.

## Privacy wall
![privacy wall](privacy_wall.png)

ε against σ at this plan's η for several S. Left of σ = 0.5 (red) ε explodes; right of σ = 2 (green) it
meets ε_TAN: there ε depends only on η.

## Per-step RDP against α·η_step²
![rdp ratio](rdp_ratio.png)

## Constant-TAN families
![families](families.png)

Proxies (same η_step and S; `proxy_family.csv`). A proxy is a simulation for choosing hyper-parameters:
its own ε is no guarantee for the target. Train proxies on public data ([tuning] data = "public"), or
compose their releases with the launch's ([tuning] data = "private").

{_markdown(proxies)}

Privacy-parameter family (same η and σ, S·k² steps at B/k, learning rate × 1/k²; `privacy_family.csv`):

{_markdown(privacy)}
"""
    write_text_atomic(out / "report.md", text)
    return {name: str(p) for name, p in figures.items()}
