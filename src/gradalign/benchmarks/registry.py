"""Every benchmark `gradalign bench` knows, its sizes (full, and `quick` for tests), and the project's goals.

The goals are those of the issue "speed and scale": targets of this project, not claims of the papers. SGR's
activation memory is measured once, by the experiment `sgr.mem` (exact counts, and `torch.cuda.max_memory_allocated`
on a GPU), whose record holds its targets. A goal names the device kind it is set for; a measurement on the other
kind is shown without one.
"""

from __future__ import annotations

from gradalign.benchmarks.records import Benchmark, Goal


def _lga_step(device, quick: bool) -> dict:
    from gradalign.benchmarks.lga_step import measure_lga_cost

    if quick:
        return measure_lga_cost(device, width=4, batch_size=4, n_unlabeled=64, image=8, warmup=1, repeats=2)
    return measure_lga_cost(device)  # the small CNN at width 32, batches of 50 + 50, 32 x 32 images


def _metagrad_step(device, quick: bool) -> dict:
    from gradalign.benchmarks.metagrad_step import measure_meta_step

    if quick:
        return measure_meta_step(device, width=0.125, batch=4, size=12, repeats=1)
    return measure_meta_step(device, width=0.25, batch=32, size=28, repeats=9)


def _sgr_step(device, quick: bool) -> dict:
    from gradalign.benchmarks.sgr_step import measure_sgr_step

    size = dict(batch=4, size=8, repeats=1) if quick else dict(batch=128, size=32, repeats=5)
    by_k = {str(k): measure_sgr_step(device, k, **size) for k in (16, 2)}
    return {
        "by_K": by_k,
        **{f"sgr_over_layerwise_k{k}": by_k[k]["sgr_over_layerwise"] for k in by_k},
        **{f"layerwise_over_global_bp_k{k}": by_k[k]["layerwise_over_global_bp"] for k in by_k},
    }


def _batched_trials(device, quick: bool) -> dict:
    from gradalign.benchmarks.batched_trials import measure_batched_trials

    if quick:
        return measure_batched_trials(trials=3, steps=5, device=device, repeats=1, n=256, d=8, batch=16)
    return measure_batched_trials(trials=25, steps=300, device=device, repeats=5)


def _wrn_throughput(device, quick: bool) -> dict:
    import torch

    from gradalign.benchmarks.wrn_throughput import measure_wrn_throughput

    if quick:
        return measure_wrn_throughput(
            device, batch=4, steps=1, warmup=1, repeats=1, n_images=16, image=8, workers=1, compile_model=False
        )
    if torch.device(device).type == "cuda":
        return measure_wrn_throughput(device, batch=128, steps=50, warmup=10, repeats=5, n_images=50_000, workers=4)
    return measure_wrn_throughput(device, batch=64, steps=4, warmup=2, repeats=3, n_images=2000, workers=2)


