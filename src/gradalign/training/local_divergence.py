"""Which divergences of a local-BP run are its result, and which stop the command (`training.local`)."""

from __future__ import annotations


def divergence_is_a_result(spec) -> bool:
    """Whether a divergence is stored as the run's result (chance accuracy on a NaN; trained on through a test
    accuracy back at chance) rather than stopping the command.

    - Global BP's: the paper's "fail" (Table 7: global BP in deep VGGs).
    - A local method's final run in the local-BP tables (3, 6, 7: a conv network, the test split): the method at
      the protocol's settings, which no table tunes per run, so what it reaches at the end of its schedule is the
      result (our rule, from Table 6's rerun: SGR at K = 3 fell back to chance at its 4th epoch on a GPU, where
      the stop rule ended it).
    - Every other run stops the command: a pilot's (`validation` > 0, as the λ pilot reads a divergence) and
      Table 4's MLP and conv runs, whose tuning moves to the next rate (`experiments.sgr.bp_free._tuned_runs`).

    `spec`: a LocalRunSpec, a BP-free rule's spec, or either as its `to_dict()` (a run-cache unit's spec)."""
    fields = spec if isinstance(spec, dict) else spec.to_dict()
    method = fields["method"]  # LocalSettings as a dict, or the BP-free rule's name
    if (method.get("method") if isinstance(method, dict) else method) == "global_bp":
        return True
    return (
        isinstance(method, dict)
        and not fields.get("validation")
        and not str(fields["network"]).startswith(("mlp", "conv"))
    )
