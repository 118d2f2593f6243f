"""ONNX files as real exporters shipped them: the three PaddleOCR models of
``rapidocr-onnxruntime==1.4.4`` (paddle2onnx; opsets 11-12), read and compiled without edits.

For each model (the text recognizer, the direction classifier, the DB text detector) the
file is read as shipped with ``nanoir.load(path, input_shapes={"x": ...})`` (they declare
dynamic batch and image sizes: ``?x3x?x?``), then:

- ``nf``: the float program against onnxruntime on the same random image (max |diff|);
- ``quantize``: calibrated on two random images (8 bits, nanoir's defaults);
- ``lower_to_hw``: the integer program; ``nq == nh``: its outputs equal the quantized
  program's bit for bit on a calibration image.

Nothing here edits the files (no graph surgery, no rewritten attributes). Not a CI test: it
needs the wheel, fetched once with

    pip download --no-deps rapidocr-onnxruntime==1.4.4 -d ~/.cache/nanoir-bench/wheels

and unzipped by this script into ``~/.cache/nanoir-bench/rapidocr/``.

    python benchmarks/bench_onnx_shipped.py [--wheel PATH] [--batch-dynamic]

``--batch-dynamic`` keeps the batch dynamic (``input_shapes`` gives only the image sizes),
which the recognizer's and classifier's shape arithmetic allows.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

CACHE = Path.home() / ".cache" / "nanoir-bench"
WHEEL = CACHE / "wheels" / "rapidocr_onnxruntime-1.4.4-py3-none-any.whl"
MODELS = {
    "recognizer (PP-OCRv4 rec)": ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    "direction classifier (mobile v2.0 cls)": (
        "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        (1, 3, 48, 192),
    ),
    "DB detector (PP-OCRv4 det)": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 96, 96)),
}


def model_dir(wheel: Path) -> Path:
    """The wheel's model folder, unzipped once into the cache."""
    out = CACHE / "rapidocr"
    models = out / "rapidocr_onnxruntime" / "models"
    if not models.is_dir():
        if not wheel.is_file():
            raise SystemExit(
                f"{wheel} is missing: pip download --no-deps rapidocr-onnxruntime==1.4.4 "
                f"-d {wheel.parent}"
            )
        with zipfile.ZipFile(wheel) as z:
            z.extractall(out)
    return models


def main() -> None:
    import onnxruntime as ort

    import nanoir

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, default=WHEEL)
    parser.add_argument("--batch-dynamic", action="store_true")
    args = parser.parse_args()
    models = model_dir(args.wheel)
    rng = np.random.default_rng(0)
    print(
        "| model | file | input | read (s) | nf vs ort max diff | quantize (s) | lower (s) | nq == nh |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, (file, shape) in MODELS.items():
        path = models / file
        given = (None, *shape[1:]) if args.batch_dynamic else shape
        start = time.process_time()
        try:
            module = nanoir.load(path, input_shapes={"x": given})
        except nanoir.Error as e:
            print(f"| {label} | {file} | {shape} | refused: {e} | | | | |")
            continue
        read_s = time.process_time() - start
        images = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(2)]
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (want,) = session.run(None, {"x": images[0]})
        (got,) = nanoir.run(module, images[0])
        diff = float(np.abs(np.asarray(got, np.float64) - want).max())
        start = time.process_time()
        nanoir.quantize(module, [i.astype(np.float64) for i in images], progress=False)
        quant_s = time.process_time() - start
        start = time.process_time()
        hw = nanoir.lower_to_hw(module.clone())
        lower_s = time.process_time() - start
        (nq,) = nanoir.run(module, images[0])
        (nh,) = nanoir.run(hw, images[0])
        equal = np.array_equal(np.asarray(nq), np.asarray(nh))
        print(
            f"| {label} | {file} | {'x'.join('?' if d is None else str(d) for d in given)} | "
            f"{read_s:.1f} | {diff:.2e} | {quant_s:.1f} | {lower_s:.1f} | {equal} |"
        )


if __name__ == "__main__":
    main()
