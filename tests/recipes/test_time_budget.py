"""`--time-budget`: epochs planned from the first steps' times
(`recipes/time_budget.py`)."""

import json

import keras
import pytest
from recipe_helpers import tiny_flags

from keras_attention.objectives import DecayToEnd
from keras_attention.recipes import time_budget, translate
from keras_attention.recipes.time_budget import TimeBudget, TimeBudgetTooShort


def planned(minutes, tmp_path, **arguments):
    schedule = DecayToEnd(1e-3, decay_share=time_budget.DECAY_SHARE)
    return TimeBudget(minutes, tmp_path, schedule, **arguments)


def test_the_plan_fits_the_epochs_the_first_steps_allow(tmp_path, capsys):
    budget = planned(1.0, tmp_path)
    # 3 steps tracing, then 0.1 s a step, with one step that traced again
    # (a new batch shape) left out; 2 s spent so far, of which 1.6 tracing.
    times = [0.5, 0.5, 0.5] + [0.1] * 9 + [1.0]
    epochs = budget.make_plan(times, steps_per_epoch=50, validation_steps=30, seconds_so_far=2.8)
    # An epoch: (50 + 30 / 3) * 0.1 = 6 s; traced twice: (60 - 2 * 1.6) / 6 = 9.47.
    assert epochs == 9
    assert budget.schedule.total_steps == 450 and budget.schedule.decay_start == 360
    saved = json.loads((tmp_path / time_budget.PLAN_FILE).read_text())
    assert saved["epochs"] == 9 and saved["seconds_per_step"] == pytest.approx(0.1)
    assert "planned 9 epochs (450 steps), the learning rate falling to 0 from step 360" in (
        capsys.readouterr().out
    )
    # --epochs caps the plan.
    capped = planned(1.0, tmp_path / "capped", max_epochs=4)
    assert capped.make_plan(times, 50, 30, 2.8) == 4


def test_a_budget_too_short_for_one_epoch_is_refused_with_the_minimum(tmp_path):
    budget = planned(0.1, tmp_path)
    with pytest.raises(TimeBudgetTooShort) as refused:
        budget.make_plan([0.2] * 20, steps_per_epoch=100, validation_steps=0, seconds_so_far=4.0)
    # 100 steps of 0.2 s, and no tracing: at least 20 s, 0.4 min.
    assert str(refused.value).startswith("--time-budget 0.1 is too short for one epoch")
    assert "give --time-budget 0.4 or more" in str(refused.value)
    assert not (tmp_path / time_budget.PLAN_FILE).exists()


def test_a_resumed_run_keeps_its_plan_and_plans_again_until_the_decay(tmp_path):
    first = planned(1.0, tmp_path)
    first.make_plan([0.1] * 20, steps_per_epoch=50, validation_steps=0, seconds_so_far=3.0)
    assert first.plan.epochs == 11  # (60 s - 2 * 1 s tracing) / 5 s an epoch
    # Slower than measured: 10 s an epoch, 50 s left after the first.
    epochs, changed = first.after_epoch(1, [10.0], seconds=10.0)
    assert (epochs, changed) == (5, True)  # 1 + floor(50 / 10) = 6, less a tracing: 5
    assert first.schedule.total_steps == 250

    resumed = planned(1.0, tmp_path)
    assert resumed.resumed_epochs(steps_per_epoch=50) == 5
    assert resumed.schedule.total_steps == 250 and resumed.used_before == 10.0
    # Once the decay has begun (step 200), the plan stands, however slow.
    epochs, changed = resumed.after_epoch(4, [30.0], seconds=60.0)
    assert (epochs, changed) == (5, False)
    assert resumed.summary(60.0)["used_minutes"] == pytest.approx(70 / 60, abs=0.01)

    with pytest.raises(TimeBudgetTooShort, match="planned for --time-budget 1 "):
        planned(2.0, tmp_path).resumed_epochs(steps_per_epoch=50)
    with pytest.raises(ValueError, match="epochs of 50 steps; the data now gives 60"):
        planned(1.0, tmp_path).resumed_epochs(steps_per_epoch=60)


@pytest.mark.large  # two recipe runs (see docs/testing.md)
def test_a_run_refused_for_its_budget_trains_to_a_decayed_end_with_a_larger_one(
    dates_data_dir, tmp_path, capsys
):
    output_dir = tmp_path / "run"
    flags = tiny_flags(dates_data_dir, output_dir, "--epochs", "3", "--no-export")
    with pytest.raises(SystemExit) as refused:
        translate.main([*flags, "--time-budget", "0.01"])
    message = str(refused.value.code)
    assert message.startswith("error: --time-budget 0.01 is too short for one epoch")

    # The same folder, a budget far larger than the 3 epochs --epochs allows.
    results = translate.main([*flags, "--time-budget", "10"])
    out = capsys.readouterr().out
    steps = json.loads((output_dir / "checkpoints" / time_budget.PLAN_FILE).read_text())[
        "steps_per_epoch"
    ]
    decay_start = int(3 * steps * (1 - time_budget.DECAY_SHARE))
    assert (
        f"planned 3 epochs ({3 * steps} steps), the learning rate falling to 0 from step "
        f"{decay_start}" in out
    )
    assert "Time budget 10 min: 3 epochs trained" in out
    assert results["time_budget"]["planned_epochs"] == 3
    assert json.loads((output_dir / "config.json").read_text())["epochs"] == 3
    model = keras.saving.load_model(output_dir / "model.keras")
    assert int(model.optimizer.iterations) == 3 * steps
    assert float(model.optimizer.learning_rate) == 0.0
