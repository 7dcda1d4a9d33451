"""LGA's settings on the pages and its ε-dominated share (issue 47): the share against hand-computed cases and as
`lga_step` records it, the settings rows (every field, paper or our choice), the benchmark's summary where runs
lack the share (not recorded), and the shells study's further ε_norm arm (its own units, the trials' keys
untouched)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from gradalign.errors import ConfigError
from gradalign.experiments.lga import shells as study
from gradalign.experiments.lga.settings_table import (
    SOURCES,
    benchmark_settings,
    markdown_table,
    settings_rows,
    shells_settings,
)
from gradalign.experiments.lga.shells_config import ShellsStudyConfig
from gradalign.experiments.lga.ssl_runs import SSLBenchConfig, _lga_diagnostics
from gradalign.methods.lga import LGASettings, eps_dominated_share, init_lga, lga_step


# ---- the ε-dominated share ------------------------------------------------------------------------------------


def test_share_on_a_hand_computed_tensor():
    # sqrt(EMA(v⁴)) = 0, 1e-6, 1e-3, 1: ε_norm = 1e-3 exceeds the first two only (equal is not "exceeds")
    ema_v4 = torch.tensor([0.0, 1e-12, 1e-6, 1.0], dtype=torch.float64)
    assert float(eps_dominated_share(ema_v4, 1e-3)) == 0.5
    assert float(eps_dominated_share(ema_v4, 2.0)) == 1.0
    assert float(eps_dominated_share(ema_v4, 0.0)) == 0.0
    assert float(eps_dominated_share(torch.tensor([1e-8] * 3 + [1.0] * 7), 1e-3)) == pytest.approx(0.3)


def test_lga_step_records_the_share_of_its_own_normaliser():
    """After step 1 the bias-corrected EMA(v⁴) is v⁴ itself, so the share is that of |v| = |g_ℓ − g_u| below
    sqrt(ε_norm), read from the state and recomputed by hand."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    settings = LGASettings(eps_norm=1e-3)
    state = init_lga(model, 6, 2, settings)
    x_l, y_l, x_u = torch.randn(4, 3), torch.tensor([0, 1, 0, 1]), torch.randn(3, 3)
    out = lga_step(model, state, x_l, y_l, x_u, torch.tensor([0, 2, 4]))
    ema = state.ema_v4 / (1 - settings.norm_ema_decay)
    by_hand = sum(float(e) ** 0.5 < 1e-3 for e in ema) / len(ema)
    assert float(out["eps_dominated"]) == pytest.approx(by_hand)
    assert 0 < by_hand < 1  # the case tells the two sides apart


# ---- the settings rows ------------------------------------------------------------------------------------------


def test_every_field_has_a_source_and_a_row():
    fields = [f.name for f in dataclasses.fields(LGASettings)]
    assert set(SOURCES) == set(fields)
    rows = settings_rows(LGASettings(), "benchmark")
    assert [r["setting"] for r in rows] == fields


def test_only_what_the_paper_states_is_marked_stated():
    rows = {r["setting"]: r for r in settings_rows(LGASettings(), "shells")}
    assert {name for name, r in rows.items() if r["stated"]} == {"task", "optimizer"}
    for name in ("eps_norm", "grad_ema_decay", "norm_ema_decay", "adam_betas", "labeled_weight"):
        assert rows[name]["source"].startswith("our choice"), name
    assert rows["grad_ema_decay"]["value"] == "0.9" and rows["norm_ema_decay"]["value"] == "0.999"
    assert rows["adam_betas"]["value"] == "(0.9, 0.999)"


def test_a_value_other_than_the_stated_one_is_our_choice_with_the_papers():
    rows = {r["setting"]: r for r in settings_rows(LGASettings(optimizer="sgd"), "benchmark")}
    assert not rows["optimizer"]["stated"]
    assert rows["optimizer"]["source"].startswith("our choice (the paper: adam")


def test_unknown_section_is_refused():
    with pytest.raises(ValueError, match="unknown section"):
        settings_rows(LGASettings(), "linear")


