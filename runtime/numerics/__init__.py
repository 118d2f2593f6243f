"""The numerics layer: pure NumPy quantization and requantization math, kernels and shape rules.

The bottom of nanoir's layers (above only ``nanoir.errors``): nothing here imports xDSL IR, a
dialect, or any other nanoir layer, so dialect verifiers, passes, the runtime and the ``.ne``
grammar can all share one definition of each rule.
"""
