"""A user's model file, outside the package (tests/orchestrator/study/test_user_workloads.py,
tests/orchestrator/test_job_submit.py)."""
import math
import torch
from torch import nn


def tiny_mlp(input_shape, num_classes, *, hidden=16):
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), hidden), nn.ReLU(),
                         nn.Linear(hidden, num_classes))


def not_a_model(input_shape, num_classes):
    return "a string"
