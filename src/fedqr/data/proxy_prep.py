"""A public proxy prepared as the deployment's rows are: standardised or not, per channel or
per feature.

The planner's twin trains on the proxy with the deployment's learning rate, clip and noise,
so the proxy's features must have the deployment's scale. A deployment of images is
standardised per channel (one mean and std over a channel's pixels), one of rows feature by
feature, one read with ``--no-standardize`` not at all; a proxy that was prepared otherwise
trains at another effective step size. ``python bench/proxy_standardisation.py`` (a
re-creation of a tester's deployment: 5% of MNIST as a file, 20 clients of 150 rows with
three digits each, logistic regression, Gaussian eps 2, ``--sample-rate auto``, planned on
FEMNIST's built-in digits): with the file's pixels standardised one by one and the proxy
by one mean and std, the plan was 12.1% worse than the best schedule of a real grid; with
the proxy standardised per pixel too, 1.3% (``docs/planner.md``, "What the planner gets
wrong").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fedqr.data.federated import FederatedData
from fedqr.data.source import DataSource, OwnData
from fedqr.data.spec import DataSpec

__all__ = ["Preparation", "prepared_built_in", "prepared_like"]


@dataclass(frozen=True)
class Preparation:
    """How the deployment's rows were prepared, which a public proxy follows.

    Attributes
    ----------
    standardize:
        Whether the deployment's features were standardised by their training rows.
    input_shape:
        The deployment's sample shape: ``(C, H, W)`` images are standardised per channel,
        other shapes feature by feature (``None``: the proxy's own shape decides).
    """

    standardize: bool = True
    input_shape: tuple[int, ...] | None = None

    @classmethod
    def of(cls, source: DataSource) -> Preparation:
        """The preparation of the deployment ``source``: a built-in set is standardised per
        channel of its images; the rows of a data file were standardised where they record
        their statistics (``FederatedData.standardization``: the command line's
        ``--standardize``, ``standardize=True``), else used as given (``--no-standardize``;
        also a ``FederatedData`` made from a built-in set's rows: give its ``DataSpec``)."""
        if isinstance(source, OwnData):
            return cls(standardize=source.data.standardization is not None,
                       input_shape=tuple(source.data.input_shape))
        if isinstance(source, DataSpec):
            shape = source.build().dataset.image_shape
            return cls(standardize=True, input_shape=None if shape is None else tuple(shape))
        return cls()

    def shape_for(self, num_features: int) -> tuple[int, ...] | None:
        """The deployment's sample shape where it holds ``num_features`` features (otherwise
        the proxy does not fit the model, which the planner refuses naming both counts)."""
        shape = self.input_shape
        return shape if shape is not None and math.prod(shape) == num_features else None


def prepared_like(pool: FederatedData, like: Preparation) -> FederatedData:
    """A built-in data set's rows (standardised by one mean and std) standardised as the
    deployment's: standardisation is affine invariant, so standardising the built-in rows
    per feature (or per channel) equals standardising its raw pixels so, to float32
    rounding. A deployment that is not standardised gets the pool as it is: the built-in
    rows are standardised, and their raw scale is not the deployment's to guess."""
    shape = like.shape_for(pool.num_features)
    if not like.standardize or shape is None or (
            len(shape) == 3 and shape[0] == 1 and len(pool.input_shape) == 3):
        return pool  # one channel of images: already standardised by one mean and std
    return FederatedData.from_arrays(
        x=pool.x, y=pool.y, client=pool.client, x_test=pool.x_test, y_test=pool.y_test,
        standardize=True, num_classes=pool.num_classes, input_shape=shape,
        name=pool.name, feature_names=pool.feature_names)


def prepared_built_in(spec: DataSpec, like: Preparation, *, seed: int) -> DataSource:
    """A built-in public set prepared as the deployment's rows (:func:`prepared_like`): the
    recipe itself where that changes nothing, else its rows (``seed``: the proxy's)."""
    pool = FederatedData.from_client_data(spec.build())
    prepared = prepared_like(pool, like)
    return spec if prepared is pool else OwnData(data=prepared, seed=seed)
