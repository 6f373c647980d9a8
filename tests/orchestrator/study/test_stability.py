"""When a finished run is unstable (orchestrator/study/stability.py): exact thresholds, exact reasons."""
from __future__ import annotations

from orchestrator.study.stability import unstable_reason


def run(losses: list[float], accuracies: list[float]) -> list[dict]:
    return [{"train_loss": loss, "test_accuracy": a} for loss, a in zip(losses, accuracies)]


def test_a_loss_that_ends_above_twice_its_lowest_is_unstable():
    # onebit, grouping column, on the built-in MNIST MLP (lr 0.1): finite numbers all along
    history = run([0.71, 0.9, 1.2, 1.9, 2.2, 2.28], [0.84, 0.75, 0.73, 0.33, 0.18, 0.17])
    assert unstable_reason(history, 0.1135) == ("the training loss rose to 2.28 in the last epoch, more than 2x "
                                                "its lowest (0.71, epoch 1)")


def test_accuracy_back_at_chance_after_learning_is_unstable():
    history = run([0.5, 0.6, 0.9], [0.63, 0.30, 0.11])  # the loss stays below twice its lowest
    assert unstable_reason(history, 0.1135) == ("the test accuracy fell to 0.1100, where always predicting the "
                                                "most frequent class scores 0.1135, from 0.6300 in epoch 1")


def test_ordinary_runs_are_not_unstable():
    assert unstable_reason(run([0.9, 0.4, 0.3], [0.85, 0.9, 0.93]), 0.1135) is None
    assert unstable_reason(run([0.4, 0.8], [0.9, 0.9]), 0.1135) is None  # exactly twice: not above
    assert unstable_reason(run([0.3], [0.95]), 0.1135) is None  # one epoch: nothing to fall from


def test_a_run_that_never_learned_is_unstable():
    # signsgd (scale 1) at lr 0.05 on the built-in MNIST MLP: 0.14 after three epochs, status ok before
    assert unstable_reason(run([2.3, 2.3, 2.3], [0.12, 0.141, 0.13]), 0.1135) == (
        "the test accuracy never rose above 0.1410, where always predicting the most frequent class scores "
        "0.1135: it did not learn")
    assert unstable_reason(run([2.3, 2.2], [0.12, 0.1636]), 0.1135) is None  # 0.05 above: it learned a little
