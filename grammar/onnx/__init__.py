"""ONNX files: `importer` (through the `.ne` nq op table), its constant folding (`fold`),
`exporter` (standard QDQ or NanoEngine-PyTorch's flavour) and `integer` (nh programs as exact
integer ONNX, and reading them back)."""
