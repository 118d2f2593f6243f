"""The analysis layer: graph walks and the streaming rules, read from the op traits.

It sits between the dialects (whose traits, ``nanoir.dialects.traits``, say what each op is)
and the passes, runtime and grammar that use its results; it imports only the dialects, the
numerics and ``nanoir.errors`` (DESIGN.md, "Layers"). Modules, bottom up:

- ``rules``: the streaming rule of one node along one dim, from its op's trait;
- ``graph``: the runtime part of a function as stream nodes (``build_graph``);
- ``cursor``: where one node is along a dim, what it fires (shared by the planner's
  simulation and the streaming executor, ``nanoir.runtime.stream``);
- ``simulate``: row counts of a stream, per analysed dim;
- ``plan``: the buffer plan of a function and its report table (``stream_plan``);
- ``attributes``: the plan's shapes as IR attributes and back (``stream_shapes``).
- ``products``: what an nf product is read as by the frontends (a division by a constant as
  a product by its reciprocal; torch's hardswish written out).
"""
