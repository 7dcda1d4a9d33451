"""The one training loop (`training.loop.train`) on a fake run: a 2-parameter linear model trained by SGD with
momentum on fixed data, its minibatches drawn from the global random state (which the loop must carry
across a resume). Cadence, the sums handed to `evaluate`, best-by-validation, bitwise resume, wall time,
divergence, damaged and foreign checkpoints, the time box; then the loop under the shells trial."""

import copy
import math
import time

import pytest
import torch

from gradalign.training import timebox
from gradalign.methods.divergence import accuracy_chance
from gradalign.errors import DivergenceError
from gradalign.training import loop
from gradalign.training.checkpoint import CheckpointWarning

pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")  # torch's JVP rules

STEPS, EVERY = 10, 2
FINGERPRINT = "fake run, seed 0"


class Interrupted(Exception):
    pass


class FakeRun:
    """y = x·(1.5, -0.5) + noise; step t: SGD on 4 rows drawn with torch.randint (the global generator)."""

    def __init__(
        self,
        seed: int = 0,
        interrupt_at: int | None = None,
        nan_from: int | None = None,
        nan_only_at: int | None = None,
        offsets: dict[int, float] | None = None,
        sleep: float = 0.0,
    ):
        torch.manual_seed(seed)
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(32, 2, generator=g, dtype=torch.float64)
        self.y = self.x @ torch.tensor([1.5, -0.5], dtype=torch.float64) + 0.1 * torch.randn(
            32, generator=g, dtype=torch.float64
        )
        self.x_val, self.y_val = self.x[:8] + 0.05, self.y[:8]
        self.model = torch.nn.Linear(2, 1, bias=False).double()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.interrupt_at, self.nan_from, self.nan_only_at = interrupt_at, nan_from, nan_only_at
        self.offsets, self.sleep = offsets or {}, sleep
        self.evaluations = []  # (t, sums, count, last) as evaluate received them
        self.states = {}  # the model's state at each evaluation

    def step(self, t: int) -> dict[str, torch.Tensor]:
        if t == self.interrupt_at:
            raise Interrupted(f"step {t}")
        if self.sleep:
            time.sleep(self.sleep)
        i = torch.randint(0, len(self.x), (4,))
        loss = (self.model(self.x[i])[:, 0] - self.y[i]).square().mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        loss = loss.detach()
        if (self.nan_from is not None and t >= self.nan_from) or t == self.nan_only_at:
            loss = loss * float("nan")
        return {"loss": loss, "t": torch.tensor(float(t), dtype=torch.float64)}

    def evaluate(self, t, sums, count, last):
        self.evaluations.append((t, dict(sums), count, {k: float(v) for k, v in last.items()}))
        self.states[t] = copy.deepcopy(self.model.state_dict())
        with torch.no_grad():
            val = float((self.model(self.x_val)[:, 0] - self.y_val).square().mean())
        return {"val": val + self.offsets.get(t, 0.0), "train": sums["loss"] / count}

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


def train(run: FakeRun, checkpoint=None, eval_at=None, **kw) -> loop.LoopResult:
    return loop.train(
        run,
        STEPS,
        eval_at=eval_at or loop.every(EVERY, STEPS),
        name="fake",
        checkpoint=checkpoint,
        run_fingerprint=kw.pop("run_fingerprint", FINGERPRINT),
        select="val",
        model=run.model,
        **kw,
    )


def assert_same_result(a: loop.LoopResult, b: loop.LoopResult, run_a: FakeRun, run_b: FakeRun) -> None:
    assert a.history == b.history
    assert a.best.keys() == b.best.keys() and (a.best["step"], a.best["value"]) == (b.best["step"], b.best["value"])
    assert all(torch.equal(a.best["state"][k], b.best["state"][k]) for k in a.best["state"])
    assert (a.steps_done, a.complete) == (b.steps_done, b.complete)
    for p, q in zip(run_a.model.parameters(), run_b.model.parameters()):
        assert torch.equal(p, q)
    assert all(
        torch.equal(u, v)
        for u, v in zip(
            run_a.optimizer.state_dict()["state"][0].values(), run_b.optimizer.state_dict()["state"][0].values()
        )
    )


@pytest.fixture(scope="module")
def reference():
    """One uninterrupted run without a checkpoint."""
    run = FakeRun()
    return train(run), run


# ---- cadence and what evaluate receives -------------------------------------------------------------------


def test_every_evaluates_every_nth_step_and_the_last():
    assert [t for t in range(1, 11) if loop.every(3, 10)(t)] == [3, 6, 9, 10]
    assert [t for t in range(1, 11) if loop.every(5, 10)(t)] == [5, 10]
    assert [t for t in range(1, 4) if loop.every(7, 3)(t)] == [3]


