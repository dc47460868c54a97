"""Dist-MoE: distributed Mixture-of-Experts for Hopper GPUs (C++/CUDA core, PyTorch front end).

Importing the package initializes neither CUDA nor a process group and does not import torch.
"""

from . import api
from .api import *  # noqa: F401,F403 -- upstream's 16 public names, listed once in api.__all__

__all__ = list(api.__all__)
