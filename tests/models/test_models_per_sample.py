"""Per-sample clipped gradient sums against a naive per-sample autograd loop (float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from fedqr.models.cnn import femnist_cnn
from fedqr.models.per_sample import ClippedSums, clipped_grad_sums

OFFSETS = [0, 4, 4, 9, 12, 13]  # 5 segments, one empty; chunks of 5 straddle them


def naive(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, clip: float, norm: str,
          offsets: list[int]) -> tuple[torch.Tensor, list[int], list[float]]:
    """One autograd call per sample: clipped sums, clipped counts and loss sums per segment."""
    params = list(model.parameters())
    segs = len(offsets) - 1
    grad = torch.zeros(segs, sum(p.numel() for p in params), dtype=x.dtype)
    clipped, losses = [0] * segs, [0.0] * segs
    for k in range(segs):
        for j in range(offsets[k], offsets[k + 1]):
            loss = F.cross_entropy(model(x[j:j + 1]), y[j:j + 1])
            g = torch.cat([t.flatten() for t in torch.autograd.grad(loss, params)])
            size = float(g.abs().sum() if norm == "l1" else g.norm())
            scale = min(1.0, clip / size)
            grad[k] += scale * g
            clipped[k] += scale < 1.0
            losses[k] += float(loss.detach())
    return grad, clipped, losses


class OddNet(nn.Module):
    """Strides, dilation, asymmetric padding, a wide conv (kernel-row path), a bias-free conv,
    and a Linear layer applied to a 3-D input."""

    def __init__(self) -> None:
        super().__init__()
        self.narrow = nn.Conv2d(2, 9, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2))
        self.wide = nn.Conv2d(9, 4, (3, 4), stride=(1, 2), padding=(2, 1), dilation=(2, 1))
        self.plain = nn.Conv2d(4, 3, 2, bias=False)
        self.token = nn.Linear(4, 5)
        self.head = nn.Linear(15, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.plain(torch.tanh(self.wide(torch.tanh(self.narrow(x)))))
        h = torch.relu(self.token(h.flatten(2)[:, :, :4]))  # [n, 3, 5]
        return self.head(h.flatten(1))


@pytest.fixture(scope="module")
def cnn_batch() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    model = femnist_cnn(generator=gen).double()
    x = torch.rand(13, 1, 28, 28, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 62, (13,), generator=gen)
    return model, x, y


@pytest.mark.parametrize("method", ["ghost", "vmap"])
@pytest.mark.parametrize(("norm", "clip"), [("l1", 570.0), ("l2", 7.68)])  # near the median
def test_paper_cnn_matches_naive_loop(cnn_batch, method: str, norm: str, clip: float) -> None:
    model, x, y = cnn_batch
    ref, ref_clipped, ref_loss = naive(model, x, y, clip=clip, norm=norm, offsets=OFFSETS)
    assert 0 < sum(ref_clipped) < 13  # some samples clipped, some not
    out = clipped_grad_sums(model, x, y, clip=clip, norm=norm, offsets=OFFSETS, chunk_rows=5,
                            method=method)
    torch.testing.assert_close(out.grad, ref, atol=1e-5 * float(ref.abs().max()), rtol=0)
    assert float((out.grad - ref).abs().max()) < 1e-12
    assert out.clipped.tolist() == ref_clipped
    assert out.rows.tolist() == np.diff(OFFSETS).tolist()
    np.testing.assert_allclose(out.loss_sum.numpy(), ref_loss, rtol=1e-12)
    assert all(p.grad is None for p in model.parameters())


def test_channels_last_model_matches_naive_loop(cnn_batch) -> None:
    model, x, y = cnn_batch
    ref, ref_clipped, _ = naive(model, x, y, clip=7.68, norm="l2", offsets=OFFSETS)
    cl = femnist_cnn().double()
    cl.load_state_dict(model.state_dict())
    cl = cl.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    out = clipped_grad_sums(cl, x.contiguous(memory_format=torch.channels_last), y, clip=7.68,
                            norm="l2", offsets=OFFSETS, chunk_rows=5)
    assert float((out.grad - ref).abs().max()) < 1e-12
    assert out.clipped.tolist() == ref_clipped


@pytest.mark.parametrize(("norm", "clip"), [("l1", 0.3), ("l2", 0.1)])
def test_general_conv_and_linear_layers_match_naive_loop(norm: str, clip: float) -> None:
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    model = OddNet().double()
    x = torch.randn(7, 2, 11, 13, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 6, (7,), generator=gen)
    ref, ref_clipped, _ = naive(model, x, y, clip=clip, norm=norm, offsets=[0, 3, 7])
    for method in ("ghost", "vmap"):
        out = clipped_grad_sums(model, x, y, clip=clip, norm=norm, offsets=[0, 3, 7],
                                chunk_rows=2, method=method)
        assert float((out.grad - ref).abs().max()) < 1e-12, method
        assert out.clipped.tolist() == ref_clipped


def test_infinite_clip_is_the_plain_gradient_sum(cnn_batch) -> None:
    model, x, y = cnn_batch
    out = clipped_grad_sums(model, x, y, clip=math.inf, norm="l2", chunk_rows=4)
    loss = F.cross_entropy(model(x), y, reduction="sum")
    full = torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()))])
    torch.testing.assert_close(out.grad[0], full, atol=1e-12, rtol=0)
    assert out.clipped.tolist() == [0]
    assert float(out.loss_sum[0]) == pytest.approx(float(loss.detach()), rel=1e-12)


def test_float32_chunks_agree_with_float64(cnn_batch) -> None:
    model, x, y = cnn_batch
    ref = clipped_grad_sums(model, x, y, clip=0.05, norm="l2").grad
    m32 = femnist_cnn()
    m32.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    out = clipped_grad_sums(m32, x.float(), y, clip=0.05, norm="l2", chunk_rows=3).grad
    torch.testing.assert_close(out.double(), ref, atol=1e-5 * float(ref.abs().max()), rtol=0)


def test_unsupported_layers_need_vmap() -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.PReLU(), nn.Linear(3, 2))
    x, y = torch.randn(5, 4), torch.zeros(5, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"PReLU at 1.*use method='vmap'"):
        clipped_grad_sums(model, x, y, clip=1.0, norm="l2")
    out = clipped_grad_sums(model, x, y, clip=1.0, norm="l2", method="vmap")
    assert out.grad.shape == (1, sum(p.numel() for p in model.parameters()))


def _ghost_and_vmap(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, clip: float,
                    norm: str) -> tuple[ClippedSums, ClippedSums]:
    """Both methods' sums over two segments of the rows (chunks of 16), with equal clip
    counts."""
    off = [0, 10, x.shape[0]]
    ghost = clipped_grad_sums(model, x, y, clip=clip, norm=norm, offsets=off, chunk_rows=16)
    exact = clipped_grad_sums(model, x, y, clip=clip, norm=norm, offsets=off, chunk_rows=16,
                              method="vmap")
    assert ghost.clipped.tolist() == exact.clipped.tolist()
    return ghost, exact


def _norm_model(kind: str) -> tuple[nn.Module, tuple[int, ...]]:
    """A model with a normalisation layer, and its input shape."""
    if kind == "groupnorm-conv":
        return nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(),
                             nn.Linear(4 * 6 * 6, 3)), (1, 8, 8)
    if kind == "layernorm-conv":  # normalised over (C, H, W): the weight is [4, 6, 6]
        return nn.Sequential(nn.Conv2d(1, 4, 3), nn.LayerNorm([4, 6, 6]), nn.ReLU(),
                             nn.Flatten(), nn.Linear(4 * 6 * 6, 3)), (1, 8, 8)
    if kind == "layernorm-tokens":  # 5 positions per row share the affine map
        return nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Flatten(),
                             nn.Linear(5 * 8, 3)), (5, 6)
    norm = {"groupnorm": nn.GroupNorm(4, 16), "layernorm": nn.LayerNorm(16),
            "layernorm-nobias": nn.LayerNorm(16, bias=False), "rmsnorm": nn.RMSNorm(16)}[kind]
    return nn.Sequential(nn.Linear(10, 16), norm, nn.Tanh(), nn.Linear(16, 3)), (10,)


@pytest.mark.parametrize("kind", ["groupnorm", "layernorm", "layernorm-nobias", "rmsnorm",
                                  "groupnorm-conv", "layernorm-conv", "layernorm-tokens"])
@pytest.mark.parametrize(("norm", "clip"), [("l2", 0.7), ("l1", 2.0), ("l2", float("inf"))])
def test_ghost_takes_normalisation_layers(kind: str, norm: str, clip: float) -> None:
    """GroupNorm, LayerNorm and RMSNorm (each row normalised by its own statistics) on the
    ghost path give vmap's clipped sums and clip counts; the affine parameters are drawn
    away from their (1, 0) start so that a wrong x_hat term shows."""
    gen = torch.Generator().manual_seed(7)
    model, shape = _norm_model(kind)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=gen))
    x = torch.randn(37, *shape, generator=gen)
    y = torch.randint(0, 3, (37,), generator=gen)
    ghost, exact = _ghost_and_vmap(model, x, y, clip=clip, norm=norm)
    if clip < float("inf"):
        assert int(exact.clipped.sum()) > 0
    torch.testing.assert_close(ghost.grad, exact.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ghost.loss_sum, exact.loss_sum)


def _conv_model(kind: str) -> tuple[nn.Module, tuple[int, ...]]:
    """A model with a grouped or a 1-D convolution, and its input shape."""
    if kind == "depthwise":  # a MobileNet block: depthwise 3x3, then pointwise
        return nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, groups=4), nn.ReLU(),
                             nn.Conv2d(4, 8, 1), nn.Flatten(), nn.Linear(8 * 6 * 6, 3)), (4, 6, 6)
    if kind == "grouped-wide":  # 4 groups of 10 channels: 10 x 3 x 3 > 64, the width path
        return nn.Sequential(nn.Conv2d(40, 20, 3, padding=2, groups=4, dilation=2, stride=2),
                             nn.Tanh(), nn.Flatten(), nn.Linear(20 * 4 * 4, 3)), (40, 7, 7)
    return nn.Sequential(nn.Conv1d(3, 6, 5, padding=2), nn.ReLU(),
                         nn.Conv1d(6, 4, 3, stride=2, groups=2, dilation=2, padding=1),
                         nn.Flatten(), nn.Linear(4 * 9, 3)), (3, 20)


@pytest.mark.parametrize("kind", ["depthwise", "grouped-wide", "conv1d"])
@pytest.mark.parametrize(("norm", "clip"), [("l2", 1.0), ("l1", 20.0), ("l2", float("inf"))])
def test_ghost_takes_grouped_and_one_dimensional_convolutions(kind: str, norm: str,
                                                              clip: float) -> None:
    """A grouped convolution (channel blocks folded into the rows) and a Conv1d (a Conv2d of
    height 1) on the ghost path give vmap's clipped sums and clip counts."""
    gen = torch.Generator().manual_seed(5)
    model, shape = _conv_model(kind)
    x = torch.randn(29, *shape, generator=gen)
    y = torch.randint(0, 3, (29,), generator=gen)
    ghost, exact = _ghost_and_vmap(model, x, y, clip=clip, norm=norm)
    torch.testing.assert_close(ghost.grad, exact.grad, rtol=1e-5,
                               atol=1e-6 * float(exact.grad.abs().max()))


