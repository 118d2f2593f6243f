"""When torch.export itself fails (nanoir/frontend/export_errors.py): the error names the
cause and the user's line where torch gives one, and suggests ``dynamic_batch=False`` exactly
when retrying with it succeeds (each case below is retried to check the hint's claim).
ScriptModules are refused up front; ``forward(*args)`` modules export with the dynamic batch.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import nanoir
from nanoir.frontend import FrontendError

torch.set_num_threads(1)


class Packed(nn.Module):
    """An LSTM over a PackedSequence (its batch sizes are tensor values)."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 5, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lengths = torch.full((x.shape[0],), x.shape[1])
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        y, _ = self.rnn(packed)  # the line the error names
        return pad_packed_sequence(y, batch_first=True)[0]


class DataDependentLength(nn.Module):
    """A length read from tensor values (a data-dependent guard)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int((x > 0).sum())  # the line the error names
        return x[:, :n]


class LiteralBatch(nn.Module):
    """forward reshapes to a literal batch of 2: fine with a static batch only."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(2, -1)  # the line the error names


def _line(cls: type, marker: str = "# the line the error names") -> str:
    """``file:line`` of the marked line in ``cls``'s source."""
    lines, start = inspect.getsourcelines(cls)
    offset = next(i for i, text in enumerate(lines) if marker in text)
    return f"{inspect.getsourcefile(cls)}:{start + offset}"


def _static_succeeds(model: nn.Module, x: torch.Tensor) -> bool:
    try:
        nanoir.from_torch(model, (x,), dynamic_batch=False)
    except FrontendError as e:
        return "torch.export could not trace" not in str(e)
    return True


CASES = [
    (Packed, (2, 3, 4), "TypeError", "fake tensors", True),
    (DataDependentLength, (2, 3), "GuardOnDataDependentSymNode", "data-dependent", True),
    (LiteralBatch, (2, 3), "UserError", "fixes the size of the dim", False),
]


@pytest.mark.parametrize(("cls", "shape", "kind", "meaning", "has_line"), CASES)
def test_export_failures_name_cause_line_and_hint_only_when_it_helps(
    cls: type, shape: tuple[int, ...], kind: str, meaning: str, has_line: bool
) -> None:
    """Each failure names torch's exception, what it means and (where torch's trace passes
    through the user's code) the user's line; the hint appears iff ``dynamic_batch=False``
    exports. Kills: the hint given on every failure (as before: Packed and
    DataDependentLength fail either way); the user frame taken as the innermost frame
    (torch's own); the retry dropped (LiteralBatch loses its hint)."""
    model, x = cls(), torch.randn(*shape)
    with pytest.raises(FrontendError) as info:
        nanoir.from_torch(model, (x,))
    text = str(info.value)
    assert f"cause: {kind}" in text and meaning in text
    if has_line:
        assert f"at {_line(cls)} in forward" in text
    assert ("dynamic_batch=False" in text) == _static_succeeds(model, x)
    assert "For more information" not in text  # torch's generic advice is dropped


def test_packed_sequence_names_the_torch_module_it_stopped_in() -> None:
    """The TypeError torch raises names only torch's frames: the message adds the user's
    line and the nn.LSTM frame the trace stopped in."""
    with pytest.raises(FrontendError) as info:
        nanoir.from_torch(Packed(), (torch.randn(2, 3, 4),))
    assert "inside torch at " in str(info.value) and "rnn.py" in str(info.value)


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


@pytest.mark.parametrize(
    "make", [torch.jit.script, lambda m: torch.jit.trace(m, torch.randn(2, 4))]
)
def test_script_modules_are_refused_without_the_hint(make) -> None:  # noqa: ANN001
    """torch.export never takes a ScriptModule, static or not: said up front, no hint.
    Kills: the check removed (torch's ValueError with the dynamic_batch hint)."""
    with pytest.raises(FrontendError) as info:
        nanoir.from_torch(make(Linear()), (torch.randn(2, 4),))
    text = str(info.value)
    assert "TorchScript module" in text and "never takes" in text
    assert "dynamic_batch" not in text


class StarArgs(nn.Module):
    """``forward(self, a, *rest)``: torch.export wants the dynamic shapes of ``*rest`` as a
    tuple under its name."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, a: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return self.fc(a) + rest[0] * rest[1]


def test_star_args_modules_export_with_the_dynamic_batch() -> None:
    """Kills: one dynamic-shape spec per input regardless of the signature (torch.export
    refuses the structure)."""
    model = StarArgs()
    xs = (torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4))
    module = nanoir.from_torch(model, xs)
    assert str(module).count("tensor<?x4xf32>") >= 3
    big = tuple(torch.randn(5, 4) for _ in range(3))
    (y,) = nanoir.run(module, *(t.numpy() for t in big))
    torch.testing.assert_close(torch.from_numpy(y), model(*big), rtol=1e-5, atol=1e-5)
