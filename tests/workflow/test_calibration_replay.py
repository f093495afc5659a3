"""experiments/calibration.py: the replay of the pipeline's decision code on a tiny pool, and its figures of
merit computed by hand (docs/calibration.md's table comes from these functions)."""

import json
import math
import statistics
import sys

import numpy as np
import pytest
from helpers import ROOT

sys.path.insert(0, str(ROOT / "experiments"))

import calibration  # noqa: E402
from calibration import Draws, Outcome, PoolExhausted, evaluate, load_pool, new_rule, previous_rule  # noqa: E402


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """A pool as calibration_pools.py writes it: 12 seeds a rung of a curve rising 4 points a doubling to a knee
    at 64 and flat at 0.86 past it, 8 launches at 0.86, one diverged run."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("pools") / "tiny.jsonl"
    curve = lambda b: 0.86 - 0.04 * max(0.0, np.log2(64 / b))  # noqa: E731
    lines = [{"kind": "rung", "b": b, "seed": s, "acc": curve(b) + rng.normal(0, 0.01), "steps": 30}
             for b in (16, 32, 64, 128, 256) for s in range(12)]
    lines += [{"kind": "launch", "b": 1024, "seed": s, "acc": 0.86 + rng.normal(0, 0.01), "steps": 30}
              for s in range(8)]
    lines.append({"kind": "launch", "b": 1024, "seed": 8, "acc": None, "steps": None})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return load_pool(path, (None, None))


def test_the_pool_loads_by_rung_and_keeps_diverged_runs_out(pool):
    assert pool.target_batch_size == 1024 and pool.steps == 30 and pool.failed == 1
    assert sorted(pool.rungs) == [16, 32, 64, 128, 256] and all(len(v) == 12 for v in pool.rungs.values())
    assert len(pool.launches) == 8 and pool.launch_std == pytest.approx(statistics.stdev(pool.launches))


def test_a_draw_takes_seeds_without_replacement_and_says_when_the_pool_runs_out(pool):
    draw = Draws(pool, np.random.default_rng(1))
    taken = draw(16, 5) + draw(16, 7)
    assert sorted(taken) == sorted(pool.rungs[16])  # all 12, each once
    with pytest.raises(PoolExhausted):
        draw(16, 1)


def test_figures_of_merit_are_the_ones_computed_by_hand(pool):
    launches = np.asarray(pool.launches)
    outcomes = [Outcome(True, 0.86, 0.855, 0.865, 0.5, 0.01), Outcome(False, None, None, None, 0.7),
                Outcome(True, 0.85, 0.80, 0.90, 0.3, 0.02)]
    c = evaluate(pool, outcomes, "hand")
    covered = [np.mean((launches >= 0.855) & (launches <= 0.865)), 1.0]
    assert c.refused == pytest.approx(1 / 3) and c.coverage == pytest.approx(np.mean(covered))
    errors = [abs(0.86 - launches.mean()), abs(0.85 - launches.mean())]
    assert c.median_error == pytest.approx(np.median(errors)) and c.p90_error == pytest.approx(np.percentile(errors, 90))
    assert c.mean_half_width == pytest.approx((0.005 + 0.05) / 2) and c.pool_half_width == pytest.approx(
        1.96 * launches.std(ddof=1))
    assert c.compute == pytest.approx(0.5) and c.launch_std_estimate == pytest.approx(0.015)
    assert "| tiny | hand | 3 | 0.333 |" in c.row()


def test_the_pipelines_rule_replays_on_the_pool_and_covers_its_launches(pool):
    rng = np.random.default_rng(2)
    outcomes = [new_rule(pool, rng) for _ in range(40)]
    assert all(o.compute <= 1024 / 1024 + 1e-9 for o in outcomes)  # the floor budget: 1024·S at B = 1024
    assert all(sum(b * n for b, n in o.seeds) <= 1024 for o in outcomes)
    c = evaluate(pool, outcomes, "this rule")
    assert c.refused == 0 and c.coverage >= 0.85 and c.median_error < 0.01
    old = evaluate(pool, [previous_rule(pool, rng) for _ in range(40)], "previous")
    assert 0 <= old.refused <= 1 and old.draws == 40
    columns = calibration.HEADER.splitlines()[1].count("|")
    assert c.row().count("|") == columns  # one cell a column


def test_the_parts_table_is_the_mean_of_each_parts_std_and_the_width_with_the_launch_std_known(pool):
    launches = np.asarray(pool.launches)
    sd_l = launches.std(ddof=1)
    parts = [(0.003**2, 0.02**2, 0.0, 2.5), (0.005**2, 0.01**2, 0.004**2, 2.0)]
    outcomes = [Outcome(True, 0.86, 0.86 - 2.5 * 0.0203, 0.86 + 2.5 * 0.0203, 0.5, parts=parts[0]),
                Outcome(False, None, None, None, 0.7),
                Outcome(True, 0.85, 0.84, 0.86, 0.5, parts=parts[1])]
    cells = [c.strip() for c in calibration.parts_row(pool, outcomes).strip("|").split("|")]
    assert cells[0] == "tiny" and cells[1] == "0.40" and cells[2] == "1.50" and cells[4] == "0.20"  # (0.3+0.5)/2 ...
    assert cells[5] == "2.25" and cells[3] == f"{100 * sd_l:.2f}"
    known = [1.96 * np.sqrt(0.003**2 + sd_l**2), 1.96 * np.sqrt(0.005**2 + sd_l**2 + 0.004**2)]
    assert cells[8] == f"{np.mean(known) / (1.96 * sd_l):.2f}×"
    cover = np.mean([np.mean(abs(launches - 0.86) <= known[0]), np.mean(abs(launches - 0.85) <= known[1])])
    assert cells[9] == f"{cover:.3f}"
    assert cells[10] == f"{(2.5 * 0.02 + 2.0 * 0.01) / 2 / (1.96 * sd_l):.2f}×"  # t · the launch's std, alone
    assert calibration.parts_row(pool, outcomes).count("|") == calibration.PARTS_HEADER.splitlines()[1].count("|")


def test_the_replay_reads_the_settings_own_fit_section(pool):
    """The rule of record is the setting's config: its fit.compute_budget caps the ladder after the sweep (here
    the pipeline's 1024·S at B = 1024, less a sweep of 512·S), its fit.ladder_seeds sets the first rungs."""
    from tanplan.config import load_config

    cfg = load_config(None, ["fit.compute_budget=0.25", "fit.ladder_seeds=2"])
    rng = np.random.default_rng(3)
    outcomes = [new_rule(pool, rng, cfg=cfg, sweep_spent=512) for _ in range(20)]
    assert all(sum(b * n for b, n in o.seeds) <= 1024 - 512 for o in outcomes)
    # the first rung is climbed with fit.ladder_seeds (later seeds may join it): 2 here, 3 by default
    assert all(o.seeds[0][0] == 16 and o.seeds[0][1] >= 2 for o in outcomes) and min(o.seeds[0][1] for o in outcomes) == 2
    own = [new_rule(pool, rng, cfg=load_config(None), sweep_spent=512) for _ in range(20)]  # no budget: its own
    assert max(sum(b * n for b, n in o.seeds) for o in own) > 1024 - 512 and min(o.seeds[0][1] for o in own) >= 3