def test_a_layer_called_twice_needs_vmap() -> None:
    layer = nn.Linear(3, 3)
    model = nn.Sequential(layer, nn.Tanh(), layer)
    with pytest.raises(ValueError, match="called once per forward"):
        clipped_grad_sums(model, torch.randn(2, 3), torch.zeros(2, dtype=torch.int64),
                          clip=1.0, norm="l1")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"clip": 0.0}, ValueError, r"clip must be > 0 \(inf disables clipping\), got clip=0.0"),
        ({"clip": "1"}, TypeError, "clip must be a real number"),
        ({"chunk_rows": 0}, ValueError, "chunk_rows must be an integer >= 1, got chunk_rows=0"),
        ({"offsets": [0, 5]}, ValueError, "offsets must be non-decreasing, start at 0 and end"),
        ({"offsets": [0, 3, 2, 4]}, ValueError, "offsets must be non-decreasing"),
        ({"norm": "l3"}, ValueError, "norm must be one of 'l1', 'l2', got norm='l3'"),
        ({"method": "fast"}, ValueError, "method must be one of 'ghost', 'vmap', got method="),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    model = nn.Linear(3, 2)
    args: dict[str, object] = {"clip": 1.0, "norm": "l2", **kwargs}
    with pytest.raises(error, match=message):
        clipped_grad_sums(model, torch.randn(4, 3), torch.zeros(4, dtype=torch.int64),
                          **args)  # type: ignore[arg-type]