def test_default_cadence_and_the_sums_and_counts_passed_to_evaluate():
    run = FakeRun()
    out = loop.train(run, STEPS, eval_at=loop.every(3, STEPS), name="fake")
    assert out.history["step"] == [3, 6, 9, 10] and out.complete and out.steps_done == STEPS
    assert [e[0] for e in run.evaluations] == [3, 6, 9, 10]
    # the sums of each diagnostic since the previous evaluation, and how many steps they hold
    assert [(e[1]["t"], e[2]) for e in run.evaluations] == [(6.0, 3), (15.0, 3), (24.0, 3), (10.0, 1)]
    assert [e[3]["t"] for e in run.evaluations] == [3.0, 6.0, 9.0, 10.0]  # `last`: the step just taken
    assert all(isinstance(e[1]["loss"], float) for e in run.evaluations)
    assert out.history["train"] == [e[1]["loss"] / e[2] for e in run.evaluations]
    assert set(out.history) == {"step", "val", "train"} and out.best == {}  # no `select`: no best kept


def test_custom_cadence():
    run = FakeRun()
    out = loop.train(run, STEPS, eval_at=lambda t: t in (1, 5), name="fake")
    assert out.history["step"] == [1, 5]
    assert [(e[1]["t"], e[2]) for e in run.evaluations] == [(1.0, 1), (14.0, 4)]


# ---- best by validation ----------------------------------------------------------------------------------


def test_best_is_the_lowest_validation_value_and_its_state():
    offsets = {2: 0.0, 4: -100.0, 6: 0.0, 8: -50.0, 10: 0.0}  # the lowest value is at step 4, not the last
    run = FakeRun(offsets=offsets)
    out = train(run)
    assert out.history["step"] == [2, 4, 6, 8, 10]
    assert out.best["step"] == 4 and out.best["value"] == out.history["val"][1] == min(out.history["val"])
    for name, value in run.states[4].items():
        assert torch.equal(out.best["state"][name], value)
    assert not torch.equal(out.best["state"]["weight"], run.model.weight.detach())  # a copy, not the live model
    plain = FakeRun()
    out = train(plain)
    assert out.best["value"] == min(out.history["val"])
    assert out.best["step"] == out.history["step"][out.history["val"].index(out.best["value"])]


# ---- checkpoint and resume -------------------------------------------------------------------------------


@pytest.mark.parametrize("checkpoint_every, interrupt_at, saved_at", [(0, 7, 6), (3, 5, 3), (3, 10, 9)])
def test_resume_is_bitwise_identical(reference, tmp_path, checkpoint_every, interrupt_at, saved_at):
    """checkpoint_every = 3 saves between evaluations: the partial sums and counts must come back too."""
    ref_out, ref_run = reference
    path = tmp_path / "run.pt"
    first = FakeRun(interrupt_at=interrupt_at)
    with pytest.raises(Interrupted):
        train(first, path, checkpoint_every=checkpoint_every)
    assert path.exists()
    run = FakeRun()
    out = train(run, path, checkpoint_every=checkpoint_every)
    assert_same_result(out, ref_out, run, ref_run)
    # the resumed call took steps saved_at + 1 .. 10 and evaluated with the same sums as the whole run
    resumed_evals = [e for e in ref_run.evaluations if e[0] > saved_at]
    assert run.evaluations == resumed_evals


def test_train_seconds_include_the_interrupted_part(tmp_path):
    path, sleep = tmp_path / "run.pt", 0.02
    with pytest.raises(Interrupted):
        train(FakeRun(interrupt_at=7, sleep=sleep), path)  # checkpoint after step 6
    begun = time.perf_counter()
    out = train(FakeRun(sleep=sleep), path)
    second_part = time.perf_counter() - begun
    assert out.train_seconds > second_part
    assert out.train_seconds >= STEPS * sleep  # steps 1-6 from the checkpoint, 7-10 from this call


# ---- divergence ------------------------------------------------------------------------------------------


def test_divergence_names_the_step_and_the_quantity():
    run = FakeRun(nan_from=5)
    with pytest.raises(DivergenceError, match=r"fake diverged at step 6: loss = nan"):
        train(run)
    assert [e[0] for e in run.evaluations] == [2, 4]  # no evaluation of the diverged window

    transient = FakeRun(nan_only_at=5)  # the last step is finite again: the window's mean is not
    with pytest.raises(DivergenceError, match=r"fake diverged at step 6: mean loss = nan"):
        train(transient)


