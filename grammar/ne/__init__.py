"""The NanoEngine text format (`.ne`): grammar, parser, printer, checks, and the op tables.

Front doors: `importer` (text -> IR) and `exporter` (IR -> text). One op table per level
(`nq`, `hw`), one schema (`schema`) that both directions share.
"""
