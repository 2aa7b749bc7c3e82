"""A module that makes a tensor when it is imported, as equiformer-pytorch makes its
`RANDOM_ANGLES` (tests/clients/train_made_at_import.py imports it)."""

import torch

# (16, 64) float32, 4,096 B, made at import and read by the script in every step
PROJECTION = torch.linspace(-1.0, 1.0, 16 * 64).reshape(16, 64)