def test_the_widths_floor_is_the_oracles_interval_rung_by_rung_and_the_narrowest_that_covers():
    """width_floor: an oracle knowing the launch's std and reading the launches' mean off n = budget // B' seeds
    of one rung; its interval is √(1 + s²/(n σ_L²)) times the launches' own, and a rung whose mean is not the
    launches' covers less (here B' = 64, two of its std below): the floor is the narrowest rung that covers."""
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    pool = calibration.Pool("toy", 1024, 30, {64: [0.83, 0.85], 128: [0.85, 0.87], 1024: [0.86, 0.86]},
                            [0.85, 0.87])
    sigma = statistics.stdev([0.85, 0.87])
    floor = {r.batch_size: r for r in calibration.width_floor(pool, per_step=512)}
    assert sorted(floor) == [64, 128]  # the target's own size is no proxy
    assert (floor[128].seeds, floor[64].seeds) == (4, 8)
    assert floor[128].ratio == pytest.approx(math.sqrt(1 + 1 / 4)) and floor[128].coverage == pytest.approx(0.95, abs=1e-6)
    tau = sigma * math.sqrt(1 + 1 / 8)
    assert floor[64].ratio == pytest.approx(math.sqrt(1 + 1 / 8))
    assert floor[64].coverage == pytest.approx(phi(1.959964 - 0.02 / tau) - phi(-1.959964 - 0.02 / tau), abs=1e-5)
    row = calibration.floor_row(pool, 512, [])
    cells = [c.strip() for c in row.split("|")]
    assert cells[4] == f"{math.sqrt(1.25):.2f}× (B' = 128, 4 seeds)"  # B' = 64 is narrower but covers 0.73
    assert cells[5] == f"{math.sqrt(1.125):.2f}× (B' = 64, 8 seeds)"  # knowing the law, its offset is no harm