class ChanceRun(FakeRun):
    """FakeRun whose evaluation also reports an accuracy in % (chance 10) and a loss, given per step."""

    def __init__(self, accuracies: dict[int, float], losses: dict[int, float] | None = None, **kw):
        super().__init__(**kw)
        self.accuracies, self.losses = accuracies, losses or {}

    def evaluate(self, t, sums, count, last):
        return {
            **super().evaluate(t, sums, count, last),
            "acc": self.accuracies[t],
            "val_loss": self.losses.get(t, 1.0),
        }


ACC = accuracy_chance("acc", 10)


def test_a_metric_back_at_chance_after_it_had_learned_is_a_divergence():
    run = ChanceRun({2: 30.0, 4: 80.0, 6: 15.0, 8: 90.0, 10: 90.0})
    with pytest.raises(
        DivergenceError, match=r"^fake diverged at step 6: acc = 15, back at chance \(10; it had reached 80\)"
    ):
        train(run, chance=(ACC,))
    never = ChanceRun({2: 10.0, 4: 12.0, 6: 11.0, 8: 9.0, 10: 14.0})  # a short run that never left chance
    out = train(never, chance=(ACC,))
    assert out.complete and out.history["acc"] == [10.0, 12.0, 11.0, 9.0, 14.0]
    assert train(ChanceRun({2: 30.0, 4: 80.0, 6: 15.0, 8: 90.0, 10: 90.0})).complete  # no chance level given


def test_started_is_read_from_the_checkpointed_history_on_resume(tmp_path):
    accuracies, path = {2: 30.0, 4: 80.0, 6: 15.0, 8: 90.0, 10: 90.0}, tmp_path / "run.pt"
    with pytest.raises(Interrupted):
        train(ChanceRun(accuracies, interrupt_at=5), path, chance=(ACC,))  # checkpoint after step 4 (acc 80)
    with pytest.raises(DivergenceError, match="fake diverged at step 6: acc = 15, back at chance"):
        train(ChanceRun(accuracies), path, chance=(ACC,))


def test_an_exploded_or_non_finite_evaluated_loss_is_a_divergence():
    accuracies = dict.fromkeys(range(2, 11, 2), 50.0)
    with pytest.raises(DivergenceError, match=r"^fake diverged at step 4: val_loss = 1e\+07 \(exploded"):
        train(ChanceRun(accuracies, {4: 1e7}))
    with pytest.raises(DivergenceError, match=r"^fake diverged at step 8: val_loss = nan"):
        train(ChanceRun(accuracies, {8: math.nan}))
    assert train(ChanceRun(accuracies, {4: 9e5})).complete


# ---- the command's time box --------------------------------------------------------------------------------


def test_a_run_does_not_begin_once_the_box_has_closed(tmp_path, monkeypatch):
    run = FakeRun()
    with timebox.time_box(1.0):
        monkeypatch.setattr(timebox, "seconds_left", lambda: -1.0)
        with pytest.raises(timebox.TimeBoxSpent, match="the time box closed before fake could begin"):
            train(run, tmp_path / "run.pt")
    assert run.evaluations == [] and not (tmp_path / "run.pt").exists()


@pytest.mark.parametrize("checkpoint_every, stopped_at", [(0, 2), (3, 3)])
def test_a_boxed_run_stops_checkpointed_and_resumes_bitwise(
    reference, tmp_path, monkeypatch, checkpoint_every, stopped_at
):
    """A box nearly spent as the run begins: the run stops after its first window (an evaluation, or a checkpoint
    between evaluations), its checkpoint written, and raises; outside the box it resumes to the uninterrupted run."""
    ref_out, ref_run = reference
    path = tmp_path / "run.pt"
    with timebox.time_box(1.0), monkeypatch.context() as patch:
        patch.setattr(timebox, "seconds_left", lambda: 1e-9)
        with pytest.raises(
            timebox.TimeBoxSpent, match=rf"time box: fake stopped after step {stopped_at} of 10, checkpointed"
        ):
            train(FakeRun(), path, checkpoint_every=checkpoint_every)
    assert path.exists()
    run = FakeRun()
    out = train(run, path, checkpoint_every=checkpoint_every)
    assert_same_result(out, ref_out, run, ref_run)
    assert run.evaluations == [e for e in ref_run.evaluations if e[0] > stopped_at]


def test_a_boxed_run_without_a_checkpoint_is_not_stopped_midway(reference, monkeypatch):
    ref_out, ref_run = reference
    run = FakeRun()
    with timebox.time_box(1.0):
        monkeypatch.setattr(timebox, "seconds_left", lambda: 1e-9)  # its work would be lost: it finishes
        out = train(run)
    assert_same_result(out, ref_out, run, ref_run)


# ---- damaged and foreign checkpoints ------------------------------------------------------------------------


