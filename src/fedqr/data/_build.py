"""The work of :meth:`fedqr.data.FederatedData.from_arrays` and ``from_file``: rows checked,
split into training and test rows, classes counted and features standardised."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from numpy.typing import ArrayLike

from fedqr.data import _prepare as prep
from fedqr.data._labels import (
    LabelNames,
    as_labels,
    check_model_fits,
    classes_of,
    warn_empty_classes,
)

if TYPE_CHECKING:
    from fedqr.data.federated import FederatedData


def sample_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of one sample of ``x [n, *shape]``: ``(H, W)`` (a 3-D ``x``) is a 1-channel
    image ``(1, H, W)``, as the built-in MNIST is, so that image models accept it.

    Raises
    ------
    ValueError
        For a 4-D ``x`` laid out channels last, ``[n, H, W, C]`` with C of 1, 3 or 4 and more
        than 4 "channels" first: it would be read as C = H channels of H x C images (and
        standardised per row of pixels), which nothing else would tell.
    """
    if len(shape) == 3 and shape[2] in (1, 3, 4) and shape[0] > 4:
        h, w, c = shape
        raise ValueError(
            f"x must hold images channels first, [n, C, H, W], got x of shape "
            f"[n, {h}, {w}, {c}]: that is {c}-channel images laid out channels last; move "
            f"the axis first with np.moveaxis(x, -1, 1) (and x_test's), or flatten them to "
            f"rows [n, {h * w * c}] if they are not images")
    return (1, *shape) if len(shape) == 2 else shape


def build(cls: type[FederatedData], *, x: ArrayLike, y: ArrayLike, client: ArrayLike,
          x_test: ArrayLike | None, y_test: ArrayLike | None, test_share: float | None,
          standardize: bool, num_classes: int | None, input_shape: Sequence[int] | None,
          name: str, seed: int, feature_names: Sequence[str] | None,
          names: LabelNames | None = None) -> FederatedData:
    """:meth:`~fedqr.data.FederatedData.from_arrays` (see there); ``names`` says how messages
    name the labels and ``num_classes`` (a file's label column and array)."""
    if not isinstance(standardize, bool):  # "no" would standardise
        raise ValueError(f"standardize must be True or False, got standardize={standardize!r}")
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, got name={name!r}")
    xf, shape = prep.as_features("x", x)
    yf = as_labels("y", y, length=xf.shape[0])
    cf, client_names = prep.map_clients("client", client, length=xf.shape[0])
    prep.check_finite("x", xf)
    xf, yf, cf, xt, yt = prep.test_set(xf, yf, cf, x_test=x_test, y_test=y_test,
                                       test_share=test_share, seed=seed)
    k, empty = classes_of(num_classes, yf, yt, held_out=x_test is None and y_test is None,
                          names=names)
    if num_classes is not None:
        check_model_fits(k, xf.shape[1], names=names if names is not None else LabelNames())
    shape = (sample_shape(shape) if input_shape is None
             else prep.check_input_shape(input_shape, xf.shape[1]))
    stats = None
    if standardize:
        stats = prep.feature_stats(xf, channels=prep.image_channels(shape))
        xf, xt = prep.apply_stats(xf, stats), prep.apply_stats(xt, stats)
        prep.warn_far_outside(xf, xt, stats, feature_names)
    data = cls(x=xf, y=yf, client=cf, x_test=xt, y_test=yt, num_classes=k,
               input_shape=shape, name=name, client_names=client_names,
               standardization=stats,
               feature_names=None if feature_names is None else tuple(feature_names))
    warn_empty_classes(empty, k)
    return data
