"""The lower-to-hw patterns, one module per op family (see ``nanoir.lowering.lower_to_hw``).

``core`` holds what every pattern shares (the values being built, exponents, constants, the
exact shifts and requantizations); ``fake_quant`` the fusions rooted at ``nq.fake_quant``;
``contraction`` conv, linear and matmul; ``elementwise`` the arithmetic; ``data_movement`` the
ops that move codes and keep their exponents.
"""
