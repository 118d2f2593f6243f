"""Test helpers, public so that tests, benchmarks and users share them (never ``import tests``).

- :mod:`nanoir.testing.models`: plain-torch test networks (``TEST_MODELS``, ``make_test_model``,
  ``randomize_batch_norm``, ``calibrate_batch_norm``, ...; needs torch), re-exported here;
- :mod:`nanoir.testing.proof_models`: the larger proof networks of issue 20's joins
  (``PROOF_MODELS``, ``make_proof_model``; needs torch), a registry of their own;
- :mod:`nanoir.testing.op_proof_models`: issue 21's networks of modern ops (``OP_PROOF_MODELS``,
  ``make_op_proof_model``; needs torch), another registry of their own;
- :mod:`nanoir.testing.magik_models`: issue 22's networks of the Magik manual's op list
  (``MAGIK_MODELS``, ``make_magik_model``: the manual's CRNN in every variant, Focus; needs
  torch), a registry of its own;
- :mod:`nanoir.testing.programs`: random nq programs for property tests (needs hypothesis);
- :mod:`nanoir.testing.text`: token-level mutation of program text for fuzz tests.
"""

from __future__ import annotations

import importlib
from typing import Any

_PROOF = ("PROOF_MODELS", "make_proof_model")
_OP_PROOF = ("OP_PROOF_MODELS", "make_op_proof_model")
_MAGIK = ("MAGIK_MODELS", "make_magik_model")

__all__ = [
    "OP_PROOF_MODELS",
    "PROOF_MODELS",
    "TEST_MODELS",
    "MAGIK_MODELS",
    "KWSNet",
    "LeNet5",
    "MobileNetV2Stack",
    "ResNet18",
    "SampleNet",
    "calibrate_batch_norm",
    "import_folded",
    "make_magik_model",
    "make_op_proof_model",
    "make_proof_model",
    "make_test_model",
    "randomize_batch_norm",
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    # Lazy (PEP 562): the models import torch, which ``nanoir.testing.programs`` does not need.
    if name not in __all__:
        raise AttributeError(f"module 'nanoir.testing' has no attribute {name!r}")
    module = "nanoir.testing.proof_models" if name in _PROOF else "nanoir.testing.models"
    if name in _OP_PROOF:
        module = "nanoir.testing.op_proof_models"
    if name in _MAGIK:
        module = "nanoir.testing.magik_models"
    return getattr(importlib.import_module(module), name)
