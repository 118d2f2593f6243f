"""What to tell the user when ``torch.export`` itself cannot trace their network.

torch's own message is long (a page of debugging advice) and often does not say where in the
user's code the trace stopped: a ``TypeError`` from ``nn.utils.rnn.pack_padded_sequence``
names only torch's frames. :func:`export_failure` builds one :class:`FrontendError` from

- the cause: torch's exception type and the first lines of its message, with torch's generic
  advice dropped, and where the kind of failure is known (:data:`CAUSES`), what it means for
  a network;
- the user's line: the innermost frame of the traceback outside torch, nanoir and the Python
  standard library (torch's own ``The following call raised this error`` frame when it gives
  one), with the torch frame it failed in;
- the hint ``dynamic_batch=False`` only when the caller found that exporting with static
  shapes succeeds (:func:`nanoir.frontend.torch_import.export` retries to find out).

This is hand-written: torch has no API that classifies its export errors or extracts the user
frame (``torch._dynamo`` formats frames for its own messages only).
"""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Sequence

import torch

from nanoir.frontend.errors import FrontendError

__all__ = ["CAUSES", "export_failure", "scripted_module"]

_TORCH_DIR = os.path.dirname(torch.__file__)
_NN_DIR = os.path.join(_TORCH_DIR, "nn")
_NANOIR_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_STDLIB_DIR = os.path.dirname(os.__file__)

CAUSES: Sequence[tuple[re.Pattern[str], str]] = (
    (
        re.compile(r"data-dependent|GuardOnDataDependent|unbacked", re.IGNORECASE),
        "a branch or a size in forward depends on the values of a tensor (data-dependent: "
        "`if t.sum() > 0`, `int(t)`, `t.item()`, `t.nonzero()`); torch.export traces with "
        "fake tensors, whose values are unknown. Write that part without reading tensor "
        "values, or compute it outside the network",
    ),
    (
        re.compile(r"FakeTensor"),
        "a tensor's value was used where torch needs a Python number (a size or an index); "
        "torch.export traces with fake tensors, whose values are unknown. "
        "nn.utils.rnn.pack_padded_sequence does this (its batch sizes are tensor values): "
        "give the recurrent layer the padded batch instead",
    ),
    (
        re.compile(r"specialized it to be a constant|Constraints violated"),
        "forward fixes the size of the dim nanoir makes dynamic (the batch, dim 0 of every "
        "input): a reshape or view to a literal batch size, or an input whose dim 0 is not "
        "its batch",
    ),
)
"""Known kinds of export failure (a pattern of the message) and what each means."""

_BOILERPLATE = (
    "For more information",
    "For extended logs",
    "If you suspect the guard",
    "For C++ stack trace",
    "For more debugging help",
    "The error above occurred when calling torch.export.export",
    "The following call raised this error",
    "Caused by:",
    "consider using data-dependent friendly APIs",
)


def scripted_module(model: torch.nn.Module) -> FrontendError | None:
    """The error for a TorchScript module (``torch.jit.script``/``trace``), else None."""
    if not isinstance(model, torch.jit.ScriptModule):
        return None
    return FrontendError(
        f"cannot import {type(model).__name__}: it is a TorchScript module "
        "(torch.jit.script or torch.jit.trace), and torch.export never takes TorchScript "
        "modules; pass the original torch.nn.Module instead"
    )


def export_failure(
    model: torch.nn.Module, error: BaseException, *, static_helps: bool
) -> FrontendError:
    """One message for a failed ``torch.export``: cause, user line, and the hint only when
    exporting with ``dynamic_batch=False`` succeeds (``static_helps``)."""
    message = str(error).strip()
    lines = [f"torch.export could not trace {type(model).__name__}"]
    lines.append(f"  cause: {type(error).__name__}: {_summary(message)}")
    meaning = next((m for p, m in CAUSES if p.search(f"{type(error).__name__} {message}")), None)
    if meaning:
        lines.append(f"  which means: {meaning}")
    user, inner = _location(error, message)
    if user:
        lines.append(f"  at {user}")
    if inner:
        lines.append(f"  inside torch at {inner}")
    if static_helps:
        lines.append(
            "  hint: torch.export succeeds with dynamic_batch=False (the batch size is then "
            "the example's)"
        )
    return FrontendError("\n".join(lines))


def _summary(message: str, limit: int = 6) -> str:
    """torch's message without its generic advice, at most ``limit`` non-empty lines."""
    kept: list[str] = []
    for line in message.splitlines():
        if any(line.strip().startswith(b) for b in _BOILERPLATE):
            break
        line = re.sub(r"\s*For more information, run with [^.]*\.", "", line)
        if line.strip():
            kept.append(line.rstrip())
    text = "\n    ".join(kept[:limit])
    return text + ("\n    ..." if len(kept) > limit else "")


def _is_user_file(path: str) -> bool:
    path = os.path.abspath(path)
    if path.startswith((_TORCH_DIR, _NANOIR_DIR)) or path.startswith("<"):
        return False
    return not path.startswith(_STDLIB_DIR) or "site-packages" in path


def _location(error: BaseException, message: str) -> tuple[str | None, str | None]:
    """``file:line in func: code`` of the innermost user frame, and of the innermost frame of
    torch's ``nn`` code below it (None when the trace did not stop inside a torch module)."""
    frames = traceback.extract_tb(error.__traceback__)
    user_index = max((i for i, f in enumerate(frames) if _is_user_file(f.filename)), default=None)
    quoted = re.search(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)', message)
    if quoted and _is_user_file(quoted["file"]):
        user = f"{quoted['file']}:{quoted['line']} in {quoted['func']}"
        code = _code_after(message, quoted.end())
        user_text: str | None = user + (f": {code}" if code else "")
    elif user_index is not None:
        user_text = _frame_text(frames[user_index])
    else:
        user_text = None
    inner = None
    if user_index is not None:
        # the innermost frame of torch's module code below the user's line (an nn.LSTM's
        # forward): where the trace stopped, when the user called into a torch module
        below = [f for f in frames[user_index + 1 :] if f.filename.startswith(_NN_DIR)]
        inner = _frame_text(below[-1]) if below else None
    return user_text, inner


def _code_after(message: str, position: int) -> str:
    rest = message[position:].splitlines()
    return rest[1].strip() if len(rest) > 1 else ""


def _frame_text(frame: traceback.FrameSummary) -> str:
    code = (frame.line or "").strip()
    return f"{frame.filename}:{frame.lineno} in {frame.name}" + (f": {code}" if code else "")
