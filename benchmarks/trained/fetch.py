"""The trained models, taken from the wheels that ship them (the packages are never installed
or imported): ``pip download --no-deps`` into the cache folder, then the model files unzipped
next to it.

- ``rapidocr-onnxruntime==1.4.4``: PaddleOCR's ONNX exports (PP-OCRv4 text detector and
  recognizer, PP-OCR mobile v2 direction classifier);
- ``facenet-pytorch==2.6.0``: MTCNN's P-, R- and O-Net as torch state dicts.

:class:`Unreachable` says why a wheel could not be had (no network, no such version); the
benchmark skips that wheel's models with one line.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WHEELS", "Unreachable", "Wheel", "default_cache", "fetch", "sha256"]


class Unreachable(Exception):
    """A wheel could not be downloaded (the message says which and why)."""


@dataclass(frozen=True)
class Wheel:
    requirement: str
    files: tuple[str, ...]
    """Paths inside the wheel to take."""

    @property
    def stem(self) -> str:
        """The wheel file name's start (``rapidocr_onnxruntime-1.4.4``)."""
        name, version = self.requirement.split("==")
        return f"{name.replace('-', '_')}-{version}"


WHEELS = {
    "rapidocr": Wheel(
        "rapidocr-onnxruntime==1.4.4",
        (
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
            "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
            "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        ),
    ),
    "facenet": Wheel(
        "facenet-pytorch==2.6.0",
        (
            "facenet_pytorch/data/pnet.pt",
            "facenet_pytorch/data/rnet.pt",
            "facenet_pytorch/data/onet.pt",
        ),
    ),
}


def default_cache() -> Path:
    return Path.home() / ".cache" / "nanoir-bench"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(key: str, cache: Path, timeout: float = 300) -> dict[str, Path]:
    """The files of ``WHEELS[key]`` by base name, unzipped into ``cache/<wheel stem>/``
    (downloaded first when the wheel is not in ``cache/wheels``)."""
    wheel = WHEELS[key]
    folder = cache / wheel.stem
    paths = {Path(f).name: folder / Path(f).name for f in wheel.files}
    if all(p.exists() for p in paths.values()):
        return paths
    wheels = cache / "wheels"
    found = sorted(wheels.glob(f"{wheel.stem}-*.whl"))
    if not found:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
        command += [wheel.requirement, "-d", str(wheels)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as error:
            raise Unreachable(f"{wheel.requirement}: pip download timed out") from error
        found = sorted(wheels.glob(f"{wheel.stem}-*.whl"))
        if done.returncode or not found:
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise Unreachable(f"{wheel.requirement}: pip download failed ({(lines or ['?'])[-1]})")
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[0]) as archive:
        for inner in wheel.files:
            paths[Path(inner).name].write_bytes(archive.read(inner))
    return paths