def test_settings_rebuilt_from_record_configs():
    bench = benchmark_settings(SSLBenchConfig().to_dict())
    assert (bench.alpha_w, bench.eps_norm, bench.labeled_weight(7), bench.check_every) == (1e-2, 1e-3, 1.0, 0)
    assert (bench.grad_ema_decay, bench.norm_ema_decay) == (0.9, 0.999)
    cfg = ShellsStudyConfig().to_dict()
    trial = shells_settings(cfg)
    assert (trial.eps_norm, trial.labeled_weight(7), trial.alpha_theta) == (1e-3, 3.0, 1e-3)
    assert shells_settings(cfg, 1e-6).eps_norm == 1e-6
    table = markdown_table(settings_rows(trial, "shells"))
    assert "| 3 (constant) |" in table and "EMA(v⁴) decay" in table


# ---- the benchmark's summary: not recorded where runs lack the share --------------------------------------------


def _run(history: dict) -> dict:
    return {"history": {"step": [1, 2], **history}}


def test_summary_reads_the_share_only_where_every_run_recorded_it():
    recorded = [_run({"eps_dominated": [0.9, 0.5]}), _run({"eps_dominated": [0.8, 0.3]})]
    assert _lga_diagnostics(recorded)["eps_dominated"] == pytest.approx(0.4)
    mixed = [recorded[0], _run({})]
    assert "eps_dominated" not in _lga_diagnostics(mixed)
    assert "eps_dominated" not in _lga_diagnostics([_run({}), _run({})])


# ---- the shells study's further ε arm ---------------------------------------------------------------------------


def test_the_eps_arm_leaves_the_trials_keys_and_the_record_key_of_a_study_without_it():
    plain, armed = ShellsStudyConfig(), ShellsStudyConfig(eps_arms=(1e-6,))
    assert "eps_arms" not in plain.to_dict() and armed.to_dict()["eps_arms"] == [1e-6]
    assert [study.trial_unit(armed, k).key for k in range(3)] == [study.trial_unit(plain, k).key for k in range(3)]
    units = study.study_units(armed)
    assert len(units) == 2 * armed.trials and len(study.study_units(plain)) == plain.trials
    arm = units[armed.trials]
    assert arm.kind == "lga.shells-eps" and arm.spec["trial"]["eps_norm"] == 1e-6 and arm.spec["arm"] == "lga"
    assert arm.spec["seed"] == study.trial_unit(armed, 0).spec["seed"]  # the same data set as trial 0


def test_an_eps_arm_at_the_trials_own_eps_norm_is_refused():
    with pytest.raises(ConfigError, match="eps_arms"):
        ShellsStudyConfig(eps_arms=(1e-3,))
    with pytest.raises(ConfigError, match="eps_arms"):
        ShellsStudyConfig(eps_arms=(1e-6, 1e-6))


def test_the_study_at_smoke_shows_the_arm_beside_the_trials_without_changing_its_checks(tmp_path, monkeypatch):
    from gradalign.records.results import ResultStore
    from gradalign.records.runner import run

    monkeypatch.setenv("GRADALIGN_CACHE", str(tmp_path / "cache"))
    plain = run("lga.fig3", "smoke", store=ResultStore(tmp_path / "a"), device="cpu")
    armed = run("lga.fig3", "smoke", {"eps_arms": [1e-6]}, store=ResultStore(tmp_path / "b"), device="cpu")
    arm = armed["metrics"]["eps_arms"]["lga_eps=1e-06"]
    assert arm["eps_norm"] == 1e-6 and 0 <= arm["mean_alignment"] <= 1 and "against_supervised" in arm
    assert set(armed["metrics"]["per_trial"]) == {"supervised", "lga"} and set(armed["checks"]) == set(plain["checks"])
    assert armed["metrics"]["mean_alignment"] == plain["metrics"]["mean_alignment"]  # the trials are the same runs
    assert "lga_eps=1e-06/alignment/mean" in armed["curves"] and "eps_arms" not in plain["metrics"]


def test_the_arm_is_in_every_preset_but_smoke():
    from gradalign.experiments import get

    for element_id in ("lga.fig3", "lga.fig4"):
        assert get(element_id).resolve("cpu").eps_arms == study.EPS_ARMS == (1e-6,)
        assert get(element_id).resolve("smoke").eps_arms == ()
