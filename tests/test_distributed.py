"""Data-parallel training (`training.distributed`) on the CPU: two gloo processes under torchrun against one.

The run is a 2-layer MLP regression trained by SGD with momentum, its global batch drawn from a seeded
IndexStream plus input noise drawn for the whole global batch from torch's global generator (so a resume must
carry the random state); each rank trains on its slice. This file is also the torchrun worker: run as a script
it trains in the phase named on its command line and saves what each rank saw. Two launches serve every test:
"first" (a run seeded per rank, refused; an uninterrupted run; the first half of a checkpointed run) and
"resume" (its second half, both ranks resuming from rank 0's checkpoint).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from gradalign.errors import ConfigError
from gradalign.training import loop
from gradalign.training.distributed import (
    DistributedContext,
    data_parallel,
    init_distributed,
    mean_over_ranks,
    rank_batch_size,
    rank_checkpoint,
    rank_share,
    scratch_checkpoint,
    train_data_parallel,
)
from gradalign.training.streams import IndexStream

ROWS, FEATURES, HIDDEN, GLOBAL_BATCH = 64, 4, 8, 16
STEPS, EVERY, FIRST_PART_EVALS = 12, 3, 2  # the first part stops after step 6
FINGERPRINT = "distributed test run, seed 0"
# Two ranks average two 8-row gradient means where one process takes one 16-row mean: float32 rounding only.
# Observed here: 7e-8 at most in the parameters, 2e-7 relative in the losses; the tolerance leaves room for
# other BLAS kernels.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
CPU = torch.device("cpu")


class ShardedRegression:
    """y = sin(sum x) on 64 fixed rows; step t: this rank's slice of the global batch (plus its slice of the
    global batch's input noise), mean squared error, DDP's averaged gradient, SGD with momentum."""

    def __init__(self, context: DistributedContext, seed: int = 0, global_batch: int = GLOBAL_BATCH):
        rank_batch_size(global_batch, context.world_size)  # ConfigError before anything is built
        self.context = context
        torch.manual_seed(seed)
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(ROWS, FEATURES, generator=g)
        self.y = self.x.sum(1, keepdim=True).sin()
        self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, 1))
        self.model = data_parallel(self.net, context)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9)
        self.stream = IndexStream(ROWS, global_batch, seed)

    def step(self, t: int) -> dict[str, torch.Tensor]:
        rows = self.stream.next()
        noise = 0.05 * torch.randn(len(rows), FEATURES)  # for the global batch, then sliced: as one process draws it
        mine = rank_share(rows, self.context)
        loss = (self.model(self.x[mine] + rank_share(noise, self.context)) - self.y[mine]).square().mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": mean_over_ranks(loss.detach(), self.context)}

    def evaluate(self, t, sums, count, last) -> dict[str, float]:
        with torch.no_grad():
            full = float((self.net(self.x) - self.y).square().mean())
        return {"train loss": full, "step loss": sums["loss"] / count}

    def state_dict(self) -> dict:
        return {
            "net": self.net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "stream": self.stream.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.stream.load_state_dict(state["stream"])


def train(run: ShardedRegression, context: DistributedContext, **options) -> loop.LoopResult:
    return train_data_parallel(
        run, STEPS, context=context, eval_at=loop.every(EVERY, STEPS), name="ddp test", **options
    )


def outcome(run: ShardedRegression, result: loop.LoopResult, **extra) -> dict:
    return {
        "history": result.history,
        "steps_done": result.steps_done,
        "complete": result.complete,
        "params": {k: v.clone() for k, v in run.net.state_dict().items()},
        **extra,
    }


# ---- the worker: `python -m torch.distributed.run ... tests/test_distributed.py PHASE OUT` ----


def worker(phase: str, out: Path) -> None:
    torch.set_num_threads(1)
    writes = []  # every checkpoint path the loop writes on this rank
    save = loop.save_checkpoint

    def recorded_save(path, *args, **kwargs):
        writes.append(str(path))
        return save(path, *args, **kwargs)

    loop.save_checkpoint = recorded_save
    checkpoint = out / "checkpoints" / "run.ckpt"
    with init_distributed(backend="gloo") as context:
        saved = {"rank": context.rank, "world_size": context.world_size, "refused": None}
        stop = {}
        if phase == "first":
            try:
                train(ShardedRegression(context, seed=context.rank), context)
            except ConfigError as err:
                saved["refused"] = str(err)
            uninterrupted = ShardedRegression(context)
            saved["full"] = outcome(uninterrupted, train(uninterrupted, context))
            stop = {"max_evals": FIRST_PART_EVALS}
        run = ShardedRegression(context)
        part = train(run, context, checkpoint=checkpoint, run_fingerprint=FINGERPRINT, **stop)
        saved[phase] = outcome(run, part, writes=list(writes))
    torch.save(saved, out / f"{phase}-rank{saved['rank']}.pt")


def launch(phase: str, out: Path) -> list[dict]:
    """Two gloo processes under torchrun (--standalone picks a free port); what each rank saved."""
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARIABLES}
    env.update(GRADALIGN_PROGRESS="0", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    done = subprocess.run([*command, __file__, phase, str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"torchrun {phase} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return [torch.load(out / f"{phase}-rank{r}.pt", weights_only=True) for r in range(2)]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    first = launch("first", out)
    files_after_first = sorted(p.name for p in (out / "checkpoints").iterdir())
    resumed = launch("resume", out)
    return {"first": first, "resume": resumed, "files_after_first": files_after_first, "out": out}


@pytest.fixture
def single_process(monkeypatch, one_thread):
    for name in TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with init_distributed(backend="gloo") as context:
        yield context


def assert_params(a: dict, b: dict, **tolerance) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if tolerance:
            torch.testing.assert_close(a[key], b[key], **tolerance)
        else:
            assert torch.equal(a[key], b[key]), key


# ---- the tests ----


def test_two_processes_train_as_one_process_with_the_same_global_batch(two_processes, single_process):
    alone = ShardedRegression(single_process)
    reference = outcome(alone, train(alone, single_process))
    ranks = [saved["full"] for saved in two_processes["first"]]
    assert [saved["world_size"] for saved in two_processes["first"]] == [2, 2]
    assert ranks[0]["history"] == ranks[1]["history"]  # every rank saw the same losses
    assert_params(ranks[0]["params"], ranks[1]["params"])  # and holds the same parameters, bit for bit
    assert ranks[0]["history"]["step"] == reference["history"]["step"] == [3, 6, 9, 12]
    for key in ("train loss", "step loss"):
        torch.testing.assert_close(
            torch.tensor(ranks[0]["history"][key]), torch.tensor(reference["history"][key]), **TOLERANCE
        )
    assert_params(ranks[0]["params"], reference["params"], **TOLERANCE)
    assert reference["history"]["train loss"][-1] < reference["history"]["train loss"][0]  # it does learn


def test_a_run_seeded_per_rank_is_refused_on_every_rank(two_processes):
    for saved in two_processes["first"]:
        assert "seed every rank identically" in saved["refused"]


def test_only_rank_zero_writes_the_checkpoint_and_every_rank_resumes_from_it(two_processes):
    out, (first0, first1), (resume0, resume1) = two_processes["out"], two_processes["first"], two_processes["resume"]
    real = out / "checkpoints" / "run.ckpt"
    scratch = scratch_checkpoint(real, 1)
    assert first0["first"]["steps_done"] == 2 * EVERY and not first0["first"]["complete"]
    # after steps 3 and 6, then (resumed at step 7) after step 9: rank 0 writes the real file, rank 1 its scratch
    assert first0["first"]["writes"] == [str(real)] * 2 and resume0["resume"]["writes"] == [str(real)]
    assert first1["first"]["writes"] == [str(scratch)] * 2 and resume1["resume"]["writes"] == [str(scratch)]
    assert two_processes["files_after_first"] == ["run.ckpt"]
    assert not scratch.exists()
    for resumed in (resume0["resume"], resume1["resume"]):
        assert resumed["complete"] and resumed["steps_done"] == STEPS
        assert resumed["history"] == first0["full"]["history"]  # the history before the stop came from the file
        assert_params(resumed["params"], first0["full"]["params"])  # bitwise: the uninterrupted two-process run


def test_rank_checkpoint_hands_rank_zero_the_file_and_the_others_a_copy_they_delete(tmp_path):
    """In one process, with the barriers no-ops (no process group), the paths each rank would get."""
    real, ranks = tmp_path / "run.ckpt", [DistributedContext(r, 2, r, CPU) for r in range(2)]
    scratch = scratch_checkpoint(real, 1)
    scratch.write_bytes(b"a stale scratch file of an earlier launch")
    with rank_checkpoint(real, ranks[1]) as path:  # rank 0 has no file yet: nothing to resume
        assert path == scratch and not scratch.exists()
    real.write_bytes(b"rank 0's checkpoint")
    with rank_checkpoint(real, ranks[0]) as path:
        assert path == real
    with rank_checkpoint(real, ranks[1]) as path:
        assert path == scratch and scratch.read_bytes() == b"rank 0's checkpoint"
        path.write_bytes(b"what rank 1's loop writes")
    assert not scratch.exists() and real.read_bytes() == b"rank 0's checkpoint"
    with rank_checkpoint(None, ranks[1]) as path:
        assert path is None


def test_one_process_without_torchrun_is_a_world_of_one(single_process):
    assert (single_process.rank, single_process.world_size, single_process.device) == (0, 1, CPU)
    assert not dist.is_initialized()
    run = ShardedRegression(single_process)
    assert run.model is run.net  # no DDP wrapper
    ours = outcome(run, train(run, single_process))
    plain = ShardedRegression(single_process)
    theirs = outcome(plain, loop.train(plain, STEPS, eval_at=loop.every(EVERY, STEPS), name="plain"))
    assert ours["history"] == theirs["history"]
    assert_params(ours["params"], theirs["params"])


def test_one_process_checkpoints_to_the_real_path(single_process, tmp_path):
    path = tmp_path / "run.ckpt"
    run = ShardedRegression(single_process)
    part = train(run, single_process, checkpoint=path, run_fingerprint=FINGERPRINT, max_evals=FIRST_PART_EVALS)
    assert not part.complete and sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]
    resumed = ShardedRegression(single_process)
    assert train(resumed, single_process, checkpoint=path, run_fingerprint=FINGERPRINT).steps_done == STEPS


@pytest.mark.parametrize(
    "variables, message",
    [
        ({"RANK": "3", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK and LOCAL_RANK must be below WORLD_SIZE=2"),
        ({"RANK": "0", "WORLD_SIZE": "abc", "LOCAL_RANK": "0"}, "WORLD_SIZE must be a non-negative integer"),
        ({"RANK": "-1", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "RANK must be a non-negative integer"),
        ({"RANK": "0", "WORLD_SIZE": "0", "LOCAL_RANK": "0"}, "WORLD_SIZE must be at least 1"),
        ({"RANK": "1", "WORLD_SIZE": "2"}, "LOCAL_RANK missing"),
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_PORT": "29500"}, "MASTER_ADDR is not set"),
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "x", "MASTER_PORT": "port"}, "MASTER_PORT"),
    ],
)
def test_an_inconsistent_environment_is_a_one_line_error_before_any_compute(monkeypatch, variables, message):
    for name in TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message) as caught:
        init_distributed(backend="gloo")
    assert "\n" not in str(caught.value)
    assert not dist.is_initialized()


def test_a_bad_backend_is_refused(monkeypatch):
    for name in TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="unknown backend 'mpi'"):
        init_distributed(backend="mpi")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="needs CUDA"):
            init_distributed(backend="nccl")


def test_a_global_batch_not_divisible_by_the_world_is_refused_before_any_compute():
    third = DistributedContext(rank=2, world_size=3, local_rank=2, device=CPU)
    with pytest.raises(ConfigError, match="global batch 16 does not split evenly over 3 processes"):
        ShardedRegression(third)
    with pytest.raises(ConfigError, match="global batch 2 does not split evenly over 4 processes"):
        rank_batch_size(2, 4)
    assert rank_share(torch.arange(12), third).tolist() == [8, 9, 10, 11]


def test_a_time_box_by_wall_clock_is_refused_with_several_processes():
    second = DistributedContext(rank=1, world_size=2, local_rank=1, device=CPU)
    with pytest.raises(ConfigError, match="use max_evals"):
        train_data_parallel(None, STEPS, context=second, eval_at=loop.every(EVERY, STEPS), name="x", time_limit_s=5)


if __name__ == "__main__":
    worker(sys.argv[1], Path(sys.argv[2]))
