"""The command-line tools: `nanoir-opt` (`opt`) and `nanoir-run` (`run`), their shared entry
(`entry`: signals and exit codes), the `.ne` and ONNX output targets, and the row spool of
`nanoir-run --stream`."""