def test_the_seed_spread_floor_is_the_textbook_prediction_interval_exact_where_the_rung_is_the_launch():
    """seed_spread_floor: told the rung, the launch's spread read off the n seeds: m̂ ± t_{n−1}·s·√(1 + 1/n).
    Its mean half-width is t·√(1 + 1/n)·c4(n)·σ_B' (c4: E[s]/σ), it covers exactly 0.95 where the rung's seeds
    are distributed as the launches, less where its mean is off, and a rung the budget pays one seed of
    (no spread to read) is left out."""
    from scipy import stats

    pool = calibration.Pool("toy", 1024, 30, {64: [0.83, 0.85], 128: [0.85, 0.87], 256: [0.85, 0.87]},
                            [0.85, 0.87])
    floor = {r.batch_size: r for r in calibration.seed_spread_floor(pool, per_step=512)}
    assert sorted(floor) == [64, 128, 256]
    for b, n in ((64, 8), (128, 4), (256, 2)):
        c4 = math.sqrt(2 / (n - 1)) * math.gamma(n / 2) / math.gamma((n - 1) / 2)
        expected = stats.t.ppf(0.975, n - 1) * math.sqrt(1 + 1 / n) * c4 / 1.959964  # σ_B' = σ_L here
        assert floor[b].seeds == n and floor[b].ratio == pytest.approx(expected, rel=2e-3)
    assert floor[128].coverage == pytest.approx(0.95, abs=2e-3) and floor[256].coverage == pytest.approx(0.95, abs=2e-3)
    assert floor[64].coverage < 0.93  # its mean sits one launch std below the launches'
    assert sorted(r.batch_size for r in calibration.seed_spread_floor(pool, per_step=300)) == [64, 128]  # 256: one seed
    cells = [c.strip() for c in calibration.floor_row(pool, 512, []).split("|")]
    assert cells[7] == f"{floor[128].ratio:.2f}× (B' = 128, 4 seeds)"  # 256 × 2 covers too but is wider


def test_two_rungs_pooled_read_the_launch_with_their_pooled_spread_and_cover_where_they_are_the_launch():
    """pooled_pair_floor: every split of the budget over two adjacent rungs (n1 + n2 ≥ 4); where both rungs
    scatter as the launches around their mean the pooled prediction interval covers 0.95 and its mean
    half-width is t_{n−2}·√(1 + 1/n)·c4 at n − 2 degrees of freedom; a pair whose rungs sit below the
    launches covers less."""
    from scipy import stats

    pool = calibration.Pool("toy", 1024, 30, {32: [0.80, 0.82], 64: [0.85, 0.87], 128: [0.85, 0.87]}, [0.85, 0.87])
    pairs = {r.seeds: r for r in calibration.pooled_pair_floor(pool, per_step=512, draws=40000)}
    assert ((64, 2), (128, 3)) in pairs and ((64, 8), (128, 0)) not in pairs  # n2 ≥ 1
    assert all(n1 * b1 + n2 * b2 <= 512 and n1 + n2 >= 4 for (b1, n1), (b2, n2) in pairs)
    on = pairs[((64, 2), (128, 3))]
    c4 = math.sqrt(2 / 3) * math.gamma(2) / math.gamma(1.5)  # dof 3
    assert on.ratio == pytest.approx(stats.t.ppf(0.975, 3) * math.sqrt(1.2) * c4 / 1.959964, rel=0.02)
    assert on.coverage == pytest.approx(0.95, abs=0.01)
    assert pairs[((32, 4), (64, 6))].coverage < 0.9  # four of its ten seeds sit 3.5 launch stds low