def _fast_path(device, quick: bool) -> dict:
    from gradalign.benchmarks.fast_path import measure_fast_path

    if quick:
        return measure_fast_path(device, ("small_cnn_w16", "mlp_1024"), steps=1, warmup=1, repeats=1, scale=0.05)
    return measure_fast_path(device)


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "lga_step",
            "one LGA step against one Pseudo-Label step; the JVP w-gradient against its double backward",
            _lga_step,
            {
                "lga_over_pseudo_label": "time of one LGA step / one Pseudo-Label step",
                "jvp_over_double_backward_time": "time of the JVP w-gradient / the double-backward one",
                "jvp_over_double_backward_memory": "peak memory of the JVP w-gradient / the double-backward one",
            },
            (Goal("lga_over_pseudo_label", "<=", 1.6, "cpu"), Goal("lga_over_pseudo_label", "<=", 1.4, "cuda")),
            "Small CNN (3 conv + BN, widths 32/64/128), 50 labeled + 50 unlabeled 32 x 32 images, fixed batches",
            "lga.alg1",
        ),
        Benchmark(
            "metagrad_step",
            "the meta-gradient by forward mode (JVP) against the code's finite difference",
            _metagrad_step,
            {
                "jvp_over_fd": "time of the JVP pseudo-label gradient / the finite difference",
                "exact_over_fd": "time of the exact meta-gradient (Algorithm 1) / the finite difference",
            },
            (Goal("jvp_over_fd", "<=", 1.05, "cpu"), Goal("jvp_over_fd", "<=", 1.05, "cuda")),
            "Conv-Large x0.25, 32 + 32 images of 28 x 28, eval mode",
            "metagrad.alg2",
        ),
        Benchmark(
            "sgr_step",
            "the time of one SGR step against one layer-wise step and one global-BP step (ResNet-32)",
            _sgr_step,
            {
                "sgr_over_layerwise_k16": "time of one SGR step / one layer-wise step, K = 16",
                "sgr_over_layerwise_k2": "time of one SGR step / one layer-wise step, K = 2",
                "layerwise_over_global_bp_k16": "time of one layer-wise step / one global-BP step, K = 16",
            },
            (),
            "ResNet-32 at full width, batch 128 of 32 x 32",
            "sgr.mem",
        ),
        Benchmark(
            "batched_trials",
            "25 independent trainings of the shells MLP at once (stack_module_state + vmap) against one at a time",
            _batched_trials,
            {
                "batched_over_one_at_a_time": "trial-steps per second, all trials at once / one trial after another",
                "max_abs_param_diff_one_thread": "largest final-parameter difference between the two, on one thread",
            },
            (
                Goal("batched_over_one_at_a_time", ">", 1.0, "cpu"),
                Goal("batched_over_one_at_a_time", ">=", 5.0, "cuda"),
            ),
            "The supervised arm of LGA's shells study (4 x 128 ReLU MLP, d = 50, 5,000 points, batch 128, Adam "
            "1e-3), 300 steps per trial",
            "lga.fig3",
        ),
        Benchmark(
            "wrn_throughput",
            "WRN-28-2 training throughput of the fast path against a plain fp32 eager loop with a CPU data loader",
            _wrn_throughput,
            {
                "fast_over_eager": "images per second, the fastest fast-path variant / the eager loop",
                "device_data_over_eager": "data and augmentation on the device, fp32 / the eager loop",
                "bf16_channels_last_over_eager": "that plus bf16 autocast and channels-last (runs' GPU default) / "
                "the eager loop",
                "compiled_over_uncompiled": "that plus torch.compile / without it",
                "compile_seconds": "seconds torch.compile adds to the warm-up",
            },
            (Goal("fast_over_eager", ">=", 3.0, "cuda"),),
            "Supervised steps on random 32 x 32 uint8 images, pad-4 crop and flip, Adam; batch 128 on GPU "
            "(data loader with 4 workers), 64 on CPU (2 workers)",
            "lga.fig5",
        ),
        Benchmark(
            "fast_path",
            "one training step of each cpu experiment's network: fp32 against bf16 autocast (+ channels-last)",
            _fast_path,
            {
                f"{name}_fp32_over_bf16": f"time of one fp32 step / one fast-path step, {name} ({used_by})"
                for name, used_by in (
                    ("small_cnn_w16", "LGA benchmark"),
                    ("small_cnn_w32", "supervised reference"),
                    ("conv_large_x0.125", "meta-gradient benchmark"),
                    ("shake_shake26_x0.125", "meta-gradient Table 2"),
                    ("resnet32_x0.25", "SGR local BP"),
                    ("plainnet32_x0.25", "SGR local BP"),
                    ("vgg11_x0.25", "IsoLoss Table 1"),
                    ("mlp_1024", "SGR Table 4"),
                )
            },
            (),
            "Each network at its cpu experiment's batch, random 28 x 28 images, SGD; a cpu preset uses the fast "
            "path only where the ratio is at least 1.5 (`benchmarks.fast_path.PAYS`)",
            "",
        ),
    )
}

NOT_BUILT: dict[str, dict[str, str]] = {}
"""Benchmarks the issue asks for that are not built yet (none now): shown on the Performance page as such."""