def test_truncated_checkpoint_warns_and_the_run_starts_over(reference, tmp_path):
    ref_out, ref_run = reference
    path = tmp_path / "run.pt"
    with pytest.raises(Interrupted):
        train(FakeRun(interrupt_at=7), path)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    run = FakeRun()
    with pytest.warns(CheckpointWarning, match="starting the run over"):
        out = train(run, path)
    assert [e[0] for e in run.evaluations] == [2, 4, 6, 8, 10]  # from step 1
    assert_same_result(out, ref_out, run, ref_run)


def test_checkpoint_of_another_run_is_set_aside_and_the_run_starts_fresh(tmp_path, reference):
    ref_out, ref_run = reference
    path = tmp_path / "run.pt"
    with pytest.raises(Interrupted):
        train(FakeRun(interrupt_at=7), path)
    before = path.read_bytes()
    run = FakeRun()
    with pytest.warns(CheckpointWarning, match="belongs to another run .*; set aside as run.pt.other-"):
        out = train(run, path, run_fingerprint="another fingerprint")
    assert [e[0] for e in run.evaluations] == [2, 4, 6, 8, 10]  # from step 1
    assert_same_result(out, ref_out, run, ref_run)
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("run.pt.other-")]
    assert len(aside) == 1 and aside[0].read_bytes() == before  # kept intact for the run it belongs to


def test_a_checkpoint_the_run_cannot_restore_is_set_aside_and_the_run_starts_fresh(tmp_path, reference):
    """A GPU window's carried checkpoint resumed on a CPU: torch refuses the CUDA generator state. The run is put
    back as it was, the checkpoint set aside, and the run trains from step 1 to the reference's result."""

    class OtherDevice(FakeRun):
        def load_state_dict(self, state: dict) -> None:
            if state["model"]["weight"].dtype == torch.float64 and "fresh" not in state:
                self.model.weight.data.fill_(123.0)  # a partial load before torch refuses
                raise RuntimeError(
                    "Expected a CPUGeneratorImplState of size 5056 but found the input RNG state size to be 16"
                )
            super().load_state_dict(state)

        def state_dict(self) -> dict:
            return {**super().state_dict(), "fresh": True}

    ref_out, ref_run = reference
    path = tmp_path / "run.pt"
    with pytest.raises(Interrupted):
        train(FakeRun(interrupt_at=7), path)
    run = OtherDevice()
    with pytest.warns(CheckpointWarning, match="cannot be restored on this machine .*set aside as run.pt.unrestorable"):
        out = train(run, path)
    assert [e[0] for e in run.evaluations] == [2, 4, 6, 8, 10]  # from step 1
    assert_same_result(out, ref_out, run, ref_run)


# ---- the time box ----------------------------------------------------------------------------------------


def test_max_evals_stops_early_and_a_second_call_completes_the_run(reference, tmp_path):
    ref_out, ref_run = reference
    path = tmp_path / "run.pt"
    run = FakeRun()
    out = train(run, path, max_evals=2)
    assert not out.complete and out.steps_done == 4 and out.history["step"] == [2, 4]
    assert out.history["val"] == ref_out.history["val"][:2]
    run = FakeRun()
    out = train(run, path, max_evals=10)
    assert out.complete and out.steps_done == STEPS
    assert_same_result(out, ref_out, run, ref_run)


# ---- the loop under the shells trial ------------------------------------------------------------------------


def _shells_trial(method: str, **settings):
    from gradalign.data.shells import make_shells
    from gradalign.training.shells import ShellsTrialSettings, shells_trial

    data = make_shells(d=5, n_labeled=100, n_unlabeled=200, n_test=150, seed=0)
    s = ShellsTrialSettings(steps=20, batch=16, eval_every=10, hessian_points=100, lanczos_iters=5, **settings)
    return shells_trial(data, method, s, seed=0)


@pytest.mark.parametrize("method", ["supervised", "lga"])
def test_shells_trial_whose_parameters_overflow_raises_divergence_error(method):
    """Not numpy's LinAlgError from the Hessian of a NaN model: the run stops at the first evaluation."""
    with pytest.raises(DivergenceError, match=rf"shells {method} diverged at step 0: test_loss = nan"):
        _shells_trial(method, lr=1e10, alpha_w=1e6)


@pytest.mark.parametrize("method", ["supervised", "lga"])
def test_shells_trial_with_a_huge_learning_rate_raises_divergence_error(method):
    """Not a silently huge loss either: a test loss far above chance (ln 5) is a divergence."""
    with pytest.raises(DivergenceError, match=rf"shells {method} diverged at step \d+: "):
        _shells_trial(method, lr=1e6)  # today: test losses of ~1e29 after the first step, returned as curves
