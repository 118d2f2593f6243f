"""The reach benchmark's second corpus: networks of families ``reach_models.py`` lacks, added to
measure whether nanoir's reach generalises (issue 32) rather than tuned for.

Plain torch (timm, torchaudio and torchvision do not import in nanoir's environment), written
from the layout of each family's public model code, by kind:

- ``transformers``: CaiT, XCiT, PiT, CrossViT, MaxViT, Swin-V2, ConvNeXt-V2, EfficientFormer,
  EdgeNeXt, MLP-Mixer;
- ``convnets``: ResNeSt, Res2Net, SKNet, BiT, CBAM, SqueezeNet, ShuffleNetV2, GoogLeNet, HRNet,
  U-Net, ESPCN;
- ``detection``: YOLOv5n, Scaled-YOLOv4 (Mish), DETR;
- ``audio``: QuartzNet, x-vector, ECAPA-TDNN, CRNN with a packed BiLSTM, Speech-Transformer,
  DS-CNN, PANNs CNN6, a keyword spotter with its log-mel front end;
- ``text``: an LSTM language model, a BiGRU classifier, BERT, a Llama-style decoder.

``MORE_MODELS[name]`` gives the constructor, the input shape without the batch dim, the input
kind, the group and where it comes from; ``make_more_model(name, seed)`` builds one with its
source's initialisation and realistic BatchNorm statistics, in ``eval()``. Each network's first
result, before any fix made for it, is recorded in ``reach_results.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from ptq_models import timm_init
from reach_models import trunc02_init
from torch import nn

from nanoir.testing import calibrate_batch_norm, randomize_batch_norm

from . import audio, convnets, detection, text, transformers
from .text import VOCAB

__all__ = ["MORE_MODELS", "VOCAB", "MoreModel", "make_more_model"]


@dataclass(frozen=True)
class MoreModel:
    """A network: constructor, input shape without the batch dim, input kind (``image``:
    ImageNet-normalised smooth images; ``audio``: a waveform at 8 kHz; ``features``: smooth
    noise standing for filterbanks or a grey crop; ``tokens``: int64 ids below ``VOCAB``, 0
    padding the end of some rows), group, source, and its source's weight initialisation
    (``fan_out``: ``ptq_models.timm_init``; ``trunc02``: ``reach_models.trunc02_init``;
    ``own``: the constructor's, torch's defaults elsewhere)."""

    build: Callable[[], nn.Module]
    shape: tuple[int, ...]
    kind: str
    group: str
    source: str
    init: str = "own"


_IMG, _IMG32 = (3, 64, 64), (3, 32, 32)
_T = transformers
MORE_MODELS: dict[str, MoreModel] = {
    # vision transformers and mixers (timm)
    "CaiT-XXS": MoreModel(_T.CaiTXXS, _IMG32, "image", "timm", "timm cait_xxs24 (p8, 4+2 blocks)", "trunc02"),
    "XCiT-nano": MoreModel(_T.XCiTNano, _IMG32, "image", "timm", "timm xcit_nano_12_p8 (3+2 blocks)", "trunc02"),
    "PiT-Ti": MoreModel(_T.PiTTi, _IMG, "image", "timm", "timm pit_ti (depths 1, 2, 1)", "trunc02"),
    "CrossViT-tiny": MoreModel(_T.CrossViTTiny, (3, 48, 48), "image", "timm", "timm crossvit_tiny (48x48, 1 stage)", "trunc02"),
    "MaxViT-rmlp": MoreModel(_T.MaxViTSmall, _IMG, "image", "timm", "timm maxvit_rmlp_nano (small)", "trunc02"),
    "SwinV2-w4": MoreModel(_T.SwinV2Small, _IMG, "image", "timm", "timm swinv2_tiny (embed 48, window 4)", "trunc02"),
    "ConvNeXtV2-atto": MoreModel(_T.ConvNeXtV2Atto, _IMG, "image", "timm", "timm convnextv2_atto", "trunc02"),
    "EfficientFormer-L1": MoreModel(_T.EfficientFormerL1, _IMG, "image", "timm", "timm efficientformer_l1 (depths 1, 1, 2, 2)", "trunc02"),
    "EdgeNeXt-XXS": MoreModel(_T.EdgeNeXtXXS, _IMG, "image", "timm", "timm edgenext_xx_small (small)", "trunc02"),
    "MLP-Mixer": MoreModel(_T.MixerSmall, _IMG32, "image", "timm", "timm mixer_s16 layout (small)", "trunc02"),
    # conv families
    "ResNeSt-14d": MoreModel(convnets.ResNeSt14, _IMG, "image", "timm", "timm resnest14d (half width)", "fan_out"),
    "Res2Net-50": MoreModel(convnets.Res2Net50, _IMG, "image", "timm", "timm res2net50_26w_4s (small)", "fan_out"),
    "SKResNet-18": MoreModel(convnets.SKResNet18, _IMG, "image", "timm", "timm skresnet18 (half width)", "fan_out"),
    "BiT-R50x1": MoreModel(convnets.BiTResNetV2, _IMG, "image", "timm", "timm resnetv2_50x1_bit (small)", "fan_out"),
    "CBAM-ResNet-18": MoreModel(convnets.CbamResNet18, _IMG, "image", "timm", "timm cbam_resnet18 layout (half width)", "fan_out"),
    "SqueezeNet-1.1": MoreModel(convnets.SqueezeNet11, _IMG, "image", "torchvision", "torchvision squeezenet1_1"),
    "ShuffleNetV2-0.5": MoreModel(convnets.ShuffleNetV2, _IMG, "image", "torchvision", "torchvision shufflenet_v2_x0_5"),
    "GoogLeNet": MoreModel(convnets.GoogLeNet, _IMG, "image", "torchvision", "torchvision googlenet"),
    "HRNet-seg": MoreModel(convnets.HRNetSmall, _IMG, "image", "edge", "HRNet-W18-small segmenter (small)", "fan_out"),
    "U-Net": MoreModel(convnets.UNetSmall, _IMG, "image", "edge", "milesial U-Net, bilinear (1/4 width)"),
    "ESPCN-x2": MoreModel(convnets.ESPCN, _IMG32, "image", "edge", "ESPCN x2 + bicubic skip"),
    # detection
    "YOLOv5n": MoreModel(detection.YOLOv5n, _IMG, "image", "detection", "Ultralytics yolov5n + decode"),
    "ScaledYOLOv4": MoreModel(detection.ScaledYOLOv4, _IMG, "image", "detection", "yolov4-csp (Mish, 1/8 width)"),
    "DETR-tiny": MoreModel(detection.DETRTiny, _IMG, "image", "detection", "DETR inference path (tiny)"),
    # speech and audio
    "QuartzNet-5x5": MoreModel(audio.QuartzNet5x5, (64, 128), "features", "audio", "NeMo QuartzNet 5x5 (1/4 width)"),
    "x-vector": MoreModel(audio.XVector, (30, 200), "features", "audio", "Kaldi x-vector TDNN (half width)"),
    "ECAPA-TDNN": MoreModel(audio.ECAPATDNN, (80, 100), "features", "audio", "SpeechBrain ECAPA-TDNN (C=128)"),
    "CRNN-packed": MoreModel(audio.CRNNPacked, (1, 32, 100), "features", "audio", "CRNN OCR, packed BiLSTM (1/4 width)", "fan_out"),
    "Speech-Transformer": MoreModel(audio.SpeechTransformer, (64, 80), "features", "audio", "ESPnet Transformer encoder (small)"),
    "DS-CNN-S": MoreModel(audio.DSCNN, (1, 49, 10), "features", "audio", "ARM ML-KWS DS-CNN-S"),
    "PANNs-CNN6": MoreModel(audio.Cnn6, (1, 100, 64), "features", "audio", "PANNs Cnn6 (half width)"),
    "LogMel-KWS": MoreModel(audio.LogMelKWS, (1, 8000), "audio", "audio", "log-mel front end (conv DFT) + CNN"),
    # text
    "LSTM-LM": MoreModel(text.LSTMLanguageModel, (32,), "tokens", "text", "pytorch/examples word LM, tied"),
    "BiGRU-classifier": MoreModel(text.GRUClassifier, (32,), "tokens", "text", "BiGRU text classifier"),
    "BERT-tiny": MoreModel(text.BertTiny, (32,), "tokens", "text", "HF BERT encoder (2 layers, 128)"),
    "TinyLlama": MoreModel(text.TinyLlama, (32,), "tokens", "text", "HF Llama decoder (tiny, GQA)"),
}  # fmt: skip
"""The networks of the second corpus, by name, in table order."""


def make_more_model(name: str, seed: int = 0, data: torch.Tensor | None = None) -> nn.Module:
    """``MORE_MODELS[name]`` with its source's initialisation, random BatchNorm affine
    parameters, running statistics measured on ``data`` and spread
    (``nanoir.testing.calibrate_batch_norm``; drawn regardless of the data when ``data`` is
    None), ``eval()``.

    Why measured: with their sources' initialisations (torch's defaults, torchvision's
    ``N(0, 0.01)``) statistics drawn regardless of the data do not renormalise, and eight of
    these networks gave the same output for every input."""
    torch.manual_seed(seed)
    spec = MORE_MODELS[name]
    model = spec.build()
    if spec.init == "fan_out":
        timm_init(model, seed)
    elif spec.init == "trunc02":
        trunc02_init(model, seed)
    randomize_batch_norm(model, seed)
    if data is not None:
        calibrate_batch_norm(model, (data,), seed)
    return model.eval()