def test_labels_must_match_rows() -> None:
    with pytest.raises(ValueError, match=r"y must have shape \(4,\)"):
        clipped_grad_sums(nn.Linear(3, 2), torch.randn(4, 3), torch.zeros(3, dtype=torch.int64),
                          clip=1.0, norm="l2")


def test_vmap_chunks_are_bounded_by_the_models_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 12M-parameter model ran 256 rows at a time through vmap and stopped with the
    allocator's 'can't allocate memory'; the chunk is now capped by the model's size, with
    the same sums."""
    import fedqr.models.per_sample as ps

    model = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.Linear(16, 3))
    x = torch.randn(40, 6, generator=torch.Generator().manual_seed(0))
    y = torch.arange(40) % 3
    whole = clipped_grad_sums(model, x, y, clip=0.5, norm="l2", method="vmap")
    seen: list[int] = []
    chunk = ps._vmap_chunk

    def spy(model: nn.Module, xc: torch.Tensor, *args: object, **kw: object) -> object:
        seen.append(xc.shape[0])
        return chunk(model, xc, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ps, "_vmap_chunk", spy)
    num_p = sum(p.numel() for p in model.parameters())
    monkeypatch.setattr(ps, "VMAP_CHUNK_BYTES", 7 * ps.VMAP_ROW_COPIES * num_p * 4)
    capped = clipped_grad_sums(model, x, y, clip=0.5, norm="l2", method="vmap")
    assert max(seen) == 7 and sum(seen) == 40
    torch.testing.assert_close(capped.grad, whole.grad, rtol=1e-5, atol=1e-6)
