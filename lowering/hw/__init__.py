"""The lower-to-hw patterns, one module per op family (see ``nanoir.lowering.lower_to_hw``).

``codes`` holds the pure helpers on codes and exponents; ``core`` what every pattern shares
(the values being built, constants, the exact shifts and requantizations, the pattern base
class and the last pattern, which reports what nothing lowered); ``fake_quant`` the fusions
rooted at ``nq.fake_quant``; ``contraction`` conv, linear and matmul; ``elementwise`` the
arithmetic; ``channel_wise`` PReLU and batch norm; ``data_movement`` the ops that move codes
and keep their exponents. To lower a new op: one ``HwPattern`` subclass in the module of its
family, added to ``PATTERNS`` in ``nanoir.lowering.lower_to_hw``.
"""
