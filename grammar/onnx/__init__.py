"""ONNX files: `importer` (through the `.ne` nq op table), its constant folding (`fold`), and
`exporter` (standard QDQ or NanoEngine-PyTorch's flavour)."""
